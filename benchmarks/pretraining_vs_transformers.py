"""Pre-training step throughput and peak memory: bertkit vs Hugging Face ``BertForPreTraining`` +
``DataCollatorForLanguageModeling``, same config, batch, sequence length and instances.

    python benchmarks/pretraining_vs_transformers.py [--preset mini] [--steps 60] [--warmup-steps 10]

Both sides train MLM + NSP with dynamic 15 % masking (80/10/10) on the same instances (Brown
corpus, prepared once by ``bertkit prepare`` into runs/bench-pretrain), AdamW, clipping 1.0,
each through its own trainer (Lightning / transformers ``Trainer``). Each side runs in its own
process so peak memory (RSS on CPU, ``max_memory_allocated`` on GPU) is its own. Throughput is
sequences (and real tokens) per second over the steps after ``--warmup-steps``. On a GPU, and
with ``--bf16`` on a CPU, both use bf16 autocast. Writes benchmarks/results/pretraining_vs_transformers[_gpu].json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from common import ROOT, machine, write_result

CORPUS = ROOT.parent / "shared" / "data" / "corpus" / "brown.txt"
VOCAB = ROOT.parent / "shared" / "data" / "vocab" / "bert-base-cased"
SHARDS = ROOT / "runs" / "bench-pretrain"


class StepClock:
    """Wall time of every optimizer step (the same hook point on both sides)."""

    def __init__(self) -> None:
        self.times: list[float] = [time.perf_counter()]

    def tick(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.times.append(time.perf_counter())

    def result(self, warmup: int, batch_size: int, tokens_per_sequence: float) -> dict[str, float]:
        seconds = self.times[-1] - self.times[warmup]
        steps = len(self.times) - 1 - warmup
        return {
            "timed_steps": steps,
            "seconds": seconds,
            "seconds_per_step": seconds / steps,
            "sequences_per_second": steps * batch_size / seconds,
            "tokens_per_second": steps * batch_size * tokens_per_sequence / seconds,
        }


def peak_memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_bertkit(args: argparse.Namespace) -> dict[str, Any]:
    import pytorch_lightning as pl

    from bertkit import compose

    clock = StepClock()

    class Clock(pl.Callback):
        def on_train_batch_end(self, *_: Any) -> None:
            clock.tick()

    gpu = torch.cuda.is_available()
    run = compose(
        ROOT / "recipes" / "pretrain_bert.yaml",
        overrides={
            "seed_everything": args.seed,
            "model.preset": args.preset,
            "model.vocab_file": str(VOCAB),
            "model.lowercase": False,
            "model.task.init_args.dynamic_masking": True,
            "data.data_dir": str(SHARDS),
            "data.train_file": "train",
            "data.validation_file": None,
            "data.batch_size": args.batch_size,
            "model.max_length": args.max_length,
            "trainer.max_steps": args.steps + args.warmup_steps,
            "trainer.limit_val_batches": 0,
            "trainer.callbacks": [],
            "trainer.logger": False,
            "trainer.enable_checkpointing": False,
            "trainer.enable_progress_bar": False,
            "trainer.precision": "bf16-mixed" if gpu or args.bf16 else "32-true",
            "trainer.accelerator": "gpu" if gpu else "cpu",
        },
    )
    run.trainer.callbacks.append(Clock())
    run.trainer.fit(run.model, datamodule=run.datamodule)
    lengths = run.datamodule.features["train"].lengths
    return clock.result(args.warmup_steps, args.batch_size, float(lengths.mean()))


def run_transformers(args: argparse.Namespace) -> dict[str, Any]:
    from bertkit_plugins.pretraining.shards import Shards
    from transformers import (
        BertConfig,
        BertForPreTraining,
        BertTokenizerFast,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from bertkit.model.config import BertConfig as Ours

    shards = Shards(SHARDS / "train")
    n = (args.steps + args.warmup_steps) * args.batch_size
    rows = []
    for i in range(min(n, len(shards))):
        item = shards[i]
        a = item["segment_a_length"]
        ids = item["input_ids"].tolist()
        rows.append(
            {
                "input_ids": ids,
                "token_type_ids": [0] * a + [1] * (len(ids) - a),
                "next_sentence_label": item["sentence_label"],
            }
        )
    tokenizer = BertTokenizerFast.from_pretrained(str(VOCAB))
    config = BertConfig(**Ours.preset(args.preset, vocab_size=tokenizer.vocab_size).to_dict())
    torch.manual_seed(args.seed)
    model = BertForPreTraining(config)
    collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm_probability=0.15)
    clock = StepClock()

    class Clock(TrainerCallback):
        def on_step_end(self, *_: Any, **__: Any) -> None:
            clock.tick()

    gpu = torch.cuda.is_available()
    training = TrainingArguments(
        output_dir=str(SHARDS / "hf"),
        per_device_train_batch_size=args.batch_size,
        learning_rate=1e-4,
        weight_decay=0.01,
        max_grad_norm=1.0,
        max_steps=args.steps + args.warmup_steps,
        seed=args.seed,
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=not gpu,
        bf16=gpu or args.bf16,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=training, train_dataset=rows, data_collator=collator, callbacks=[Clock()])
    trainer.train()
    mean_length = sum(len(r["input_ids"]) for r in rows) / len(rows)
    return clock.result(args.warmup_steps, args.batch_size, mean_length)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast on a CPU too (always on a GPU)")
    parser.add_argument(
        "--output", type=Path, default=None, help="default: benchmarks/results/pretraining_vs_transformers[_gpu].json"
    )
    parser.add_argument("--side", choices=["bertkit", "transformers"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # a child process: one side, result as JSON on the last line
        result = run_bertkit(args) if args.side == "bertkit" else run_transformers(args)
        print(json.dumps({**result, "peak_memory_mb": peak_memory_mb()}))
        return
    if not (SHARDS / "train" / "manifest.json").is_file():
        from bertkit_plugins.pretraining.prepare import prepare

        prepare(str(CORPUS), str(SHARDS), vocab=str(VOCAB), lowercase=False, max_seq_length=args.max_length, workers=2)
    sides = {}
    for side in ("bertkit", "transformers"):
        proc = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--side", side], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise SystemExit(f"{side} failed:\n{proc.stderr[-4000:]}")
        sides[side] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(side, sides[side], flush=True)
    gpu = torch.cuda.is_available()
    result = {
        "machine": machine(),
        "settings": {
            **{k: v for k, v in vars(args).items() if k not in ("side", "output")},
            "precision": "bf16-mixed" if gpu or args.bf16 else "fp32",
        },
        "bertkit": sides["bertkit"],
        "transformers": sides["transformers"],
        "throughput_ratio": sides["bertkit"]["sequences_per_second"] / sides["transformers"]["sequences_per_second"],
        "peak_memory_ratio": sides["bertkit"]["peak_memory_mb"] / sides["transformers"]["peak_memory_mb"],
    }
    name = "pretraining_vs_transformers_gpu.json" if gpu else "pretraining_vs_transformers.json"
    write_result(args.output or ROOT / "benchmarks" / "results" / name, result)
    print(json.dumps({k: result[k] for k in ("throughput_ratio", "peak_memory_ratio")}))


if __name__ == "__main__":
    main()
