"""Sequence classification training: each problem type learns (its loss falls), and the MRPC
recipe runs fit -> test -> predict through the CLI with the label vocabulary restored from the
checkpoint in new processes, predicting what the trained model predicts."""

from __future__ import annotations

import csv
import json
import random

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.sequence_classification import SequenceClassification

from bertkit import BertDataModule, BertModule
from bertkit.data.collate import pad_batch
from bertkit.utils.io import text_lines
from tests.conftest import ROOT, fit_between_validations, run_bertkit

MRPC = ROOT / "recipes" / "mrpc.yaml"
COLOURS, ANIMALS = ["red", "blue", "green"], ["cat", "dog", "horse"]
FILLER = ["the", "a", "saw", "near", "big", "old", "one", "there"]


def toy_rows(problem_type: str, n: int, rng: random.Random) -> list[tuple[str, str]]:
    """Texts whose label is a simple function of their words, as (text, label) rows."""
    rows = []
    for _ in range(n):
        words = rng.sample(FILLER, 3) + rng.sample(COLOURS + ANIMALS, rng.randint(1, 2))
        rng.shuffle(words)
        colour, animal = any(w in COLOURS for w in words), any(w in ANIMALS for w in words)
        if problem_type == "single_label":
            label = "both" if colour and animal else "colour" if colour else "animal"
        elif problem_type == "multi_label":
            label = ",".join(x for x, on in (("colour", colour), ("animal", animal)) if on)
        else:
            label = str(2.0 * colour + 1.0 * animal)
        rows.append((" ".join(words), label))
    return rows


LABELS = {"single_label": ["animal", "both", "colour"], "multi_label": ["animal", "colour"], "regression": None}


@pytest.mark.slow
@pytest.mark.parametrize(
    "problem_type",
    [
        "single_label",
        pytest.param("multi_label", marks=pytest.mark.system),
        pytest.param("regression", marks=pytest.mark.system),
    ],
)
def test_each_problem_type_learns(problem_type, tmp_path):
    rows = toy_rows(problem_type, 48, random.Random(0))
    with (tmp_path / "train.tsv").open("w", newline="") as handle:
        csv.writer(handle, delimiter="\t").writerows([("sentence", "label"), *rows])
    pl.seed_everything(0)
    head = SequenceClassification(problem_type=problem_type, labels=LABELS[problem_type])
    model = BertModule(head, learning_rate=2e-4, warmup_ratio=0.0)
    data = BertDataModule(
        data_dir=str(tmp_path), train_file="train.tsv", validation_file="train.tsv", batch_size=8, seed=0
    )
    before, after = fit_between_validations(model, data, max_epochs=6)
    assert after["val/loss"] < 0.5 * before["val/loss"], (before, after)
    score = {"single_label": "val/accuracy", "multi_label": "val/exact_match", "regression": "val/pearson"}
    assert after[score[problem_type]] > before[score[problem_type]]


