"""bertkit vs Hugging Face transformers on SST-2, MRPC and RTE, same machine, one run per task.

bertkit runs ``recipes/<task>.yaml`` through ``bertkit.compose`` (validation off). The
transformers side gets exactly the examples bertkit trained and tested on (for MRPC and RTE the
recipe's seeded 10 % dev split is left out of training on both sides) and follows
``examples/pytorch/text-classification/run_glue.py``: ``BertForSequenceClassification`` (pooled
``[CLS]`` -> dropout -> linear), the fast tokenizer with ``truncation=True``, dynamic padding
(``DataCollatorWithPadding``: run_glue's ``--pad_to_max_length False``, the faster choice; its
default pads every example to 128), ``Trainer`` defaults otherwise. Both sides' predictions are
scored with the same torchmetrics classes (bertkit's head metrics; the functional forms for
transformers): accuracy, and for MRPC also F1 of the paraphrase class.

Usage (needs ``pip install -e ".[bench]"``)::

    python benchmarks/glue_vs_transformers.py --task mrpc
    python benchmarks/glue_vs_transformers.py --task sst2 --epochs 1
    python benchmarks/glue_vs_transformers.py --task sst2 --epochs 1 --train-examples 6000   # short budget
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import common
import torch
from bertkit_plugins.pretrained import locate_minilm
from bertkit_plugins.sequence_classification.readers import Example
from torchmetrics.functional.classification import binary_f1_score, multiclass_accuracy

TASKS = {"sst2": "classification/sst2", "mrpc": "pair/mrpc", "rte": "pair/rte"}


def run_transformers(
    args: argparse.Namespace, train: list[Example], test: list[Example], labels: list[str], out_dir: Path
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, set_seed

    set_seed(args.seed)
    model_dir = locate_minilm()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    label_id = {label: i for i, label in enumerate(labels)}

    def preprocess(examples: list[Example]) -> list[dict]:  # run_glue.py preprocess_function
        pairs = [e.text_pair for e in examples] if examples[0].text_pair is not None else None
        enc = tokenizer([e.text for e in examples], pairs, truncation=True, max_length=args.max_length)
        return [{k: enc[k][i] for k in enc} | {"labels": label_id[e.label]} for i, e in enumerate(examples)]

    train_rows, test_rows = preprocess(train), preprocess(test)
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label_id
    )
    trainer = common.hf_trainer(model, train_rows, DataCollatorWithPadding(tokenizer), args, out_dir)
    result = common.fit_transformers(trainer, train_rows, args.epochs)
    preds = torch.as_tensor(trainer.predict(test_rows).predictions).argmax(-1)
    return result, preds, torch.tensor([r["labels"] for r in test_rows])


def shortened(source: Path, target: Path, n: int) -> Path:
    """A copy of the data folder ``source`` in ``target`` whose training file (the one with "train"
    in its name) keeps its first ``n`` examples and, unless it is JSON lines, its header row.
    Raises SystemExit naming ``source`` when it has no training file."""
    if not any("train" in file.name for file in source.iterdir()):
        raise SystemExit(f"--train-examples: no training file (a name with 'train') in {source}")
    target.mkdir()
    for file in source.iterdir():
        if "train" in file.name:
            rows = file.read_text(encoding="utf-8").split("\n")[: n + (file.suffix != ".jsonl")]
            (target / file.name).write_text("\n".join(rows) + "\n", encoding="utf-8")
        else:
            shutil.copyfile(file, target / file.name)
    return target


def scores(preds: torch.Tensor, gold: torch.Tensor, labels: list[str], positive: int) -> dict[str, float]:
    out = {"accuracy": multiclass_accuracy(preds, gold, len(labels), average="micro").item()}
    if len(labels) == 2:
        out["f1"] = binary_f1_score(preds == positive, gold == positive).item()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument(
        "--data-root",
        type=Path,
        default=Path(os.environ.get("BERTKIT_DATA_DIR", common.ROOT.parent / "shared" / "data")),
    )
    common.add_common_arguments(parser, epochs=3, lr=None)
    parser.add_argument("--train-examples", type=int, default=None, help="use only the first N training examples")
    parser.add_argument(
        "--output", type=Path, default=None, help="default: benchmarks/results/<task>_vs_transformers.json"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_root / TASKS[args.task]
        if args.train_examples is not None:
            data_dir = shortened(data_dir, Path(tmp) / "data", args.train_examples)
        overrides = {"data.data_dir": str(data_dir), "trainer.default_root_dir": tmp}
        run = common.compose_quiet(common.ROOT / "recipes" / f"{args.task}.yaml", args, overrides)
        args.lr = run.model.hparams.learning_rate
        ours = common.fit_bertkit(run, args.epochs)
        head, data = run.model.head, run.datamodule
        labels = head.hparams.labels
        ours["test"] = {
            k: v for k, v in ((k, ours["test"].get(f"test/{k}")) for k in ("accuracy", "f1")) if v is not None
        }
        theirs = None
        if not args.bertkit_only:
            theirs, preds, gold = run_transformers(
                args, data.examples["train"], data.examples["test"], labels, Path(tmp)
            )
            theirs["test"] = scores(preds, gold, labels, head.positive_index())

    result = {
        "task": args.task,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "train_examples": len(data.examples["train"]),
        "test_examples": len(data.examples["test"]),
        "machine": common.machine(),
        "bertkit": ours,
        "transformers": theirs,
    }
    if theirs is not None:
        result["score_difference_points"] = {k: 100 * (ours["test"][k] - theirs["test"][k]) for k in ours["test"]}
        result["throughput_ratio"] = ours["tokens_per_second"] / theirs["tokens_per_second"]
    common.write_result(
        args.output or common.ROOT / "benchmarks" / "results" / f"{args.task}_vs_transformers.json", result
    )
    shown = ("task", "score_difference_points", "throughput_ratio")
    print(json.dumps({k: result[k] for k in shown if k in result} | {"bertkit": ours["test"]}, indent=2))


if __name__ == "__main__":
    main()
