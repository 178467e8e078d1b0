"""Third-party heads written only against the documented head contract (docs/plugins.md), and an
encoder family (docs/plugin-guide.md), installed as a distribution and run through the CLI: fit,
test, predict and export in new processes.

``WordTaggingHead`` has a padded key of its own (``first_token``, padded with -1) and learns its
tags from the training file; ``ScoreHead`` is the plugin guide's ≤ 30-line example (docs/plugins.md). Both rely on the
default metric lifecycle (``Head.compute_metrics``) and prediction join (``format_record``)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, run_bertkit_fresh
from tests.test_plugins import env_with, pip_install_target

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


def recipe(tmp_path: Path, head: str, files: dict[str, str]) -> Path:
    data = "\n".join(f"  {k}_file: {v}" for k, v in files.items())
    path = tmp_path / "recipe.yaml"
    path.write_text(
        f"""seed_everything: 0
model:
  pretrained: all-MiniLM-L6-v2
  learning_rate: 3.0e-4
  head:
    class_path: {head}
data:
  data_dir: {tmp_path}
{data}
  batch_size: 16
trainer:
  max_epochs: 4
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
    config = recipe(tmp_path, "WordTaggingHead", {"train": "train.tags", "validation": "dev.tags", "test": "test.tags"})
    env = env_with(site, BERTKIT_LOAD_PLUGINS="word_tagger")

    run_bertkit_fresh("fit", "--config", str(config), cwd=tmp_path, env=env)
    ckpt = torch.load(tmp_path / "checkpoints/last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["task"]["init_args"]["tags"] == ["COLOUR", "NUMBER", "O"]  # learned
    assert score(run_bertkit_fresh("test", "--config", str(config), "--ckpt_path", "last", cwd=tmp_path, env=env).stdout,
                 "test/score") >= 0.95  # fmt: skip
    run_bertkit_fresh(
        "predict", "--config", str(config), "--ckpt_path", "last", "--data.predict_file", "words.tags",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [r["words"] for r in records] == [[w for w, _ in s] for s in unseen]  # every sentence, in order
    gold = [t for s in unseen for _, t in s]
    predicted = [t for r in records for t in r["tags"]]
    assert len(predicted) == len(gold)  # one tag per word: padding never became a word
    assert sum(p == g for p, g in zip(predicted, gold, strict=True)) / len(gold) >= 0.95


def test_readme_score_head_trains_tests_and_predicts(site, tmp_path):
    rng = random.Random(1)
    for name, n in (("train", 160), ("test", 40)):
        rows = [[w for w, _ in s] for s in sentences(n, rng)]
        lines = [f"{sum(w in COLOURS for w in words)}\t{' '.join(words)}" for words in rows]
        (tmp_path / f"{name}.tsv").write_text("\n".join(lines) + "\n")
    (tmp_path / "texts.txt").write_text("red blue the cat\nthe mat\n")
    config = recipe(tmp_path, "ScoreHead", {"train": "train.tsv", "validation": "test.tsv", "test": "test.tsv"})
    env = env_with(site, BERTKIT_LOAD_PLUGINS="score_head")

    run_bertkit_fresh("fit", "--config", str(config), cwd=tmp_path, env=env)
    mse = score(run_bertkit_fresh("test", "--config", str(config), "--ckpt_path", "last", cwd=tmp_path, env=env).stdout,
                "test/score")  # fmt: skip
    assert mse < 0.5  # the colour count varies by about 1.3 (variance ~1.6): it learned
    run_bertkit_fresh(
        "predict", "--config", str(config), "--ckpt_path", "last", "--data.predict_file", "texts.txt",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 2 and records[0]["score"] > records[1]["score"] + 1


def test_plugin_guide_shows_the_score_head_as_tested():
    guide = (ROOT / "docs" / "plugins.md").read_text()
    code = (FIXTURE / "bertkit_score_head.py").read_text()
    assert f"```python\n{code}```" in guide
    assert sum(1 for line in code.splitlines() if line.strip()) <= 30


def test_plugin_guide_family_loads_fine_tunes_and_exports_a_camembert_directory(site, tmp_path):
    """The guide's CamemBERT family: a transformers ``camembert`` directory (random weights, a
    SentencePiece tokenizer trained here) is found by its ``model_type``, fine-tunes NER, and
    exports as ``CamembertForTokenClassification``, which transformers loads without a missing key."""
    import transformers

    from tests import trained_tokenizers
    from tests.conftest import FAST, RECIPE
    from tests.family_parity import docs_text

    guide = (ROOT / "docs" / "plugin-guide.md").read_text()
    assert f"```python\n{(FIXTURE / 'bertkit_camembert.py').read_text()}```" in guide
    tokenizer = trained_tokenizers.train("xlm-roberta", docs_text(), vocab_size=1500)
    pad = tokenizer.token_to_id("<pad>")
    config = transformers.CamembertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=512 + pad + 1, pad_token_id=pad, type_vocab_size=1,
    )  # fmt: skip
    transformers.CamembertModel(config).save_pretrained(tmp_path / "camembert")
    trained_tokenizers.save(tokenizer, tmp_path / "camembert")
    env = env_with(site, BERTKIT_LOAD_PLUGINS="camembert")
    overlay = ROOT / "recipes" / "roberta.yaml"
    fit = ["fit", "--config", str(RECIPE), "--config", str(overlay), f"--model.pretrained={tmp_path / 'camembert'}"]
    run_bertkit_fresh(*fit, *FAST, cwd=tmp_path, env=env)
    run_bertkit_fresh("export", "runs/ner/checkpoints/last.ckpt", "export", "--onnx=false", cwd=tmp_path, env=env)
    exported = json.loads((tmp_path / "export" / "config.json").read_text())
    assert exported["model_type"] == "camembert" and exported["architectures"] == ["CamembertForTokenClassification"]
    hf, info = transformers.CamembertForTokenClassification.from_pretrained(
        tmp_path / "export", output_loading_info=True
    )
    crf = {"crf.transitions", "crf.start_transitions", "crf.end_transitions"}  # the recipe's CRF: decode them apart
    assert not info["missing_keys"] and info["unexpected_keys"] == crf, info
    assert hf.config.id2label[0] == "O" and hf.config.bos_token_id == tokenizer.token_to_id("<s>")