def write_mrpc_like(path, pairs: list[tuple[str, str, str]]) -> None:
    """Microsoft's layout: BOM, header, ids, and quotes that are not CSV quoting."""
    lines = ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    lines += [f"{label}\t{i}\t{i + 1000}\t{a}\t{b}" for i, (a, b, label) in enumerate(pairs)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def paraphrase_pairs(n: int, rng: random.Random) -> list[tuple[str, str, str]]:
    pairs = []
    for _ in range(n):
        subject, other = rng.sample(ANIMALS + COLOURS, 2)
        same = rng.random() < 0.5
        a = f'"{subject}" said the {rng.choice(FILLER)} man'
        pairs.append((a, f"the man said {subject if same else other}", "1" if same else "0"))
    return pairs


@pytest.mark.slow
def test_mrpc_recipe_fit_test_predict_after_reload(tmp_path):
    rng = random.Random(1)
    data = tmp_path / "mrpc"
    data.mkdir()
    write_mrpc_like(data / "msr_paraphrase_train.txt", paraphrase_pairs(60, rng))
    test_pairs = paraphrase_pairs(12, rng)
    write_mrpc_like(data / "msr_paraphrase_test.txt", test_pairs)
    common = [
        "--config", str(MRPC), f"--data.data_dir={data}", "--data.batch_size=8",
        "--trainer.enable_progress_bar=false",
    ]  # fmt: skip
    run_bertkit("fit", *common, "--trainer.max_epochs=2", cwd=tmp_path)
    last = tmp_path / "runs/mrpc/checkpoints/last.ckpt"
    stored = torch.load(last, weights_only=True)["hyper_parameters"]["task"]["init_args"]
    assert stored["labels"] == ["0", "1"]  # learned from train, kept in the checkpoint
    assert stored["text_pair_column"] == "#2 String"

    proc = run_bertkit("test", *common, "--ckpt_path", "last", cwd=tmp_path)
    assert "test/accuracy" in proc.stdout and "test/f1" in proc.stdout

    text = tmp_path / "pairs.txt"
    text.write_text("".join(f"{a}\t{b}\n" for a, b, _ in test_pairs))
    out = tmp_path / "predictions.jsonl"
    run_bertkit(
        "predict", *common, "--ckpt_path", "last", f"--data.predict_file={text}", "--data.predict_format=text",
        f"--trainer.callbacks.output_file={out}", cwd=tmp_path,
    )  # fmt: skip
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["text"], r["text_pair"]) for r in records] == [(a, b) for a, b, _ in test_pairs]

    model = BertModule.load_from_checkpoint(last, weights_only=True).eval()
    head = model.task
    features = head.featurize(head.read_text_lines(text, text_lines(text)), model.tokenizer, 128)
    with torch.no_grad():
        probs = model(pad_batch(features))["logits"].softmax(-1)
    assert [r["label"] for r in records] == [head.hparams.labels[i] for i in probs.argmax(-1).tolist()]
    got = torch.tensor([[r["probabilities"][label] for label in ("0", "1")] for r in records])
    assert torch.allclose(got, probs, atol=1e-5)

    bad = data / "bad.txt"
    write_mrpc_like(bad, [("a", "b", "1"), ("c", "d", "maybe")])
    proc = run_bertkit("test", *common, "--ckpt_path", "last", f"--data.test_file={bad}", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert f"{bad}:3: label 'maybe' is not in the label vocabulary ['0', '1']" in proc.stderr


def write_smoke_data(task: str, directory) -> None:
    """A few rows in the layout of each recipe's real files."""
    rng = random.Random(2)
    rows = toy_rows("single_label", 24, rng)
    if task == "sst2":
        for name in ("train.tsv", "dev.tsv", "test.tsv"):
            lines = ["sentence\tlabel"] + [f"{text}\t{int('colour' in label)}" for text, label in rows]
            (directory / name).write_text("\n".join(lines) + "\n")
    else:
        for name in ("train.jsonl", "validation.jsonl"):
            records = [{"sentence1": a, "sentence2": b, "label": int(label), "idx": i}
                       for i, (a, b, label) in enumerate(paraphrase_pairs(24, rng))]  # fmt: skip
            (directory / name).write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.parametrize("task", ["sst2", "rte"])
def test_recipe_smoke(task, tmp_path):
    """Each recipe parses and runs fit + test on data laid out like the real files."""
    from bertkit import compose

    write_smoke_data(task, tmp_path)
    run = compose(
        ROOT / "recipes" / f"{task}.yaml",
        overrides={
            "data.data_dir": str(tmp_path), "data.batch_size": 8, "trainer.max_epochs": 1,
            "trainer.default_root_dir": str(tmp_path / "runs"), "trainer.logger": False, "trainer.callbacks": [],
            "trainer.enable_checkpointing": False, "trainer.enable_progress_bar": False,
        },
    )  # fmt: skip
    run.trainer.fit(run.model, datamodule=run.datamodule)
    scores = run.trainer.test(run.model, datamodule=run.datamodule, verbose=False)[0]
    assert run.model.task.hparams.labels == ["0", "1"]  # from train; JSON numbers become label names
    assert len(run.datamodule.examples["test"]) == 24 and "test/f1" in scores
    held_out = len(run.datamodule.examples["validation"])
    assert held_out == (24 if task == "sst2" else 2)  # sst2: dev.tsv; rte: 10 % of train
