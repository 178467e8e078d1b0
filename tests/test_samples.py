"""Every recipe runs on a fresh clone: with no data configured each head uses its sample
(bundled for NER, generated on first use for the others), and a recipe whose head has none
names the files it expects and both ways to give them."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, TINY, run_bertkit

SMOKE = ["--config", str(ROOT / "recipes" / "smoke.yaml"), "--trainer.enable_progress_bar=false"]
SCORES = {
    "sst2": "val/accuracy", "mrpc": "val/f1", "rte": "val/accuracy", "squad": "val/f1", "squad_v2": "val/f1",
    "multitask": "val/ner/f1",
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("recipe", list(SCORES))
def test_recipe_fits_on_its_sample_with_the_smoke_overlay(recipe, tmp_path):
    env = {"BERTKIT_CACHE": str(tmp_path / "cache")}
    fit = ["fit", "--config", str(ROOT / "recipes" / f"{recipe}.yaml"), *TINY, *SMOKE]
    proc = run_bertkit(*fit, cwd=tmp_path, env=env)
    assert "a sample generated from made-up texts" in proc.stderr and "last checkpoint at step 5" in proc.stdout
    assert "  best val/" in proc.stdout and "(on a sample, not the task's data" in proc.stdout  # it validated
    metrics = (tmp_path / "runs/smoke/logs/version_0/metrics.csv").read_text().splitlines()[0]
    assert SCORES[recipe] in metrics.split(",")
    assert list((tmp_path / "cache" / "samples").iterdir())
    run_bertkit(*fit, cwd=tmp_path, env=env)  # a second smoke run replaces the first


def test_sample_files_match_the_recipe_columns(tmp_path, monkeypatch):
    from bertkit_plugins.question_answering import QuestionAnswering
    from bertkit_plugins.sequence_classification import SequenceClassification

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path))
    mrpc = SequenceClassification(text_column="#1 String", text_pair_column="#2 String", label_column="Quality")
    examples = mrpc.read(mrpc.sample_files()["train"])
    assert len(examples) == 400 and all(e.text_pair and e.label in ("0", "1") for e in examples)
    assert {e.label for e in examples} == {"0", "1"}
    v2 = QuestionAnswering(version_2_with_negative=True)
    questions = v2.read(v2.sample_files()["train"])
    assert any(q.is_impossible for q in questions) and all(q.is_impossible or q.answers for q in questions)
    assert json.loads(v2.sample_files()["test"].read_text())["version"] == "v2.0"
    assert SequenceClassification(problem_type="regression").sample_files() is None


def test_no_sample_names_the_expected_files(tmp_path):
    proc = run_bertkit(
        "fit", "--config", str(ROOT / "recipes/sst2.yaml"), *TINY, "--model.task.init_args.problem_type=regression",
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "train.tsv, dev.tsv, test.tsv" in proc.stderr and "BERTKIT_DATA_DIR=ROOT" in proc.stderr
