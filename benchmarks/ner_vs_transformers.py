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
import tempfile
from pathlib import Path

import common
from bertkit_plugins.pretrained import locate_minilm
from bertkit_plugins.token_tagging.conll import Sentence, read_conll
from provenance import started


def write_conll(path: Path, sentences: list[Sentence]) -> None:
    """IOB2 two-column file, so both sides read exactly these sentences; ``-DOCSTART-`` lines
    keep the documents (the context of ``TokenClassification(context=K)``)."""
    lines = []
    for i, s in enumerate(sentences):
        if i and s.document != sentences[i - 1].document:
            lines += ["-DOCSTART- O", ""]
        lines += [f"{w} {t}" for w, t in zip(s.words, s.tags, strict=True)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")


def run_bertkit(args: argparse.Namespace, data_dir: Path) -> dict:
    overrides = {
        "data.data_dir": str(data_dir),
        "data.validation_file": None,
        "model.task.init_args.tag_scheme": "IOB2",
        "trainer.default_root_dir": str(data_dir / "bertkit"),
    }
    result = common.fit_bertkit(
        common.compose_quiet(common.ROOT / "recipes" / "ner.yaml", args, overrides), args.epochs
    )
    return result | {"test_f1": result["test"]["test/f1"]}


def run_transformers(args: argparse.Namespace, train: list[Sentence], test: list[Sentence], out_dir: Path) -> dict:
    from seqeval.metrics import f1_score
    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
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
    trainer = common.hf_trainer(model, train_rows, DataCollatorForTokenClassification(tokenizer), args, out_dir)
    result = common.fit_transformers(trainer, train_rows, args.epochs)
    logits = trainer.predict(test_rows).predictions
    gold, pred = [], []
    for row, scores in zip(test_rows, logits, strict=True):
        keep = [(label, int(scores[k].argmax())) for k, label in enumerate(row["labels"]) if label != -100]
        gold.append([tags[g] for g, _ in keep]), pred.append([tags[p] for _, p in keep])
    dropped = sum(len(s.words) for s in test) - sum(len(g) for g in gold)
    return result | {"test_f1": f1_score(gold, pred), "test_words_truncated_away": dropped}


def main() -> None:
    default_data = (
        Path(os.environ.get("BERTKIT_DATA_DIR", common.ROOT.parent / "shared" / "data")) / "ner" / "conll2003"
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=default_data)
    common.add_common_arguments(parser, epochs=3, lr=1e-4)
    parser.add_argument("--train-sentences", type=int, default=None, help="use only the first N training sentences")
    parser.add_argument(
        "--output", type=Path, default=common.ROOT / "benchmarks" / "results" / "ner_vs_transformers.json"
    )
    args = parser.parse_args()
    provenance = started("ner_vs_transformers.py")

    train = read_conll(args.data_dir / "eng.train")[: args.train_sentences]
    test = read_conll(args.data_dir / "eng.testb")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_conll(work / "eng.train", train)
        write_conll(work / "eng.testb", test)
        ours = run_bertkit(args, work)
        theirs = None if args.bertkit_only else run_transformers(args, train, test, work)
    result = {
        **provenance,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": common.machine(),
        "bertkit": ours,
        "transformers": theirs,
    }
    shown = {"bertkit_f1": ours["test_f1"], "bertkit_tokens_per_s": ours["tokens_per_second"]}
    if theirs is not None:
        result["f1_difference"] = ours["test_f1"] - theirs["test_f1"]
        result["throughput_ratio"] = ours["tokens_per_second"] / theirs["tokens_per_second"]
        shown |= {
            "f1_difference": result["f1_difference"],
            "throughput_ratio": result["throughput_ratio"],
            "transformers_f1": theirs["test_f1"],
            "transformers_tokens_per_s": theirs["tokens_per_second"],
        }
    common.write_result(args.output, result)
    print(json.dumps(shown, indent=2))


if __name__ == "__main__":
    main()
