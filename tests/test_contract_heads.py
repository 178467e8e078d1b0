"""Third-party heads written against release 0.1's head contract (``bertkit.Head``: one object
reading files, featurizing, holding layers and writing records), installed as a distribution and
run through the CLI in new processes: they keep working for one release, through
``bertkit.tasks.legacy``.

``WordTaggingHead`` has a padded key of its own (``first_token``, padded with -1) and learns its
tags from the training file; ``ScoreHead`` was release 0.1's plugin guide example. Both rely on
the default metric lifecycle (``compute_metrics``) and prediction join (``format_record``)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, run_bertkit
from tests.test_plugins import env_with, pip_install_target

pytestmark = pytest.mark.slow  # plugins installed as distributions, run in new processes

FIXTURE = ROOT / "tests" / "fixtures" / "bertkit-contract-heads"
COLOURS, NUMBERS, OTHER = ["red", "blue", "green"], ["one", "two", "three", "four"], ["the", "cat", "sat", "on", "mat"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    pip_install_target(FIXTURE, target)
    return target


def sentences(n: int, rng: random.Random) -> list[list[tuple[str, str]]]:
    """Words tagged COLOUR, NUMBER or O by what they are."""
    tag = {**dict.fromkeys(COLOURS, "COLOUR"), **dict.fromkeys(NUMBERS, "NUMBER"), **dict.fromkeys(OTHER, "O")}
    return [[(w, tag[w]) for w in rng.choices(list(tag), k=rng.randint(3, 8))] for _ in range(n)]


def score_files(folder: Path) -> None:
    """train.tsv (160 rows) and test.tsv (40) scoring each sentence by its colour count; texts.txt, two
    sentences of 2 and 0 colours."""
    rng = random.Random(1)
    for name, n in (("train", 160), ("test", 40)):
        rows = [[w for w, _ in s] for s in sentences(n, rng)]
        lines = [f"{sum(w in COLOURS for w in words)}\t{' '.join(words)}" for words in rows]
        (folder / f"{name}.tsv").write_text("\n".join(lines) + "\n")
    (folder / "texts.txt").write_text("red blue the cat\nthe mat\n")


# The encoder a recipe trains: a tiny random one (2 x 128, MiniLM's vocabulary), or MiniLM (for a
# head that reads the pooler: the tiny encoder's random pooler learns too slowly).
TINY_ENCODER = "  pretrained: null\n  preset: tiny\n  vocab_file: all-MiniLM-L6-v2\n  learning_rate: 1.0e-3"
MINILM = "  pretrained: all-MiniLM-L6-v2\n  learning_rate: 3.0e-4"


def recipe(
    tmp_path: Path, head: str, files: dict[str, str], key: str = "head", pretrained: bool = False, epochs: int = 12
) -> Path:
    """A recipe of ``head`` (as ``model.KEY``: release 0.1's ``head``, or ``task``) on ``files``,
    ``epochs`` on the tiny encoder or (``pretrained``) MiniLM."""
    data = "\n".join(f"  {k}_file: {v}" for k, v in files.items())
    path = tmp_path / "recipe.yaml"
    path.write_text(
        f"""seed_everything: 0
model:
{MINILM if pretrained else TINY_ENCODER}
  {key}:
    class_path: {head}
data:
  data_dir: {tmp_path}
{data}
  batch_size: 16
trainer:
  max_epochs: {epochs}
  enable_progress_bar: false
  enable_model_summary: false
  logger: false
  callbacks:
    - class_path: ModelCheckpoint
      init_args:
        dirpath: {tmp_path}/checkpoints
        save_last: true
    - class_path: bertkit.PredictionWriter
      init_args:
        output_file: {tmp_path}/predictions.jsonl
"""
    )
    return path


def score(stdout: str, key: str) -> float:
    found = re.search(rf"{re.escape(key)}\s*[│|]\s*([0-9.]+)", stdout)
    assert found, stdout
    return float(found[1])


def test_word_tagger_with_its_own_padded_key(site, tmp_path):
    rng = random.Random(0)
    for name, n in (("train", 160), ("dev", 30), ("test", 30)):
        lines = [" ".join(f"{w}/{t}" for w, t in s) for s in sentences(n, rng)]
        (tmp_path / f"{name}.tags").write_text("\n".join(lines) + "\n")
    unseen = sentences(20, rng)
    (tmp_path / "words.tags").write_text("\n".join(" ".join(w for w, _ in s) for s in unseen) + "\n")
    files = {"train": "train.tags", "validation": "dev.tags", "test": "test.tags"}
    config = recipe(tmp_path, "WordTaggingHead", files, epochs=4)
    env = env_with(site, BERTKIT_LOAD_PLUGINS="word_tagger")

    run_bertkit("fit", "--config", str(config), cwd=tmp_path, env=env)
    ckpt = torch.load(tmp_path / "checkpoints/last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["task"]["init_args"]["tags"] == ["COLOUR", "NUMBER", "O"]  # learned
    run_bertkit(
        "predict", "--config", str(config), "--ckpt_path", "last", "--data.predict_file", "words.tags",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [r["words"] for r in records] == [[w for w, _ in s] for s in unseen]  # every sentence, in order
    gold = [t for s in unseen for _, t in s]
    predicted = [t for r in records for t in r["tags"]]
    assert len(predicted) == len(gold)  # one tag per word: padding never became a word
    assert sum(p == g for p, g in zip(predicted, gold, strict=True)) / len(gold) >= 0.95


@pytest.mark.system
def test_readme_score_head_trains_tests_and_predicts(site, tmp_path):
    score_files(tmp_path)
    files = {"train": "train.tsv", "validation": "test.tsv", "test": "test.tsv"}
    config = recipe(tmp_path, "ScoreHead", files, pretrained=True, epochs=4)
    env = env_with(site, BERTKIT_LOAD_PLUGINS="score_head")

    run_bertkit("fit", "--config", str(config), cwd=tmp_path, env=env)  # (bertkit test: test_plugin_api's task)
    run_bertkit(
        "predict", "--config", str(config), "--ckpt_path", "last", "--data.predict_file", "texts.txt",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 2 and records[0]["score"] > records[1]["score"] + 1  # 2 colours vs 0: it learned
