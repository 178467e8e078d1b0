"""What the benchmarks against Hugging Face transformers share: matched settings on both sides,
the timed bertkit fit, and the result file.

Both sides use the same checkpoint, examples, max length, batch size, learning rate, warm-up
ratio, weight decay (0.01), gradient clipping (1.0), epochs and seed; the seed also sets bertkit's
``data.seed`` (its batch order, as transformers' order follows its seed). Throughput is real
(non-padding) tokens processed per second of training, with validation off on both sides.
``--set KEY=VALUE`` changes one bertkit setting and ``--bertkit-only`` skips transformers: an
ablation (``benchmarks/seeds.py`` runs them over seeds).
"""

from __future__ import annotations

import argparse
import inspect
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from bertkit import Composed, compose
from bertkit.utils.io import atomic_path

ROOT = Path(__file__).resolve().parents[1]


def add_common_arguments(parser: argparse.ArgumentParser, epochs: int, lr: float | None) -> None:
    """Arguments every benchmark takes (lr None: the recipe's)."""
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=42, help="seed_everything and bertkit's data.seed")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a bertkit override (YAML value), repeatable"
    )
    parser.add_argument("--bertkit-only", action="store_true", help="skip the transformers side")
    parser.add_argument(
        "--bf16", action="store_true", help="both sides in bf16 autocast (bertkit bf16-mixed, transformers bf16=True)"
    )


def overrides_from(pairs: list[str]) -> dict[str, Any]:
    """``--set`` pairs as recipe overrides (``data.group_by_length=false`` -> {key: False})."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set {pair!r}: expected KEY=VALUE, e.g. data.group_by_length=false")
        out[key] = yaml.safe_load(value)
    return out


def compose_quiet(recipe: Path, args: argparse.Namespace, overrides: dict[str, Any]) -> Composed:
    """The recipe with the benchmark's settings, and no validation, checkpoints, logs or bars."""
    settings = {
        "seed_everything": args.seed,
        "data.seed": args.seed,
        "data.batch_size": args.batch_size,
        "model.max_length": args.max_length,
        "model.warmup_ratio": args.warmup_ratio,
        "trainer.max_epochs": args.epochs,
        "trainer.limit_val_batches": 0,
        "trainer.callbacks": [],
        "trainer.logger": False,
        "trainer.enable_checkpointing": False,
        "trainer.enable_progress_bar": False,
        "trainer.precision": "bf16-mixed" if args.bf16 else "32-true",
    }
    if args.lr is not None:
        settings["model.learning_rate"] = args.lr
    return compose(recipe, overrides=settings | overrides | overrides_from(args.set))


def fit_bertkit(run: Composed, epochs: int) -> dict[str, Any]:
    """Fit timed, then test; training tokens counted over the featurized training split."""
    start = time.perf_counter()
    run.trainer.fit(run.model, datamodule=run.datamodule)
    seconds = time.perf_counter() - start
    lengths = [len(f["input_ids"]) for f in run.datamodule.features["train"]]
    scores = run.trainer.test(run.model, datamodule=run.datamodule, verbose=False)[0]
    return timing(seconds, lengths, epochs) | {"test": scores}


def hf_trainer(model: Any, train_rows: list[dict], collator: Any, args: argparse.Namespace, out_dir: Path) -> Any:
    """A transformers ``Trainer`` with the matched settings (``Trainer`` defaults otherwise:
    random order, AdamW, linear schedule)."""
    from transformers import Trainer, TrainingArguments

    # transformers 5 takes a ratio as a float warmup_steps; 4.x has warmup_ratio.
    ratio_key = "warmup_ratio" if "warmup_ratio" in inspect.signature(TrainingArguments).parameters else "warmup_steps"
    training = TrainingArguments(
        output_dir=str(out_dir / "hf"),
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=2 * args.batch_size,
        learning_rate=args.lr,
        weight_decay=0.01,
        **{ratio_key: args.warmup_ratio},
        num_train_epochs=args.epochs,
        max_grad_norm=1.0,
        seed=args.seed,
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        bf16=args.bf16,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    return Trainer(model=model, args=training, train_dataset=train_rows, data_collator=collator)


def fit_transformers(trainer: Any, train_rows: list[dict], epochs: int) -> dict[str, Any]:
    """``trainer.train()`` timed, with the same token count as ``fit_bertkit``."""
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    return timing(seconds, [len(r["input_ids"]) for r in train_rows], epochs)


def timing(seconds: float, lengths: list[int], epochs: int) -> dict[str, Any]:
    """Seconds, real tokens and tokens/s of ``epochs`` over sequences of ``lengths`` tokens, and
    their token-weighted mean length (sum of squares / sum: what attention's cost per token
    grows with)."""
    tokens = epochs * sum(lengths)
    return {
        "train_seconds": seconds,
        "train_tokens": tokens,
        "tokens_per_second": tokens / seconds,
        "attention_length": sum(n * n for n in lengths) / sum(lengths),
    }


def machine() -> dict[str, Any]:
    import transformers

    return {
        "cpu_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Write the JSON result atomically, with what it does not state of its provenance filled in
    (``provenance.completed``: command, commit, date, machine, repeats)."""
    from provenance import completed

    with atomic_path(path) as tmp_file:
        tmp_file.write_text(json.dumps(completed(result), indent=2) + "\n")


def fine_tune(recipe: str, work: Path, batches: int, *extra: str) -> Path:
    """``bertkit fit`` of ``recipe`` (relative to the repository) for one epoch of ``batches``
    batches, validation off, into ``work``, with ``extra`` options after the recipe's; its last
    checkpoint."""
    subprocess.run(
        [str(Path(sys.executable).with_name("bertkit")), "fit", "--config", str(ROOT / recipe),
         f"--trainer.default_root_dir={work}", "--trainer.max_epochs=1", f"--trainer.limit_train_batches={batches}",
         "--trainer.limit_val_batches=0", "--trainer.enable_progress_bar=false", "--overwrite=true", *extra],
        check=True,
    )  # fmt: skip
    return work / "checkpoints" / "last.ckpt"


def matmul_ceiling(size: int, device: str = "cpu", dtype: torch.dtype = torch.float32, repeats: int = 3) -> float:
    """Dense matmul FLOP/s of (size, size) x (size, size) products in ``dtype`` on ``device``: the
    best of ``repeats`` timings of 10 products, after 3 untimed ones. ``torch.int8``: int8
    products with int32 results (``torch._int_mm``), in operations/s."""
    if dtype == torch.int8:
        a, b = (torch.randint(-128, 128, (size, size), device=device, dtype=dtype) for _ in range(2))
        product = torch._int_mm
    else:
        a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
        product = torch.mm
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    for _ in range(3):
        product(a, b)
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(10):
            product(a, b)
        sync()
        best = min(best, time.perf_counter() - start)
    return 10 * 2 * size**3 / best
