"""LoRA against full fine-tuning of MiniLM (all-MiniLM-L6-v2): the same recipe, data, batches and
seeds on each side, each run in a process of its own.

Sides: ``full`` (the recipe as it is), ``lora-r8`` and ``lora-r16`` (``recipes/ner_lora.yaml``'s
adapter block with that rank, alpha = 2r, and its learning rate 5e-4). Tasks: CoNLL-2003 NER (the
NER recipe, CRF; scored on ``eng.testb``) and SST-2 (scored on ``dev.tsv``: the test file has no
labels). Each run trains one epoch of ``--batches`` batches of 32, validation off, with
``seed_everything`` and ``data.seed`` set to the seed. Per run: the test score, training tokens
per second (real tokens of the timed steps over their time, after ``--warmup`` steps), the
process's peak resident memory, and the size of its last checkpoint.

    BERTKIT_DATA_DIR=../shared/data python benchmarks/lora.py   # writes benchmarks/results/lora.json
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

OUT = ROOT / "benchmarks" / "results" / "lora.json"
TASKS = {"ner": ("ner.yaml", "test/f1", {}), "sst2": ("sst2.yaml", "test/accuracy", {"data.test_file": "dev.tsv"})}
SIDES = {"full": None, "lora-r8": 8, "lora-r16": 16}


def child(task: str, side: str, seed: int, batches: int, warmup: int, work: Path) -> dict[str, float]:
    import pytorch_lightning as pl

    from bertkit import compose

    recipe, score, overrides = TASKS[task]
    configs = [ROOT / "recipes" / recipe]
    rank = SIDES[side]
    overrides = {
        **overrides, "seed_everything": seed, "data.seed": seed, "data.batch_size": 32,
        "trainer.max_epochs": 1, "trainer.limit_train_batches": batches, "trainer.limit_val_batches": 0,
        "trainer.enable_progress_bar": False, "trainer.default_root_dir": str(work), "trainer.logger": False,
    }  # fmt: skip
    if rank is not None:
        configs.append(ROOT / "recipes" / "ner_lora.yaml")
        overrides.update({"model.adapter.r": rank, "model.adapter.alpha": 2.0 * rank})
    stamps: list[tuple[float, int]] = []

    class Stamp(pl.Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
            stamps.append((time.perf_counter(), int(batch["attention_mask"].sum())))

    run = compose(*configs, overrides=overrides)
    run.trainer.callbacks.append(Stamp())
    run.trainer.fit(run.model, datamodule=run.datamodule)
    end = time.perf_counter()
    timed = stamps[warmup:]
    tokens_per_s = sum(n for _, n in timed) / (end - timed[0][0])
    checkpoint = next(Path(work).rglob("last.ckpt"))
    result = run.trainer.test(run.model, datamodule=run.datamodule, verbose=False)[0]
    return {
        "score": 100 * result[score],
        "train_tokens_per_s": tokens_per_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "checkpoint_mb": checkpoint.stat().st_size / 1e6,
        "trainable": sum(p.numel() for p in run.model.parameters() if p.requires_grad),
        "total": sum(p.numel() for p in run.model.parameters()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=list(SIDES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        task, side, seed = args.child
        with tempfile.TemporaryDirectory() as work:
            print(json.dumps(child(task, side, int(seed), args.batches, args.warmup, Path(work))))
        return
    provenance = started("lora.py")
    runs: dict[str, dict[str, list[dict[str, float]]]] = {t: {s: [] for s in args.sides} for t in args.tasks}
    for task in args.tasks:
        for seed in args.seeds:
            for side in args.sides:
                command = [sys.executable, __file__, "--child", task, side, str(seed)]
                command += ["--batches", str(args.batches), "--warmup", str(args.warmup)]
                out = subprocess.run(command, capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(out.stderr[-3000:])
                runs[task][side].append({"seed": seed, **json.loads(out.stdout.strip().splitlines()[-1])})
                print(task, side, runs[task][side][-1], flush=True)
    table = {
        task: {
            side: {
                "score_mean": round(statistics.mean(r["score"] for r in found), 2),
                "score_sd": round(statistics.stdev(r["score"] for r in found), 2) if len(found) > 1 else None,
                "train_tokens_per_s_median": round(statistics.median(r["train_tokens_per_s"] for r in found)),
                "peak_rss_mb_max": round(max(r["peak_rss_mb"] for r in found)),
                "checkpoint_mb": round(found[0]["checkpoint_mb"], 1),
                "trainable": found[0]["trainable"],
                "total": found[0]["total"],
                "runs": found,
            }
            for side, found in sides.items()
        }
        for task, sides in runs.items()
    }
    result = header("lora", provenance["command"], provenance["commit"], repeats=len(args.seeds))
    result["settings"] = {"batches": args.batches, "batch_size": 32, "warmup": args.warmup, "seeds": args.seeds}
    result["tasks"] = table
    write_result(OUT, result)
    print(
        json.dumps(
            {t: {s: {k: v for k, v in x.items() if k != "runs"} for s, x in d.items()} for t, d in table.items()},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
