"""GPU training throughput, MFU and peak memory: bertkit vs Hugging Face transformers, BERT-base.

    python benchmarks/gpu_vs_transformers.py                       # every task, writes the JSON below
    python benchmarks/gpu_vs_transformers.py --tasks ner pretrain128 --steps 30

Both sides train BERT-base (the ``base`` preset, random init, the bert-base-cased vocabulary) in
bf16 autocast with AdamW and gradient clipping 1.0 on exactly the same features, in the same
random order, batch by batch: bertkit through its Lightning loop (``BertModule``, bf16-mixed),
transformers through its ``Trainer`` (``bf16=True``, SDPA attention, the ``BertFor*`` class of the
task, its padding collator). Features are made once by bertkit's heads: CoNLL-2003 ``eng.train``
(first sub-word labels, as run_ner), SST-2 ``train.tsv`` (run_glue), SQuAD v1.1 windows of 384
tokens with doc_stride 128 (run_qa; from ``dev-v1.1.json``, the file the data folder has), and
synthetic pre-training batches at 128 and 512 tokens (MLM on 15 % of the tokens, at most 20/80
per sequence, plus NSP), where content does not matter for speed.

bertkit runs in several variants: ``bertkit`` (defaults: unpadded encoder, the checkpoint's
attention dropout 0.1, so training attention runs through padded SDPA), ``bertkit_flash``
(``attention_dropout: 0``: FlashAttention varlen over the packed tokens) and
``bertkit_flash_compile`` (plus ``compile: true``) and ``bertkit_cudagraphs`` (the padded
encoder, ``compile: reduce-overhead``, batches padded to multiples of 16: CUDA graphs replayed
per batch shape).

Measured over ``--steps`` optimizer steps after ``--warmup`` (synchronised wall clock):
real (non-padding) tokens/s and sequences/s; model FLOP utilisation = useful training FLOPs/s
over the bf16 dense matmul rate measured in the same run (``--ceiling-size`` cubed, bf16). Useful
FLOPs per sequence of t real tokens, forward: 24·L·H²·t (the 12·H² weights of each block's
linear layers, 2 FLOPs per multiply-add) + 4·L·H·t² (attention scores and their weighted sum),
plus 2·M·(H² + H·V) for M MLM predictions; training = 3 × forward. Padding, and the
``[CLS]``-only last block bertkit computes for classification, are not credited: both sides are
scored on the same useful work. Peak memory is ``torch.cuda.max_memory_allocated``.

Data: ``--data-dir`` (default ``$BERTKIT_DATA_DIR``, else ``.bench-data`` in the repository, else
``../shared/data``) holding ner/conll2003/eng.train, classification/sst2/train.tsv,
qa/squad/dev-v1.1.json and vocab/bert-base-cased. Writes benchmarks/results/gpu_vs_transformers.json.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from common import ROOT, machine, matmul_ceiling, write_result
from provenance import started

from bertkit import BertConfig, BertModule
from bertkit.data.collate import collate

TASKS = ("ner", "sst2", "squad", "pretrain128", "pretrain512")
VARIANTS = {
    "bertkit": {},
    "bertkit_flash": {"attention_dropout": 0.0},
    "bertkit_flash_compile": {"attention_dropout": 0.0, "compile": True},
    "bertkit_cudagraphs": {"unpad": False, "compile": "reduce-overhead", "pad_to_multiple_of": 16},
}
ENCODER_KEYS = ("input_ids", "token_type_ids")


def data_dir(given: str | None) -> Path:
    for candidate in (given, os.environ.get("BERTKIT_DATA_DIR"), ROOT / ".bench-data", ROOT.parent / "shared" / "data"):
        if candidate and (Path(candidate) / "vocab" / "bert-base-cased" / "vocab.txt").is_file():
            return Path(candidate)
    raise SystemExit("no data folder with vocab/bert-base-cased: pass --data-dir or set BERTKIT_DATA_DIR")


# ----- tasks: a bertkit head, features, the matching transformers class -----


def make_head(task: str) -> Any:
    if task == "ner":
        from bertkit_plugins.token_tagging import TokenClassification

        return TokenClassification(["PER", "LOC", "ORG", "MISC"])
    if task == "sst2":
        from bertkit_plugins.sequence_classification import SequenceClassification

        return SequenceClassification(labels=["0", "1"])
    if task == "squad":
        from bertkit_plugins.question_answering import QuestionAnswering

        return QuestionAnswering()
    from bertkit_plugins.pretraining import PreTraining

    return PreTraining()


def synthetic_pretraining(n: int, length: int, vocab_size: int, seed: int) -> list[dict]:
    """Full-length instances: [CLS] A [SEP] B [SEP], 15 % of tokens (at most 20 per 128) labelled."""
    rng = random.Random(seed)
    budget = max(1, min(round(0.15 * length), 20 * length // 128))
    features = []
    for i in range(n):
        a = rng.randint(8, length - 12)
        ids = [101] + [rng.randrange(1000, vocab_size) for _ in range(length - 3)] + [102, 102]
        ids[a] = 102
        labels = [-100] * length
        for p in rng.sample([p for p in range(1, length - 1) if p != a], budget):
            labels[p], ids[p] = ids[p], 103
        types = [0] * (a + 1) + [1] * (length - a - 1)
        features.append({"input_ids": ids, "token_type_ids": types, "labels": labels,
                         "next_sentence_label": rng.randint(0, 1), "example_index": i})  # fmt: skip
    return features


def features_for(task: str, head: Any, tokenizer: Any, data: Path, n: int, seed: int) -> list[dict]:
    if task.startswith("pretrain"):
        return synthetic_pretraining(n, int(task.removeprefix("pretrain")), tokenizer.vocab_size, seed)
    path = {
        "ner": data / "ner" / "conll2003" / "eng.train",
        "sst2": data / "classification" / "sst2" / "train.tsv",
        "squad": data / "qa" / "squad" / "dev-v1.1.json",
    }[task]
    max_length = 384 if task == "squad" else 128
    features = head.featurize(head.read(path), tokenizer, max_length)
    if task == "squad":
        features = [f for f in features if f["start_positions"] >= 0]
    random.Random(seed).shuffle(features)
    return features[:n]


def hf_model(task: str, config: BertConfig) -> Any:
    import transformers

    num_labels = {"ner": 9, "sst2": 2}.get(task, 2)
    hf_config = transformers.BertConfig(**config.to_dict(), attn_implementation="sdpa", num_labels=num_labels)
    model_class = {
        "ner": transformers.BertForTokenClassification,
        "sst2": transformers.BertForSequenceClassification,
        "squad": transformers.BertForQuestionAnswering,
    }.get(task, transformers.BertForPreTraining)
    return model_class(hf_config)


HF_LABEL_KEYS = {
    "ner": ("labels",),
    "sst2": ("labels",),
    "squad": ("start_positions", "end_positions"),
    "pretrain128": ("labels", "next_sentence_label"),
    "pretrain512": ("labels", "next_sentence_label"),
}


# ----- FLOPs, clock, ceiling -----


def useful_flops(batch_lengths: list[int], predictions: int, config: BertConfig) -> float:
    """Training FLOPs of one batch (see the module docstring)."""
    L, H, V = config.num_hidden_layers, config.hidden_size, config.vocab_size
    forward = sum(24 * L * H * H * t + 4 * L * H * t * t for t in batch_lengths) + 2 * predictions * (H * H + H * V)
    return 3.0 * forward


class Clock:
    """Wall time per optimizer step, and the real tokens, sequences and FLOPs of each batch."""

    def __init__(self, config: BertConfig) -> None:
        self.config, self.times, self.batches = config, [], []

    def batch(self, attention_mask: torch.Tensor, labels: torch.Tensor | None, mlm: bool) -> None:
        lengths = attention_mask.sum(1).tolist()
        predictions = int((labels != -100).sum()) if mlm and labels is not None else 0
        self.batches.append((sum(lengths), len(lengths), useful_flops(lengths, predictions, self.config)))

    def tick(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.times.append(time.perf_counter())

    def result(self, warmup: int, ceiling: float) -> dict[str, float]:
        steps = len(self.times) - 1 - warmup
        seconds = self.times[-1] - self.times[warmup]
        timed = self.batches[warmup : warmup + steps]  # step k (from 0) consumed batch k
        tokens, sequences, flops = (sum(b[i] for b in timed) for i in range(3))
        return {
            "timed_steps": steps,
            "seconds_per_step": seconds / steps,
            "real_tokens_per_second": tokens / seconds,
            "sequences_per_second": sequences / seconds,
            "tflops_per_second": flops / seconds / 1e12,
            "mfu": None if math.isnan(ceiling) else flops / seconds / ceiling,
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        }


# ----- the two sides -----


def run_bertkit(task: str, variant: dict, features: list[dict], args: argparse.Namespace, vocab: Path) -> dict:
    pl.seed_everything(args.seed)
    variant = dict(variant)
    multiple = variant.pop("pad_to_multiple_of", None)
    model = BertModule(
        make_head(task), pretrained=None, preset=args.preset, vocab_file=str(vocab), lowercase=False,
        learning_rate=1e-4, warmup_ratio=0.1, **variant,
    )  # fmt: skip
    model.head._tokenizer = model.tokenizer
    clock = Clock(model.encoder.config)

    class Timer(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            clock.batch(batch["attention_mask"], batch.get("labels"), task.startswith("pretrain"))
            if batch_idx == 0:
                clock.tick()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            clock.tick()

    loader = torch.utils.data.DataLoader(
        features, batch_size=args.batch_size[task], shuffle=True, generator=torch.Generator().manual_seed(args.seed),
        collate_fn=partial(
            collate, pad_token_id=model.tokenizer.pad_token_id, pad_values=model.task.pad_values,
            pad_to_multiple_of=multiple, token_keys=model.task.batch_token_keys,
        ),
        num_workers=2,
        pin_memory=args.device == "cuda", persistent_workers=True,
    )  # fmt: skip
    warmup = args.warmup * (3 if variant.get("compile") else 1)
    trainer = pl.Trainer(
        accelerator=args.device, devices=1, precision="bf16-mixed", gradient_clip_val=1.0,
        max_steps=warmup + args.steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[Timer()],
    )  # fmt: skip
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.fit(model, train_dataloaders=loader)
    return clock.result(warmup, args.ceiling)


def run_transformers(
    task: str, features: list[dict], args: argparse.Namespace, config: BertConfig, vocab: Path
) -> dict:
    from transformers import (
        BertTokenizerFast,
        DataCollatorForTokenClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    torch.manual_seed(args.seed)
    model = hf_model(task, config)
    keys = ENCODER_KEYS + HF_LABEL_KEYS[task]
    rows = [{k: f[k] for k in keys} for f in features]
    tokenizer = BertTokenizerFast.from_pretrained(str(vocab))  # only its padding is used
    clock = Clock(config)
    mlm = task.startswith("pretrain")
    token_labels = task == "ner" or mlm  # labels per token: padded with -100
    padding = DataCollatorForTokenClassification(tokenizer) if token_labels else DataCollatorWithPadding(tokenizer)

    def collate(batch: list[dict]) -> dict:
        out = padding(batch)
        clock.batch(out["attention_mask"], out.get("labels"), mlm)
        return out

    class Timer(TrainerCallback):
        def on_train_begin(self, *a, **k):
            clock.tick()

        def on_step_end(self, *a, **k):
            clock.tick()

    warmup = args.warmup
    training = TrainingArguments(
        output_dir=str(ROOT / "runs" / "bench-gpu-hf"), per_device_train_batch_size=args.batch_size[task],
        learning_rate=1e-4, weight_decay=0.01, warmup_steps=0.1, max_steps=warmup + args.steps, max_grad_norm=1.0,
        bf16=True, seed=args.seed, save_strategy="no", eval_strategy="no", logging_strategy="no", report_to=[],
        use_cpu=args.device != "cuda", dataloader_num_workers=0, disable_tqdm=True, remove_unused_columns=False,
    )  # fmt: skip
    trainer = Trainer(model=model, args=training, train_dataset=rows, data_collator=collate, callbacks=[Timer()])
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    return clock.result(warmup, args.ceiling)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--preset", default="base")
    parser.add_argument("--steps", type=int, default=50, help="timed optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (x3 with compile)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--ceiling-size", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "gpu_vs_transformers.json"))
    args = parser.parse_args()
    data = data_dir(args.data_dir)
    vocab = data / "vocab" / "bert-base-cased"
    args.batch_size = {"ner": 32, "sst2": 32, "squad": 32, "pretrain128": 128, "pretrain512": 32}
    gpu = args.device == "cuda"  # the ceiling: dense bf16 products on the GPU (none on a CPU)
    args.ceiling = matmul_ceiling(args.ceiling_size, "cuda", torch.bfloat16) if gpu else float("nan")
    config = BertConfig.preset(args.preset, vocab_size=28996)
    result: dict[str, Any] = {
        **started("gpu_vs_transformers.py"), "machine": machine(), "preset": args.preset, "precision": "bf16-mixed",
        "matmul_ceiling_tflops": args.ceiling / 1e12, "steps": args.steps, "warmup": args.warmup,
        "batch_size": args.batch_size, "tasks": {},
    }  # fmt: skip
    for task in args.tasks:
        head = make_head(task)
        probe = BertModule(head, pretrained=None, preset="tiny", vocab_file=str(vocab), lowercase=False)
        needed = args.batch_size[task] * (3 * args.warmup + args.steps + 2)
        features = features_for(task, head, probe.tokenizer, data, needed, args.seed)
        row: dict[str, Any] = {"features": len(features)}
        row["transformers"] = run_transformers(task, features, args, config, vocab)
        for name in args.variants:
            row[name] = run_bertkit(task, VARIANTS[name], features, args, vocab)
            row[f"{name}_speedup"] = row[name]["real_tokens_per_second"] / row["transformers"]["real_tokens_per_second"]
        result["tasks"][task] = row
        print(task, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items() if k.endswith("speedup")})
        write_result(Path(args.output), result)  # after each task: a partial result survives a time limit


if __name__ == "__main__":
    main()
