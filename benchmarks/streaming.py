"""Memory-mapped shards against litdata chunks for pre-training data (``bertkit prepare
storage=shards|litdata``): the same instances of the Brown corpus (128 tokens, NSP, dynamic
masks), prepared once each, then per storage, each in a process of its own so that its peak
memory is its own, in alternating order for ``--repeats`` rounds:

- ``read``: every instance once in the training order (shards: a random permutation of
  ``Shards[i]``; litdata: ``StreamingDataset``'s shuffled stream), unmasked: MB/s of the prepared
  folder's size;
- ``fit``: ``trainer.fit`` of ``recipes/pretrain_bert.yaml`` (``--preset``, batch 32, validation
  off) for ``--steps`` steps after ``--warmup``: optimizer steps per second, masking and collation
  included;
- the process's peak resident memory (``ru_maxrss``).

    python benchmarks/streaming.py    # writes benchmarks/results/streaming.json
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, write_result
from provenance import header, started

CORPUS = ROOT.parent / "shared" / "data" / "corpus" / "brown.txt"
OUT = ROOT / "benchmarks" / "results" / "streaming.json"


def folder_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def read_all(path: Path, storage: str) -> float:
    """Seconds to read every instance once, in a training order."""
    start = time.perf_counter()
    if storage == "shards":
        import torch
        from bertkit_plugins.pretraining.shards import Shards

        shards = Shards(path)
        for i in torch.randperm(len(shards), generator=torch.Generator().manual_seed(0)).tolist():
            shards[i]
    else:
        from bertkit.data.streaming import StreamedFeatures

        features = StreamedFeatures(path, to_feature=lambda item, epoch, seed: item)
        for _ in features.training_loader(1, collate_fn=list):
            pass
    return time.perf_counter() - start


def fit_rate(path: Path, preset: str, warmup: int, steps: int) -> float:
    """Optimizer steps per second of pre-training on ``path``, after ``warmup`` steps."""
    import pytorch_lightning as pl

    from bertkit import compose

    stamps: list[float] = []

    class Stamp(pl.Callback):
        def on_train_batch_start(self, *args: Any) -> None:
            stamps.append(time.perf_counter())

    overrides = {
        "model.preset": preset, "model.task.init_args.dynamic_masking": True, "data.train_file": str(path),
        "data.validation_file": None, "data.batch_size": 32, "model.max_length": 128,
        "trainer.max_steps": warmup + steps + 1, "trainer.enable_progress_bar": False, "trainer.logger": False,
        "trainer.enable_checkpointing": False, "trainer.callbacks": [],
    }  # fmt: skip
    run = compose(ROOT / "recipes" / "pretrain_bert.yaml", overrides=overrides)
    run.trainer.callbacks.append(Stamp())
    run.trainer.fit(run.model, datamodule=run.datamodule)
    return steps / (stamps[warmup + steps] - stamps[warmup])


def child(args: argparse.Namespace) -> None:
    seconds = read_all(args.path, args.storage)
    rate = fit_rate(args.path, args.preset, args.warmup, args.steps)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"read_seconds": seconds, "steps_per_second": rate, "peak_rss_mb": peak}))


def prepare(storage: str, output: Path) -> dict[str, Any]:
    from bertkit_plugins.pretraining.prepare import prepare as run

    start = time.perf_counter()
    path = run(str(CORPUS), str(output), "all-MiniLM-L6-v2", max_seq_length=128, workers=2, storage=storage)["train"]
    manifest = json.loads((path / "manifest.json").read_text())
    return {
        "path": path,
        "prepare_seconds": time.perf_counter() - start,
        "folder_mb": folder_mb(path),
        "instances": manifest["instances"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--child", choices=["shards", "litdata"], help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.storage = args.child
        return child(args)
    if not CORPUS.is_file():
        raise SystemExit(f"{CORPUS}: not found (the shared data folder)")
    provenance = started("streaming.py")
    with tempfile.TemporaryDirectory() as tmp:
        prepared = {s: prepare(s, Path(tmp) / s) for s in ("shards", "litdata")}
        runs: dict[str, list[dict[str, float]]] = {s: [] for s in prepared}
        common = ["--preset", args.preset, "--warmup", str(args.warmup), "--steps", str(args.steps)]
        for round_ in range(args.repeats):
            for storage in ("shards", "litdata") if round_ % 2 == 0 else ("litdata", "shards"):
                command = [sys.executable, __file__, "--child", storage, "--path", str(prepared[storage]["path"])]
                out = subprocess.run(command + common, capture_output=True, text=True, check=True)
                runs[storage].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(storage, runs[storage][-1], flush=True)
    table = {}
    for storage, found in runs.items():
        p = prepared[storage]
        mb_s = [p["folder_mb"] / r["read_seconds"] for r in found]
        table[storage] = {
            "prepare_seconds": round(p["prepare_seconds"], 1),
            "folder_mb": round(p["folder_mb"], 1),
            "instances": p["instances"],
            "read_mb_per_s": [round(x, 1) for x in mb_s],
            "read_mb_per_s_median": round(statistics.median(mb_s), 1),
            "steps_per_second": [round(r["steps_per_second"], 3) for r in found],
            "steps_per_second_median": round(statistics.median(r["steps_per_second"] for r in found), 3),
            "peak_rss_mb": [round(r["peak_rss_mb"]) for r in found],
        }
    result = header("streaming", provenance["command"], provenance["commit"], repeats=args.repeats)
    result["settings"] = {
        "corpus": "brown.txt", "max_seq_length": 128, "vocab": "all-MiniLM-L6-v2", "preset": args.preset,
        "batch_size": 32, "warmup": args.warmup, "steps": args.steps, "dynamic_masking": True, "num_workers": 0,
    }  # fmt: skip
    result["storage"] = table
    result["ratio_litdata_to_shards"] = {
        "read_mb_per_s": round(table["litdata"]["read_mb_per_s_median"] / table["shards"]["read_mb_per_s_median"], 3),
        "steps_per_second": round(
            table["litdata"]["steps_per_second_median"] / table["shards"]["steps_per_second_median"], 3
        ),
    }
    write_result(OUT, result)
    print(json.dumps(result["storage"], indent=2), result["ratio_litdata_to_shards"])


if __name__ == "__main__":
    main()
