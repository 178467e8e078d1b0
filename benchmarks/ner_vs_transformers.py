"""bertkit vs Hugging Face transformers on CoNLL-2003 NER, same machine, one run.

Both sides fine-tune the same checkpoint (all-MiniLM-L6-v2) on the same sentences (IOB2 tags),
with the same max length, batch size, learning rate, warm-up, weight decay, epochs and seed.
The transformers side follows ``examples/pytorch/token-classification/run_ner.py``: first
sub-word labels, truncation at ``max_length``, ``DataCollatorForTokenClassification`` (dynamic
padding), ``Trainer`` defaults (random order, linear schedule, grad-norm 1.0), seqeval F1 over
the labelled words. bertkit runs ``recipes/ner.yaml`` through ``bertkit.compose``.

Throughput is real (non-padding) tokens processed per second of training, validation off on
both sides. Usage (needs ``pip install -e ".[bench]"``)::

    python benchmarks/ner_vs_transformers.py --data-dir ../shared/data/ner/conll2003
    python benchmarks/ner_vs_transformers.py --train-sentences 2000 --epochs 1   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch
from bertkit_plugins.pretrained import locate_minilm
from bertkit_plugins.token_tagging.conll import Sentence, read_conll

from bertkit import compose
from bertkit.io import atomic_path

ROOT = Path(__file__).resolve().parents[1]


def write_conll(path: Path, sentences: list[Sentence]) -> None:
    """IOB2 two-column file, so both sides read exactly these sentences."""
    lines = []
    for s in sentences:
        lines += [f"{w} {t}" for w, t in zip(s.words, s.tags)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")


def run_bertkit(args: argparse.Namespace, data_dir: Path) -> dict:
    overrides = {
        "seed_everything": args.seed,
        "data.data_dir": str(data_dir),
        "data.validation_file": None,
        "data.batch_size": args.batch_size,
        "data.max_length": args.max_length,
        "model.learning_rate": args.lr,
        "model.warmup_ratio": args.warmup_ratio,
        "model.head.init_args.tag_scheme": "IOB2",
        "trainer.max_epochs": args.epochs,
        "trainer.callbacks": [],
        "trainer.logger": False,
        "trainer.enable_checkpointing": False,
        "trainer.enable_progress_bar": False,
        "trainer.default_root_dir": str(data_dir / "bertkit"),
    }
    run = compose(ROOT / "recipes" / "ner.yaml", overrides=overrides)
    start = time.perf_counter()
    run.trainer.fit(run.model, datamodule=run.datamodule)
    seconds = time.perf_counter() - start
    tokens = args.epochs * sum(len(f["input_ids"]) for f in run.datamodule.features["train"])
    scores = run.trainer.test(run.model, datamodule=run.datamodule, verbose=False)[0]
    return {
        "train_seconds": seconds,
        "train_tokens": tokens,
        "tokens_per_second": tokens / seconds,
        "test_f1": scores["test/f1"],
        "test_scores": scores,
    }


def run_transformers(args: argparse.Namespace, train: list[Sentence], test: list[Sentence], out_dir: Path) -> dict:
    from seqeval.metrics import f1_score
    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    set_seed(args.seed)
    tags = ["O"] + [f"{p}-{t}" for t in ("PER", "LOC", "ORG", "MISC") for p in ("B", "I")]
    label_id = {t: i for i, t in enumerate(tags)}
    model_dir = locate_minilm()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def tokenize_and_align_labels(sentences: list[Sentence]) -> list[dict]:  # run_ner.py, label_all_tokens=False
        enc = tokenizer(
            [s.words for s in sentences], truncation=True, max_length=args.max_length, is_split_into_words=True
        )
        rows = []
        for i, s in enumerate(sentences):
            previous, labels = None, []
            for w in enc.word_ids(batch_index=i):
                labels.append(-100 if w is None or w == previous else label_id[s.tags[w]])
                previous = w
            rows.append(
                {
                    "input_ids": enc["input_ids"][i],
                    "attention_mask": enc["attention_mask"][i],
                    "token_type_ids": enc["token_type_ids"][i],
                    "labels": labels,
                }
            )
        return rows

    train_rows, test_rows = tokenize_and_align_labels(train), tokenize_and_align_labels(test)
    model = AutoModelForTokenClassification.from_pretrained(
        model_dir, num_labels=len(tags), id2label=dict(enumerate(tags)), label2id=label_id
    )
    # transformers 5 takes a ratio as a float warmup_steps; 4.x has warmup_ratio.
    import inspect

    ratio_key = "warmup_ratio" if "warmup_ratio" in inspect.signature(TrainingArguments).parameters else "warmup_steps"
    warmup = {ratio_key: args.warmup_ratio}
    training = TrainingArguments(
        output_dir=str(out_dir / "hf"),
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=2 * args.batch_size,
        learning_rate=args.lr,
        weight_decay=0.01,
        **warmup,
        num_train_epochs=args.epochs,
        max_grad_norm=1.0,
        seed=args.seed,
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=train_rows,
        data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    tokens = args.epochs * sum(len(r["input_ids"]) for r in train_rows)
    logits = trainer.predict(test_rows).predictions
    gold, pred = [], []
    for row, scores in zip(test_rows, logits):
        keep = [(label, int(scores[k].argmax())) for k, label in enumerate(row["labels"]) if label != -100]
        gold.append([tags[g] for g, _ in keep]), pred.append([tags[p] for _, p in keep])
    dropped = sum(len(s.words) for s in test) - sum(len(g) for g in gold)
    return {
        "train_seconds": seconds,
        "train_tokens": tokens,
        "tokens_per_second": tokens / seconds,
        "test_f1": f1_score(gold, pred),
        "test_words_truncated_away": dropped,
    }


def main() -> None:
    default_data = Path(os.environ.get("BERTKIT_DATA_DIR", ROOT.parent / "shared" / "data")) / "ner" / "conll2003"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=default_data)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--train-sentences", type=int, default=None, help="use only the first N training sentences")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "ner_vs_transformers.json")
    args = parser.parse_args()

    train = read_conll(args.data_dir / "eng.train")[: args.train_sentences]
    test = read_conll(args.data_dir / "eng.testb")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_conll(work / "eng.train", train)
        write_conll(work / "eng.testb", test)
        ours = run_bertkit(args, work)
        theirs = run_transformers(args, train, test, work)
    import transformers

    result = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": {
            "cpu_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "bertkit": ours,
        "transformers": theirs,
        "f1_difference": ours["test_f1"] - theirs["test_f1"],
        "throughput_ratio": ours["tokens_per_second"] / theirs["tokens_per_second"],
    }
    with atomic_path(args.output) as tmp_file:
        tmp_file.write_text(json.dumps(result, indent=2) + "\n")
    print(
        json.dumps(
            {k: result[k] for k in ("f1_difference", "throughput_ratio")}
            | {
                "bertkit_f1": ours["test_f1"],
                "transformers_f1": theirs["test_f1"],
                "bertkit_tokens_per_s": ours["tokens_per_second"],
                "transformers_tokens_per_s": theirs["tokens_per_second"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
