"""Multi-task fine-tuning against single-task runs at the same budget: CoNLL-2003 NER
and SST-2 on one encoder (``recipes/multitask.yaml``) vs ``recipes/ner.yaml`` and
``recipes/sst2.yaml`` alone.

Budget: each single-task run trains ``--steps`` optimizer steps; the multi-task run trains
``2 x --steps`` steps with equal task shares (``model.task.init_args.temperature: .inf``), so each task gets
about as many batches as alone, and the three runs cost about the same in all. Every run: the
same checkpoint (the recipes', all-MiniLM-L6-v2), learning rate, warm-up ratio, batch size,
max length, random batch order and seed; no validation; the last weights are tested (NER on
``eng.testb``, SST-2 on the GLUE dev set). Usage (data under ``$BERTKIT_DATA_DIR``, default
``../shared/data``)::

    python benchmarks/multitask.py --steps 400 --seeds 1 2 3

writes ``benchmarks/results/multitask.json``: per seed and run the test scores (points) and the
training time; per task the mean over seeds of multi-task minus single-task.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import common

RECIPES = common.ROOT / "recipes"
SCORES = {"ner": "f1", "sst2": "accuracy"}


def run(recipe: str, steps: int, seed: int, args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    """Fit ``recipe`` for ``steps`` steps, test the last weights; scores in points."""
    settings = {"trainer.max_steps": steps, "data.group_by_length": False} | extra
    namespace = argparse.Namespace(**vars(args), seed=seed, epochs=1, set=[], bf16=False)
    composed = common.compose_quiet(RECIPES / recipe, namespace, settings)
    start = time.perf_counter()
    composed.trainer.fit(composed.model, datamodule=composed.datamodule)
    seconds = time.perf_counter() - start
    scores = composed.trainer.test(composed.model, datamodule=composed.datamodule, verbose=False)[0]
    steps_done = composed.trainer.global_step
    scores = {k: v if k.endswith("loss") else 100 * v for k, v in scores.items()}
    return {"steps": steps_done, "train_seconds": seconds, "test": scores}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="optimizer steps per task")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--output", type=Path, default=common.ROOT / "benchmarks" / "results" / "multitask.json")
    args = parser.parse_args()
    root = os.environ.get("BERTKIT_DATA_DIR", str(common.ROOT.parent / "shared" / "data"))
    os.environ["BERTKIT_DATA_DIR"] = root
    shared = {"batch_size": args.batch_size, "lr": args.lr, "warmup_ratio": args.warmup_ratio}
    shared["max_length"] = args.max_length
    settings = argparse.Namespace(**shared)

    runs: dict[str, dict[str, Any]] = {}
    for seed in args.seeds:  # the result file is rewritten after each seed
        single = {task: run(f"{task}.yaml", args.steps, seed, settings, {}) for task in SCORES}
        multi = run("multitask.yaml", 2 * args.steps, seed, settings, {"model.task.init_args.temperature": math.inf})
        runs[str(seed)] = {"single": single, "multi": multi}
        result = {
            "benchmark": "multi-task (NER + SST-2, one encoder) vs single-task at the same steps per task",
            "settings": {"steps_per_task": args.steps, "seeds": args.seeds, **shared, "task_temperature": "inf"},
            "machine": common.machine(),
            "runs": runs,
            "multi_minus_single": summary(runs),
        }
        common.write_result(args.output, result)
        print(seed, result["multi_minus_single"], flush=True)


def summary(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per task: multi-task minus single-task score, per seed, with mean and spread."""
    difference = {}
    for task, score in SCORES.items():
        multi = [r["multi"]["test"][f"test/{task}/{score}"] for r in runs.values()]
        single = [r["single"][task]["test"][f"test/{score}"] for r in runs.values()]
        deltas = [m - s for m, s in zip(multi, single, strict=True)]
        sd = statistics.stdev(deltas) if len(deltas) > 1 else math.nan
        difference[task] = {
            "score": score,
            "single_mean": statistics.fmean(single),
            "multi_mean": statistics.fmean(multi),
        }
        difference[task] |= {"mean": statistics.fmean(deltas), "sd": sd, "values": deltas}
    return difference


if __name__ == "__main__":
    main()
