"""bertkit vs Hugging Face transformers on SQuAD v1.1 (split by article), same machine, one run.

Only SQuAD v1.1 dev exists offline, so both sides train on 40 of its 48 articles and are scored on
the other 8 (``squad_split.py``, seed 0; the titles go into the result). bertkit runs
``recipes/squad.yaml`` through ``bertkit.compose`` (validation off). The transformers side follows
``examples/pytorch/question-answering/run_qa.py`` and ``utils_qa.py``: ``BertForQuestionAnswering``,
the fast tokenizer with ``truncation="only_second"``, ``stride=doc_stride`` and overflowing windows,
labels by its offset walk, dynamic padding (run_qa's ``--pad_to_max_length False``, the faster
choice; its default pads every window to 384), ``Trainer`` defaults otherwise, and
``postprocess_qa_predictions`` (top ``n_best_size`` starts/ends, ``max_answer_length``, text from
offsets). Same checkpoint, max_seq_length 384, doc_stride 128, batch size, learning rate, epochs.
Note that run_qa's ``stride`` is the windows' overlap while bertkit's ``doc_stride`` is Google's
step between windows: the setting is the same number, the windows differ on long passages (the
result gives both window counts).

Both sides' answers are scored by bertkit's ``SquadScore`` (official script semantics) and by
torchmetrics' ``SQuAD``; the result keeps both.

Usage (needs ``pip install -e ".[bench]"``)::

    python benchmarks/squad_vs_transformers.py --epochs 1
    python benchmarks/squad_vs_transformers.py --epochs 1 --train-articles 5 --eval-articles 3   # short budget
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import common
import numpy as np
from bertkit_plugins.pretrained import locate_minilm
from bertkit_plugins.question_answering.metric import SquadScore
from bertkit_plugins.question_answering.readers import QAExample
from provenance import started
from squad_split import split_articles
from torchmetrics.text import SQuAD


def scores(examples: list[QAExample], answers: dict[str, str]) -> dict[str, float]:
    """EM/F1 (percent) by bertkit's metric and by torchmetrics' SQuAD."""
    ours = SquadScore()
    ours.update(
        [answers[e.id] for e in examples], [0.0] * len(examples), [[a.text for a in e.answers] for e in examples]
    )
    theirs = SQuAD()
    theirs.update(
        [{"prediction_text": answers[e.id], "id": e.id} for e in examples],
        [
            {
                "answers": {"text": [a.text for a in e.answers], "answer_start": [a.start or 0 for a in e.answers]},
                "id": e.id,
            }
            for e in examples
        ],
    )
    return {k: float(v) for k, v in ours.compute().items()} | {
        f"torchmetrics_{k}": float(v) for k, v in theirs.compute().items()
    }


def tokenize_windows(tokenizer, examples: list[QAExample], args: argparse.Namespace):
    """run_qa.py's tokenizer call: question + passage, passage truncated into overlapping windows."""
    return tokenizer(
        [e.question.lstrip() for e in examples],
        [e.context for e in examples],
        truncation="only_second",
        max_length=args.max_length,
        stride=args.doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )


def prepare_train(tokenizer, examples: list[QAExample], args: argparse.Namespace) -> list[dict]:
    """run_qa.py ``prepare_train_features``."""
    enc = tokenize_windows(tokenizer, examples, args)
    rows = []
    for i, offsets in enumerate(enc["offset_mapping"]):
        input_ids = enc["input_ids"][i]
        cls_index = input_ids.index(tokenizer.cls_token_id)
        sequence_ids = enc.sequence_ids(i)
        answer = examples[enc["overflow_to_sample_mapping"][i]].answers[0]
        start_char, end_char = answer.start, answer.end
        first = 0
        while sequence_ids[first] != 1:
            first += 1
        last = len(input_ids) - 1
        while sequence_ids[last] != 1:
            last -= 1
        if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
            start, end = cls_index, cls_index
        else:
            while first < len(offsets) and offsets[first][0] <= start_char:
                first += 1
            while offsets[last][1] >= end_char:
                last -= 1
            start, end = first - 1, last + 1
        rows.append(
            {
                "input_ids": input_ids,
                "token_type_ids": enc["token_type_ids"][i],
                "attention_mask": enc["attention_mask"][i],
                "start_positions": start,
                "end_positions": end,
            }
        )
    return rows


