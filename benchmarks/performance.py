"""Every speed comparison with transformers, re-measured in one run at a stated short budget: the
training benchmarks (NER, SST-2, MRPC, RTE, SQuAD, pre-training) with the current recipes, both
sides in the same run, and the inference benchmark; one JSON, from which ``docs/gen_results.py``
makes the Results page's performance table.

Every training comparison runs twice: in fp32 (the recipes' precision) and with both sides in bf16
autocast (bertkit ``trainer.precision=bf16-mixed``, transformers ``bf16=True``; ``--no-bf16``
skips it, as it should be on a CPU without native bf16, ``bertkit.utils.precision.native_bf16``).

Each row also gives the share of a measured matmul ceiling that a side's training reaches: the
ceiling is the GFLOP/s of a 1024 x 1024 x 1024 matrix product in the row's precision (``torch.mm``,
best of 5, measured before and after the runs, the higher kept); a step's useful FLOPs are counted on real
tokens only, the same for both sides (padding is not useful work), by

    FLOPs per real token = 6 (P + 2 L H t)  [+ 6 p H V for masked-LM pre-training]

with P = L (4 H^2 + 2 H I) the weights of the blocks' matrix products (L layers, hidden size H,
intermediate size I), t the token-weighted mean sequence length (attention's scores and weighted
sum: 2 H t multiply-adds per token and layer), p the masked fraction (0.15) and V the
vocabulary (the masked-LM decoder, on masked tokens only). The factor 6 is the forward (2) and
backward (4) multiply-add count per weight (Kaplan et al. 2020, section 2.1). Embeddings, LayerNorm,
biases and task heads are left out. The count is of useful work, not of the arithmetic a side does:
bertkit's sentence-level heads (SST-2, MRPC, RTE) run the last block's query, output and MLP on
[CLS] alone, about 14 % of the counted work for MiniLM that they skip, so their share overstates
bertkit's use of the hardware by up to that much. Inference rows count the forward's third of the
same formula (2 (P + 2 L H t) per real token of the texts, as bertkit's tokenizer makes them),
against the ceiling of the variant's precision: int8 variants against an int8 product's
operations/s (``torch._int_mm``, measured around the inference benchmark).

    BERTKIT_DATA_DIR=../shared/data python benchmarks/performance.py   # writes benchmarks/results/performance.json

On a machine whose speed drifts (a shared VM), one run per side can land a ratio 10 % either way;
``--repeats N`` runs each training comparison N times, both sides each time, and keeps the run
with the median ratio (every ratio is listed in its row).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from common import matmul_ceiling
from pretraining_vs_transformers import VOCAB
from provenance import commit, header

from bertkit.model.config import BertConfig
from bertkit.model.pretrained import resolve_pretrained
from bertkit.utils.io import atomic_path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "performance.json"
MASKED_FRACTION = 0.15
TRAINING = {  # task: (script and its short-budget arguments, the target ratio)
    "ner": (["ner_vs_transformers.py", "--epochs", "1", "--train-sentences", "2000"], 2.0),
    "sst2": (["glue_vs_transformers.py", "--task", "sst2", "--epochs", "1", "--train-examples", "4000"], 2.0),
    "mrpc": (["glue_vs_transformers.py", "--task", "mrpc", "--epochs", "1", "--train-examples", "1000"], 2.0),
    "rte": (["glue_vs_transformers.py", "--task", "rte", "--epochs", "1", "--train-examples", "800"], 2.0),
    "squad": (["squad_vs_transformers.py", "--epochs", "1", "--train-articles", "3", "--eval-articles", "2"], 2.0),
    "pretraining": (["pretraining_vs_transformers.py", "--steps", "100", "--warmup-steps", "10"], 2.5),
}
INFERENCE = ["inference_vs_transformers.py"]


def flops_per_token(config: BertConfig, length: float, vocab: int | None) -> float:
    """The module docstring's formula; ``vocab`` None: no masked-LM decoder."""
    L, H, F = config.num_hidden_layers, config.hidden_size, config.intermediate_size
    blocks = 6 * (L * (4 * H * H + 2 * H * F) + 2 * L * H * length)
    return blocks + (6 * MASKED_FRACTION * H * vocab if vocab else 0)


def run_script(arguments: list[str], output: Path) -> dict[str, Any]:
    """One benchmark script, in its own process, writing ``output``; its result."""
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / arguments[0]), *arguments[1:], "--output", str(output)], check=True
    )
    return json.loads(output.read_text())


def speedup(result: dict[str, Any]) -> float:
    """bertkit's real tokens/s over transformers' in one comparison's result."""
    return result["bertkit"]["tokens_per_second"] / result["transformers"]["tokens_per_second"]


def training_row(task: str, result: dict[str, Any], target: float | None) -> dict[str, Any]:
    """Tokens/s of both sides, their ratio, and each side's GFLOP/s (``target`` None: no target
    for this precision)."""
    if task == "pretraining":
        vocab = len((VOCAB / "vocab.txt").read_text(encoding="utf-8").splitlines())
        config = BertConfig.preset(result["settings"]["preset"], vocab_size=vocab)
        length = result["settings"]["max_length"]  # packed instances: about max_length each
    else:
        config = BertConfig.from_pretrained(resolve_pretrained("all-MiniLM-L6-v2"))
        length, vocab = result["bertkit"]["attention_length"], None
    flops = flops_per_token(config, length, vocab)
    ours, theirs = result["bertkit"]["tokens_per_second"], result["transformers"]["tokens_per_second"]
    return {
        "task": task,
        "bertkit_tokens_per_second": round(ours, 1),
        "transformers_tokens_per_second": round(theirs, 1),
        "ratio": round(speedup(result), 2),
        "target": target,
        "gflop_per_token": round(flops / 1e9, 4),
        "bertkit_gflops": round(ours * flops / 1e9, 1),
        "transformers_gflops": round(theirs * flops / 1e9, 1),
    }


