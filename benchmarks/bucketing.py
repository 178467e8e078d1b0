"""What bucketed padding (``data.pad_to_multiple_of``) buys a padded, compiled encoder, on the CPU.

A CUDA graph (``model.compile reduce-overhead``) or a statically compiled kernel serves one batch
shape: each new (batch size, length) is compiled and recorded anew. Two parts, on the real
training sets of the recipes (the padded encoder, ``model.unpad false``, batch 32):

- ``shapes``: over one training epoch in the recipe's random order, the distinct batch shapes
  (graphs to record) and the padding share (padded positions / computed positions), for
  ``pad_to_multiple_of`` none, 8, 16, 32 and 64. No model runs.
- ``steps``: the ``tiny`` encoder (2 layers x 128) trained by ``bertkit fit`` for ``--steps``
  steps of NER (softmax tagger), eager and with ``model.compile reduce-overhead`` (on a CPU:
  inductor with static shapes and no CUDA graphs), each without and with buckets of 16: the
  graphs dynamo compiled, the seconds of the whole fit (compilation included, with an empty
  inductor cache each) and the median step time of the last half of the steps. What it says about a GPU: how many recordings a run needs, not their speed.

    BERTKIT_DATA_DIR=../shared/data python benchmarks/bucketing.py   # writes benchmarks/results/bucketing.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from common import ROOT, write_result
from host_overhead import TASKS, composed
from provenance import commit, header

OUT = ROOT / "benchmarks" / "results" / "bucketing.json"
MULTIPLES = (None, 8, 16, 32, 64)


def shapes(task: str, args: argparse.Namespace, multiple: int | None) -> dict[str, Any]:
    """Distinct batch shapes and the padding share over one training epoch."""
    run = composed(task, args, 1, {"model.unpad": False, "data.pad_to_multiple_of": multiple})
    run.datamodule.setup("fit")
    seen: set[tuple[int, int]] = set()
    real = computed = batches = 0
    for batch in run.datamodule.train_dataloader():
        mask = batch["attention_mask"]
        seen.add(tuple(mask.shape))
        real += int(mask.sum())
        computed += mask.numel()
        batches += 1
    return {
        "batches": batches,
        "shapes": len(seen),
        "lengths": sorted({t for _, t in seen}),
        "padding_share": round(1 - real / computed, 4),
    }


class StepTimes(pl.Callback):
    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self.starts.append(time.perf_counter())


def steps(args: argparse.Namespace, compiled: bool, multiple: int | None) -> dict[str, Any]:
    """A compiled or eager fit of the tiny NER tagger: graphs compiled, fit seconds, steady step time."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch._inductor.config.fx_graph_cache = False  # each side compiles from nothing: no earlier side's kernels
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(dir=args.work)
    overrides = {"model.unpad": False, "data.pad_to_multiple_of": multiple, "trainer.enable_progress_bar": False}
    if compiled:
        overrides["model.compile"] = "reduce-overhead"
    run = composed("ner", args, args.steps, overrides)
    run.trainer.callbacks.append(times := StepTimes())
    started = time.perf_counter()
    run.trainer.fit(run.model, datamodule=run.datamodule)
    seconds = time.perf_counter() - started
    gaps = [b - a for a, b in zip(times.starts, times.starts[1:], strict=False)]
    steady = gaps[len(gaps) // 2 :]
    return {
        "graphs_compiled": int(counters["stats"]["unique_graphs"]),
        "fit_s": round(seconds, 1),
        "steady_ms_per_step": round(1e3 * statistics.median(steady), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bucketing")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args()
    if "BERTKIT_DATA_DIR" not in os.environ:
        raise SystemExit("set BERTKIT_DATA_DIR to the real data folder")
    args.work.mkdir(parents=True, exist_ok=True)
    measured = commit()
    results: dict[str, Any] = {"shapes": {}, "steps": {}}
    for task in args.tasks:
        results["shapes"][task] = {str(m): shapes(task, args, m) for m in MULTIPLES}
        print(task, json.dumps(results["shapes"][task]), flush=True)
    for compiled in (False, True):
        for multiple in (None, 16):
            name = f"{'reduce-overhead' if compiled else 'eager'}, pad_to_multiple_of {multiple}"
            results["steps"][name] = steps(args, compiled, multiple)
            print(name, json.dumps(results["steps"][name]), flush=True)
    result = header(
        "Bucketed padding: batch shapes and padding per epoch, and compiled fits of a tiny padded encoder (CPU)",
        " ".join(["BERTKIT_DATA_DIR=../shared/data python benchmarks/bucketing.py", *sys.argv[1:]]),
        measured,
    )
    result["settings"] = {"batch_size": args.batch_size, "max_length": args.max_length, "steps": args.steps}
    result["repeats"] = "one epoch per setting (shapes); one fit per side (steps)"
    result["results"] = results
    write_result(args.output, result)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
