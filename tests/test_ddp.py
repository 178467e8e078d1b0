"""Two processes (DDP on the CPU, gloo) score and predict exactly what one process does: every
evaluation example is scored once (no padding repeats), windows of one question or sentence that
land on different processes are joined before answers are formed, and rank 0 writes every
prediction once. The commands' own DDP (processes started from the command line) runs NER's
validate, test and predict and SQuAD's predict; the other scores come from two processes forked
as a notebook's ``ddp_notebook`` forks them (``tests.conftest.notebook``)."""

from __future__ import annotations

import csv
import json
import random
import shutil
from pathlib import Path

import pytest

from tests.conftest import RECIPE, ROOT, TINY, notebook, run_bertkit, run_bertkit_forked
from tests.test_qa_train import toy_squad

pytestmark = [pytest.mark.slow, pytest.mark.ddp, pytest.mark.system]  # two new processes each (DDP)

TWO = ["--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.accelerator=cpu"]
QUIET = ["--trainer.enable_progress_bar=false"]


def written_scores(run_folder: Path, command: str) -> dict[str, float]:
    """The scores ``bertkit validate|test`` wrote last to ``<run folder>/<command>_scores.json``."""
    return json.loads((run_folder / f"{command}_scores.json").read_text())["scores"]


def without_losses(scores: dict[str, float]) -> dict[str, float]:
    """Scores but the losses: a loss on two processes is the mean of their means, not one pass's."""
    return {k: float(v) for k, v in scores.items() if not k.endswith("loss")}


def fit_then_validate_on_one_and_two(args: list[str], cwd: Path, run: str) -> tuple[dict, dict]:
    """Fit two steps, then the validation scores of ``last.ckpt`` by ``bertkit validate`` on one
    process and by two forked processes (without the losses)."""
    run_bertkit("fit", *args, "--trainer.max_steps=2", "--trainer.limit_val_batches=0", cwd=cwd)
    run_bertkit("validate", *args, "--ckpt_path=last", cwd=cwd)
    one = without_losses(written_scores(cwd / f"runs/{run}", "validate"))
    with notebook(cwd, args, processes=2) as composed:
        last = str(cwd / f"runs/{run}/checkpoints/last.ckpt")
        (two,) = composed.trainer.validate(composed.model, datamodule=composed.datamodule, ckpt_path=last)
    return one, without_losses(two)


@pytest.fixture
def ner_run(sample_run, tmp_path):
    shutil.copytree(sample_run / "runs", tmp_path / "runs")
    return tmp_path


@pytest.mark.parametrize("stage", ["validate", "test"])
def test_ner_scores_on_two_processes_match_one(ner_run, stage):
    """The scores of ``bertkit validate|test`` on one process, and of two processes forked (the
    command's own DDP is run by the predict test below and by the two-node test)."""
    args = ["--config", str(RECIPE), "--ckpt_path=best", *QUIET]
    prefix = "val/" if stage == "validate" else "test/"
    run_bertkit(stage, *args, cwd=ner_run)
    one = written_scores(ner_run / "runs/ner", stage)
    best = json.loads((ner_run / f"runs/ner/{stage}_scores.json").read_text())["checkpoint"]
    with notebook(ner_run, [a for a in args if not a.startswith("--ckpt_path")], processes=2) as composed:
        (two,) = getattr(composed.trainer, stage)(composed.model, datamodule=composed.datamodule, ckpt_path=best)
    assert one.keys() == two.keys() and f"{prefix}f1_PER" in one
    scores = [f"{prefix}{k}" for k in ("f1", "precision", "recall", "f1_PER", "f1_MISC")]
    assert all(abs(one[k] - two[k]) < 1e-6 for k in scores), (one, two)


def test_ner_predict_on_two_processes_writes_what_one_does(ner_run):
    args = ["--config", str(RECIPE), "--ckpt_path=best", *QUIET]
    out = ner_run / "runs/ner/predictions.jsonl"
    run_bertkit("predict", *args, cwd=ner_run)
    single = out.read_text()
    proc = run_bertkit_forked("predict", *args, *TWO, cwd=ner_run)  # rank 1 started from its command line
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_text() == single and len(single.splitlines()) > 50