def inference_shares(runs: list[dict[str, Any]], ceilings: dict[str, float]) -> list[dict[str, Any]]:
    """Each inference run with its real tokens/s and its share of the matmul ceiling of its
    precision (``ceilings``: fp32, bf16 and int8; bf16 and int8 for the variants named so, fp32
    otherwise; forward FLOPs of the encoder on those tokens)."""
    config = BertConfig.from_pretrained(resolve_pretrained("all-MiniLM-L6-v2"))
    out = []
    for run in runs:
        tokens_per_second = run["sentences_per_second"] * run["tokens"] / run["texts"]
        gflops = tokens_per_second * flops_per_token(config, run["attention_length"], None) / 3 / 1e9
        used = next((ceilings[p] for p in ("bf16", "int8") if p in run["variant"]), ceilings["fp32"])
        out.append(run | {"tokens_per_second": round(tokens_per_second, 1), "ceiling_share": round(gflops / used, 3)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="the tasks to run (and inference), default all")
    parser.add_argument("--no-bf16", action="store_true", help="skip the bf16 training comparisons")
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each training comparison; the row is the median ratio's run"
    )
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: expected at least 1")
    measured = commit()
    ceilings = [matmul_ceiling(1024, repeats=5) / 1e9]
    bf16_ceilings = [matmul_ceiling(1024, dtype=torch.bfloat16, repeats=5) / 1e9]
    rows, results = [], {}
    precisions = ["fp32"] + ([] if args.no_bf16 else ["bf16"])
    with tempfile.TemporaryDirectory() as tmp:
        for precision in precisions:
            for task, (arguments, target) in TRAINING.items():
                if args.only is None or task in args.only:
                    bf16 = precision == "bf16"
                    key = f"{task}_bf16" if bf16 else task
                    trials = [
                        run_script(arguments + ["--bf16"] * bf16, Path(tmp) / f"{key}_{i}.json")
                        for i in range(args.repeats)
                    ]
                    trials.sort(key=speedup)
                    results[key] = trials[(len(trials) - 1) // 2]  # the median run (the lower of an even count)
                    row = training_row(task, results[key], None if bf16 else target)
                    if args.repeats > 1:
                        row["ratios"] = [round(speedup(trial), 2) for trial in trials]
                    rows.append({"precision": precision} | row)
                    print(rows[-1], flush=True)
        if args.only is None or "inference" in args.only:
            int8_ceilings = [matmul_ceiling(1024, dtype=torch.int8, repeats=5) / 1e9]
            results["inference"] = run_script(INFERENCE, Path(tmp) / "inference.json")
            int8_ceilings.append(matmul_ceiling(1024, dtype=torch.int8, repeats=5) / 1e9)
    ceilings.append(matmul_ceiling(1024, repeats=5) / 1e9)
    bf16_ceilings.append(matmul_ceiling(1024, dtype=torch.bfloat16, repeats=5) / 1e9)
    ceiling, bf16_ceiling = max(ceilings), max(bf16_ceilings)
    fp32_speed = {r["task"]: r["transformers_tokens_per_second"] for r in rows if r["precision"] == "fp32"}
    for row in rows:
        used = ceiling if row["precision"] == "fp32" else bf16_ceiling
        for side in ("bertkit", "transformers"):
            row[f"{side}_ceiling_share"] = round(row[f"{side}_gflops"] / used, 3)
        if row["precision"] == "bf16" and row["task"] in fp32_speed:  # against transformers' default fp32
            row["ratio_to_transformers_fp32"] = round(row["bertkit_tokens_per_second"] / fp32_speed[row["task"]], 2)
    runs = "one run" if args.repeats == 1 else f"median of {args.repeats} runs"
    result = header(
        f"training and inference speed against transformers, short budget, {runs}",
        "BERTKIT_DATA_DIR=../shared/data python benchmarks/performance.py"
        + f" --repeats {args.repeats}" * (args.repeats > 1),
        measured,
        cpu_threads=torch.get_num_threads(),
    )
    result["matmul_ceiling_gflops"] = {
        "before": round(ceilings[0], 1),
        "after": round(ceilings[1], 1),
        "used": round(ceiling, 1),
    }
    result["bf16_matmul_ceiling_gflops"] = {
        "before": round(bf16_ceilings[0], 1),
        "after": round(bf16_ceilings[1], 1),
        "used": round(bf16_ceiling, 1),
    }
    result["training"] = rows
    if "inference" in results:
        inference = results["inference"]
        int8_ceiling = max(int8_ceilings)
        result["int8_matmul_ceiling_gops"] = {
            "before": round(int8_ceilings[0], 1),
            "after": round(int8_ceilings[1], 1),
            "used": round(int8_ceiling, 1),
        }
        runs = inference_shares(inference["runs"], {"fp32": ceiling, "bf16": bf16_ceiling, "int8": int8_ceiling})
        result["inference"] = {"settings": inference["settings"], "ratios": inference["ratios"], "runs": runs}
    result["budgets"] = {task: " ".join(TRAINING[task][0][1:]) for task in TRAINING}
    result["comparisons"] = {
        key: {k: v for k, v in r.items() if k not in ("runs",)} for key, r in results.items() if key != "inference"
    }
    with atomic_path(args.output) as tmp_file:
        tmp_file.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
