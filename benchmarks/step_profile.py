"""Where a bertkit training step's time goes: ``torch.profiler`` over steady-state steps of a
recipe, the self time split into matrix products (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``),
the fused AdamW and everything else (the largest ops named), and the matrix products' own
GFLOP/s (the profiler's FLOP count) against the matmul ceiling measured in the same run
(``common.matmul_ceiling``). When the products already run near the ceiling, only the rest can
still shrink: the speed a step can gain at all is bounded by it. The profiler adds a little to
every op it records, most to the many small ones, so "other" is a bound from above.

    BERTKIT_DATA_DIR=../shared/data python benchmarks/step_profile.py --task mrpc   # writes benchmarks/results/step_profile_mrpc.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from common import ROOT, add_common_arguments, compose_quiet, matmul_ceiling, write_result
from glue_vs_transformers import TASKS as GLUE_TASKS
from provenance import commit, header
from torch.profiler import ProfilerActivity, profile

TASKS = GLUE_TASKS | {"ner": "ner/conll2003"}  # task -> data folder under BERTKIT_DATA_DIR
PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
OPTIMIZER = ("aten::_fused_adamw_",)


class Profiled(pl.Callback):
    """Profiles training batches ``skip`` … ``skip + steps - 1`` (the fit runs one more)."""

    def __init__(self, skip: int, steps: int) -> None:
        self.skip, self.steps, self.tokens = skip, steps, 0
        self.profiler = profile(activities=[ProfilerActivity.CPU], with_flops=True)

    def on_train_batch_start(self, trainer: pl.Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == self.skip:
            self.profiler.__enter__()
        if batch_idx == self.skip + self.steps:
            self.profiler.__exit__(None, None, None)
        elif batch_idx >= self.skip:
            self.tokens += int(batch["attention_mask"].sum())


def breakdown(events: Any, steps: int) -> dict[str, Any]:
    """Self CPU time per category (ms per step and share), the products' GFLOP/s, the top ops."""
    total = sum(e.self_cpu_time_total for e in events)
    products = [e for e in events if e.key in PRODUCTS]
    product_us = sum(e.self_cpu_time_total for e in products)
    optimizer_us = sum(e.self_cpu_time_total for e in events if e.key in OPTIMIZER)
    rest = sorted((e for e in events if e.key not in PRODUCTS + OPTIMIZER), key=lambda e: -e.self_cpu_time_total)

    def share(us: float) -> float:
        return round(us / total, 3)

    return {
        "step_ms": round(total / steps / 1000, 1),
        "share": {
            "matrix_products": share(product_us),
            "optimizer": share(optimizer_us),
            "other": share(total - product_us - optimizer_us),
        },
        "matrix_products_gflops": round(sum(e.flops for e in products) / product_us / 1000, 1),
        "largest_other_ops": {e.key: share(e.self_cpu_time_total) for e in rest[:12]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="mrpc")
    add_common_arguments(parser, epochs=1, lr=None)
    parser.add_argument("--skip", type=int, default=5, help="batches run before profiling")
    parser.add_argument("--steps", type=int, default=30, help="batches profiled")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    data = Path(os.environ.get("BERTKIT_DATA_DIR", ROOT.parent / "shared" / "data")) / TASKS[args.task]
    recipe = ROOT / "recipes" / f"{args.task}.yaml"
    measured = commit()
    ceiling = matmul_ceiling(1024, dtype=torch.bfloat16 if args.bf16 else torch.float32, repeats=5) / 1e9
    overrides = {"trainer.limit_train_batches": args.skip + args.steps + 1}
    overrides |= {"data.data_dir": str(data), "trainer.default_root_dir": "runs/step_profile"}
    run = compose_quiet(recipe, args, overrides)
    callback = Profiled(args.skip, args.steps)
    run.trainer.callbacks.append(callback)
    run.trainer.fit(run.model, datamodule=run.datamodule)
    result = header(
        "where a training step's time goes (torch.profiler, self CPU time)",
        f"BERTKIT_DATA_DIR=../shared/data python benchmarks/step_profile.py --task {args.task}" + " --bf16" * args.bf16,
        measured,
        cpu_threads=torch.get_num_threads(),
    )
    result["settings"] = {"task": args.task, "precision": "bf16-mixed" if args.bf16 else "32-true"}
    result["settings"] |= {"batch_size": args.batch_size, "skip": args.skip, "steps": args.steps}
    result["matmul_ceiling_gflops"] = round(ceiling, 1)
    result |= breakdown(callback.profiler.key_averages(), args.steps)
    result["matrix_products_ceiling_share"] = round(result["matrix_products_gflops"] / ceiling, 3)
    result["real_tokens_per_step"] = round(callback.tokens / args.steps, 1)
    suffix = "_bf16" if args.bf16 else ""
    output = args.output or ROOT / "benchmarks" / "results" / f"step_profile_{args.task}{suffix}.json"
    write_result(output, result)
    print(json.dumps({k: result[k] for k in ("step_ms", "share", "matrix_products_gflops", "matmul_ceiling_gflops")}))


if __name__ == "__main__":
    main()