def prepare_eval(tokenizer, examples: list[QAExample], args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """run_qa.py ``prepare_validation_features``: model rows, and per window its example and offsets
    (None outside the passage)."""
    enc = tokenize_windows(tokenizer, examples, args)
    rows, meta = [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        sequence_ids = enc.sequence_ids(i)
        rows.append({k: enc[k][i] for k in ("input_ids", "token_type_ids", "attention_mask")})
        meta.append(
            {
                "example": enc["overflow_to_sample_mapping"][i],
                "offsets": [o if sequence_ids[k] == 1 else None for k, o in enumerate(offsets)],
            }
        )
    return rows, meta


def postprocess(
    examples: list[QAExample], meta: list[dict], start_logits: np.ndarray, end_logits: np.ndarray, args
) -> dict[str, str]:
    """utils_qa.py ``postprocess_qa_predictions`` (v1.1): best span text per question id."""
    by_example: dict[int, list[int]] = {}
    for i, m in enumerate(meta):
        by_example.setdefault(m["example"], []).append(i)
    answers = {}
    for index, example in enumerate(examples):
        candidates = []
        for i in by_example[index]:
            offsets = meta[i]["offsets"]
            starts = np.argsort(start_logits[i])[-1 : -args.n_best_size - 1 : -1].tolist()
            ends = np.argsort(end_logits[i])[-1 : -args.n_best_size - 1 : -1].tolist()
            for s in starts:
                for e in ends:
                    if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or offsets[e] is None:
                        continue
                    if e < s or e - s + 1 > args.max_answer_length:
                        continue
                    candidates.append((start_logits[i][s] + end_logits[i][e], offsets[s][0], offsets[e][1]))
        best = max(candidates, default=None)
        answers[example.id] = example.context[best[1] : best[2]] if best else "empty"
    return answers


def run_transformers(args, train: list[QAExample], test: list[QAExample], out_dir: Path) -> tuple[dict, dict]:
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer, DataCollatorWithPadding, set_seed

    set_seed(args.seed)
    model_dir = locate_minilm()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    train_rows = prepare_train(tokenizer, train, args)
    model = AutoModelForQuestionAnswering.from_pretrained(model_dir)
    trainer = common.hf_trainer(model, train_rows, DataCollatorWithPadding(tokenizer), args, out_dir)
    result = common.fit_transformers(trainer, train_rows, args.epochs)
    rows, meta = prepare_eval(tokenizer, test, args)
    start_logits, end_logits = trainer.predict(rows).predictions
    answers = postprocess(test, meta, start_logits, end_logits, args)
    result |= {"train_windows": len(train_rows), "test_windows": len(rows), "test": scores(test, answers)}
    return result, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(os.environ.get("BERTKIT_DATA_DIR", common.ROOT.parent / "shared" / "data"))
        / "qa"
        / "squad"
        / "dev-v1.1.json",
    )
    parser.add_argument("--eval-articles", type=int, default=8)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument(
        "--train-articles", type=int, default=None, help="train on the first N training articles only (a short budget)"
    )
    common.add_common_arguments(parser, epochs=2, lr=None)
    parser.set_defaults(max_length=384)
    parser.add_argument(
        "--output", type=Path, default=common.ROOT / "benchmarks" / "results" / "squad_vs_transformers.json"
    )
    args = parser.parse_args()
    provenance = started("squad_vs_transformers.py")

    document = json.loads(args.source.read_text(encoding="utf-8"))
    train_articles, eval_articles = split_articles(document, args.eval_articles, args.split_seed)
    train_articles = train_articles[: args.train_articles]
    with tempfile.TemporaryDirectory() as tmp:
        for name, articles in (("train", train_articles), ("eval", eval_articles)):
            (Path(tmp) / f"{name}.json").write_text(json.dumps({"version": "1.1", "data": articles}))
        overrides = {
            "data.data_dir": tmp,
            "data.train_file": "train.json",
            "data.validation_file": None,
            "data.test_file": "eval.json",
            "trainer.default_root_dir": tmp,
        }
        run = common.compose_quiet(common.ROOT / "recipes" / "squad.yaml", args, overrides)
        head = run.model.head
        args.lr = run.model.hparams.learning_rate
        args.doc_stride, args.n_best_size = head.hparams.doc_stride, head.hparams.n_best_size
        args.max_answer_length = head.hparams.max_answer_length
        ours = common.fit_bertkit(run, args.epochs)
        data = run.datamodule
        ours["train_windows"], ours["test_windows"] = len(data.features["train"]), len(data.features["test"])
        ours["trainer_test"] = ours.pop("test")  # bertkit test: the head's own metric
        records = run.predict(Path(tmp) / "eval.json")
        test = data.examples["test"]
        ours["test"] = scores(test, {r["id"]: r["answer"] for r in records})
        theirs = None if args.bertkit_only else run_transformers(args, data.examples["train"], test, Path(tmp))[0]

    result = {
        **provenance,
        "task": "squad v1.1, split by article",
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "split": {
            "train_articles": [a["title"] for a in train_articles],
            "eval_articles": [a["title"] for a in eval_articles],
            "train_questions": len(data.examples["train"]),
            "eval_questions": len(test),
        },
        "machine": common.machine(),
        "bertkit": ours,
        "transformers": theirs,
    }
    if theirs is not None:
        result["score_difference_points"] = {k: ours["test"][k] - theirs["test"][k] for k in ("exact_match", "f1")}
        result["throughput_ratio"] = ours["tokens_per_second"] / theirs["tokens_per_second"]
    common.write_result(args.output, result)
    shown = ("score_difference_points", "throughput_ratio")
    print(json.dumps({k: result[k] for k in shown if k in result} | {"bertkit": ours["test"]}, indent=2))


if __name__ == "__main__":
    main()
