"""Distillation's teacher run on every batch against its targets cached once
(``model.teacher.cache``), and TinyBERT's hidden-state matching (``model.teacher.hidden_weight``),
on CoNLL-2003 NER with MiniLM: the same data, batches and seeds on every side, each run in a
process of its own.

The teacher: MiniLM fine-tuned by the NER recipe for ``--epochs`` epochs on the first
``--sentences`` sentences of ``eng.train``. Each student (MiniLM's first 2 layers, ``model.num_layers``) trains
``--epochs`` epochs on those sentences (the data re-read every epoch, where a cache pays),
validation off. Sides, per seed, in this order:

- ``labels``: the labels alone (no teacher);
- ``on-the-fly``: the teacher run on every batch (T 2, alpha 0.5);
- ``cached``: ``model.teacher.cache`` with an empty cache folder: the teacher's pass over the
  training features, then every step reads its targets;
- ``cached-read``: the same again, reading the file the run before wrote;
- ``hidden``: ``on-the-fly`` plus TinyBERT's hidden-state loss (``hidden_weight`` 1; MiniLM's
  widths are equal, so no projection; student layer m matched to teacher layer 3m).

Per run: the seconds from the start of ``fit`` to the end of the last step (the cache's pass
included), each epoch's seconds, and entity F1 on ``eng.testb``.

    BERTKIT_DATA_DIR=../shared/data python benchmarks/teacher_cache.py   # writes benchmarks/results/teacher_cache.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, write_result
from provenance import header, started

OUT = ROOT / "benchmarks" / "results" / "teacher_cache.json"
SIDES = ("labels", "on-the-fly", "cached", "cached-read", "hidden")
CONLL = "ner/conll2003"


def subset(source: Path, target: Path, sentences: int) -> None:
    """The first ``sentences`` sentences of a CoNLL file (blank-line separated), the document
    markers kept."""
    out, count = [], 0
    for line in source.read_text(encoding="utf-8").splitlines(keepends=True):
        out.append(line)
        if not line.strip():
            count += 1
            if count >= sentences:
                break
    target.write_text("".join(out), encoding="utf-8")


def side_settings(side: str, teacher: Path) -> dict[str, Any]:
    if side == "teacher":
        return {}
    settings: dict[str, Any] = {"model.num_layers": 2}
    if side != "labels":
        settings.update({"model.teacher.path": str(teacher), "model.teacher.temperature": 2.0})
        settings["model.teacher.cache"] = side.startswith("cached")
        settings["model.teacher.hidden_weight"] = 1.0 if side == "hidden" else 0.0
    return settings


def child(side: str, seed: int, epochs: int, work: Path) -> dict[str, Any]:
    import pytorch_lightning as pl

    from bertkit import compose

    overrides = {
        **side_settings(side, work / "teacher" / "checkpoints" / "last.ckpt"),
        "seed_everything": seed, "data.seed": seed, "data.data_dir": str(work / "data"),
        "trainer.max_epochs": epochs, "trainer.limit_val_batches": 0,
        "trainer.enable_progress_bar": False, "trainer.default_root_dir": str(work / side), "trainer.logger": False,
    }  # fmt: skip
    epoch_starts: list[float] = []

    class Stamp(pl.Callback):
        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            epoch_starts.append(time.perf_counter())

    run = compose(ROOT / "recipes" / "ner.yaml", overrides=overrides)
    run.trainer.callbacks.append(Stamp())
    start = time.perf_counter()
    run.trainer.fit(run.model, datamodule=run.datamodule)
    end = time.perf_counter()
    result = run.trainer.test(run.model, datamodule=run.datamodule, verbose=False)[0]
    bounds = [*epoch_starts, end]
    return {
        "f1": 100 * result["test/f1"],
        "fit_s": end - start,
        "before_first_epoch_s": epoch_starts[0] - start,
        "epoch_s": [b - a for a, b in zip(bounds, bounds[1:], strict=False)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # side seed work
    args = parser.parse_args()
    if args.child:
        side, seed, work = args.child
        print(json.dumps(child(side, int(seed), args.epochs, Path(work))))
        return
    provenance = started("teacher_cache.py")
    data = Path(os.environ.get("BERTKIT_DATA_DIR", ROOT.parent / "shared" / "data")) / CONLL
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as work:
            (Path(work) / "data").mkdir()
            subset(data / "eng.train", Path(work) / "data" / "eng.train", args.sentences)
            for split in ("eng.testa", "eng.testb"):
                (Path(work) / "data" / split).symlink_to(data / split)
            env = {**os.environ, "BERTKIT_CACHE": str(Path(work) / "cache")}
            for side in ("teacher", *SIDES):
                command = [sys.executable, __file__, "--child", side, str(seed), work, "--epochs", str(args.epochs)]
                out = subprocess.run(command, capture_output=True, text=True, env=env)
                if out.returncode != 0:
                    raise SystemExit(out.stderr[-3000:])
                found = {"seed": seed, **json.loads(out.stdout.strip().splitlines()[-1])}
                print(side, found, flush=True)
                if side != "teacher":
                    runs[side].append(found)
    table = {}
    for side, found in runs.items():
        table[side] = {
            "f1_mean": round(statistics.mean(r["f1"] for r in found), 2),
            "f1_sd": round(statistics.stdev(r["f1"] for r in found), 2) if len(found) > 1 else None,
            "fit_s_median": round(statistics.median(r["fit_s"] for r in found), 1),
            "before_first_epoch_s_median": round(statistics.median(r["before_first_epoch_s"] for r in found), 1),
            "epoch_s_median": [
                round(statistics.median(e), 1) for e in zip(*(r["epoch_s"] for r in found), strict=True)
            ],
            "runs": found,
        }
    fly = table["on-the-fly"]["fit_s_median"]
    for side in ("cached", "cached-read"):
        table[side]["speed_up_over_on_the_fly"] = round(fly / table[side]["fit_s_median"], 2)
    result = header("teacher_cache", provenance["command"], provenance["commit"], repeats=len(args.seeds))
    result["settings"] = {
        "seeds": args.seeds, "sentences": args.sentences, "epochs": args.epochs, "batch_size": 32,
        "student_layers": 2, "temperature": 2.0, "alpha": 0.5, "hidden_weight": 1.0,
    }  # fmt: skip
    result["sides"] = table
    write_result(OUT, result)
    print(json.dumps({s: {k: v for k, v in x.items() if k != "runs"} for s, x in table.items()}, indent=1))


if __name__ == "__main__":
    main()