def test_squad_windows_split_across_processes_give_the_same_answers(tmp_path):
    rng = random.Random(3)
    (tmp_path / "train.json").write_text(json.dumps(toy_squad(8, rng)))
    (tmp_path / "dev.json").write_text(json.dumps(toy_squad(9, rng)))  # odd: the shares differ in size
    args = [
        "--config", str(ROOT / "recipes/squad.yaml"), "--model.pretrained=null", "--model.preset=tiny",
        "--model.vocab_file=all-MiniLM-L6-v2", f"--data.data_dir={tmp_path}", "--data.train_file=train.json",
        "--data.validation_file=dev.json", "--model.max_length=48", "--model.task.init_args.doc_stride=16",
        "--data.eval_batch_size=3", *QUIET,
    ]  # fmt: skip
    one, two = fit_then_validate_on_one_and_two(args, tmp_path, "squad")
    assert set(one) >= {"val/exact_match", "val/f1"} and one == pytest.approx(two)

    out = tmp_path / "runs/squad/predictions.jsonl"
    run_bertkit("predict", *args, "--ckpt_path=last", "--data.predict_file=dev.json", cwd=tmp_path)
    single = out.read_text()
    out.unlink()  # the command's DDP predict: the NER test above; here two forked processes write it
    with notebook(tmp_path, [*args, "--data.predict_file=dev.json"], processes=2) as composed:
        composed.trainer.predict(composed.model, datamodule=composed.datamodule, ckpt_path="last")
    assert out.read_text() == single and len(single.splitlines()) == 9


def test_classification_scores_every_example_once_on_two_processes(tmp_path):
    rng = random.Random(5)
    words = ["good", "bad", "fine", "awful", "film", "plot", "the", "a"]
    rows = ["sentence\tlabel"] + [f"{' '.join(rng.choices(words, k=rng.randint(2, 9)))}\t{i % 2}" for i in range(21)]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")  # 21 rows: DistributedSampler would repeat one
    args = [
        "--config", str(ROOT / "recipes/sst2.yaml"), "--model.pretrained=null", "--model.preset=tiny",
        "--model.vocab_file=all-MiniLM-L6-v2", f"--data.data_dir={tmp_path}", "--data.validation_file=train.tsv",
        "--data.eval_batch_size=4", *QUIET,
    ]  # fmt: skip
    one, two = fit_then_validate_on_one_and_two(args, tmp_path, "sst2")
    assert {"val/accuracy", "val/f1", "val/mcc", "val/f1_0", "val/f1_1"} <= set(one) and one == pytest.approx(two)


# Every head's fit under DDP: tests/test_ddp_equality.py (the same steps as one process).


NEW_NER = {  # recipe and arguments of each NER option that changes training or scoring
    "crf_context_token_budget": (  # the budget's batches dealt between the processes (BatchShardSampler)
        RECIPE,
        ["--model.task.init_args.crf=true", "--model.task.init_args.context=16", "--data.max_tokens=300"],
    ),
    "nested_spans": (ROOT / "recipes/ner_nested.yaml", []),
}


@pytest.mark.parametrize("option", list(NEW_NER))
def test_new_ner_options_train_and_score_on_two_processes_as_on_one(tmp_path, option):
    """Fit on two processes, validating at the end of the epoch; the scores logged there are
    those one process gives the checkpoint written after that validation."""
    recipe, new = NEW_NER[option]
    args = ["--config", str(recipe), *TINY, *new, "--data.batch_size=4", *QUIET]
    with notebook(tmp_path, [*args, "--trainer.max_epochs=1", "--trainer.limit_train_batches=2"], 2) as composed:
        composed.trainer.fit(composed.model, datamodule=composed.datamodule)
    folder = next(tmp_path.glob("runs/*/"))
    rows = list(csv.DictReader((folder / "logs/version_0/metrics.csv").open()))
    two = without_losses({k: v for row in rows for k, v in row.items() if k.startswith("val/") and v})
    run_bertkit("validate", *args, "--ckpt_path=last", cwd=tmp_path)
    one = without_losses(written_scores(folder, "validate"))
    assert "val/f1" in one and len(one) > 10 and one == pytest.approx(two)
