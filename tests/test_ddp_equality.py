"""Two processes train the model one process trains. With dropout off and float32 on the CPU,
1 process x batch 8 and 2 DDP processes x batch 4 take the same examples in the same steps
(``TrainShardSampler``) and their losses are means over the whole global batch
(``mean_over_processes``), so every step's loss, the final weights and the scores agree. Not to the
last bit: the two layouts add the same numbers in another order (each process sums its half,
then the all-reduce adds the halves), which moves float32 sums by a few units in the last place;
Adam's update divides by the gradient's root mean square, so those differences stay relative
(except where the gradient is zero, see ``NO_GRADIENT``). Both sides run as a notebook runs a
recipe (``bertkit.compose``, then ``trainer.fit``), the two processes forked from this one
(``ddp_fork``, the launcher of Lightning's ``ddp_notebook``); ``tests/test_ddp.py`` and the
two-node test run the command line's ``ddp``, whose processes start from ``sys.argv``."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import torch

from tests.conftest import RECIPE, ROOT, TINY, notebook
from tests.equal import NoDropoutStepLosses
from tests.test_qa_train import toy_squad

pytestmark = [pytest.mark.slow, pytest.mark.ddp]

LOSS_TOLERANCE = 1e-5  # relative, per step
WEIGHT_TOLERANCE = 1e-5  # absolute, every weight but NO_GRADIENT's
# A softmax over positions does not change when every position's logit moves by the same amount,
# so the span scorer's bias has a gradient of exactly 0 in exact arithmetic: what it gets is
# rounding, whose sign Adam turns into steps of about the learning rate. It moves the model's
# outputs by nothing.
NO_GRADIENT = {"head.qa_outputs.bias"}


def _tsv(folder: Path) -> None:
    rng = random.Random(7)
    words = ["good", "bad", "fine", "awful", "film", "plot", "the", "a"]
    lines = ["sentence\tlabel"] + [f"{' '.join(rng.choices(words, k=rng.randint(2, 9)))}\t{i % 2}" for i in range(40)]
    (folder / "train.tsv").write_text("\n".join(lines) + "\n")


def _squad(folder: Path) -> None:
    (folder / "train.json").write_text(json.dumps(toy_squad(40, random.Random(3))))


HEADS = {  # recipe, arguments, data writer
    "token_classification": (RECIPE, ["--model.task.init_args.crf=false", "--model.task.init_args.emission_loss_weight=0"], None),
    "token_classification_crf": (RECIPE, ["--model.task.init_args.crf=true"], None),
    "token_classification_crf_lora": (RECIPE, ["--config", str(ROOT / "recipes/ner_lora.yaml")], None),
    "nested_spans": (ROOT / "recipes/ner_nested.yaml", [], None),
    "sequence_classification": (ROOT / "recipes/sst2.yaml", ["--data.data_dir=.", "--data.validation_file=train.tsv"], _tsv),
    "question_answering": (
        ROOT / "recipes/squad.yaml",
        ["--data.data_dir=.", "--data.train_file=train.json", "--data.validation_file=train.json", "--model.max_length=48"],
        _squad,
    ),
    "multitask": (ROOT / "recipes/multitask.yaml", [], None),
    "pretraining_mlm_nsp": (
        ROOT / "recipes/pretrain_bert.yaml", ["--model.max_length=32", "--model.task.init_args.dynamic_masking=true"], None
    ),
}  # fmt: skip
# ELECTRA is left out: its generator samples the replacement tokens in each process from that
# process's random generator, so the discriminator's inputs differ with the number of processes.


def fit(folder: Path, recipe: Path, args: list[str], processes: int) -> tuple[list[float], dict, dict]:
    """Fit 3 steps of a global batch of 8 in ``folder`` on ``processes`` processes, validating
    after the third; the per-step losses, the final weights and the validation scores (all but
    the losses: see ``test_ddp.py``)."""
    folder.mkdir()
    steps = ["--trainer.max_steps=3", "--trainer.val_check_interval=3", "--trainer.check_val_every_n_epoch=null"]
    args = ["--config", str(recipe), *TINY, *args, *steps, f"--data.batch_size={8 // processes}"]
    with notebook(folder, [*args, "--trainer.enable_progress_bar=false"], processes) as run:
        run.trainer.callbacks.append(NoDropoutStepLosses(str(folder / "losses")))
        run.trainer.fit(run.model, datamodule=run.datamodule)
    last = next(folder.glob("runs/*/checkpoints/last.ckpt"))
    rows = list(csv.DictReader(next(folder.glob("runs/*/logs/version_0/metrics.csv")).open()))
    scores = {
        k: float(v) for row in rows for k, v in row.items() if k.startswith("val/") and v and not k.endswith("loss")
    }
    losses = [json.loads(line) for line in (folder / "losses").read_text().split()]
    return losses, torch.load(last, weights_only=True)["state_dict"], scores


# The multi-task case runs with the system tests (pytest -m system): the default run's budget.
@pytest.mark.parametrize("head", [pytest.param(h, marks=pytest.mark.system) if h == "multitask" else h for h in HEADS])
def test_two_processes_train_what_one_process_trains(tmp_path, head):
    recipe, args, write = HEADS[head]
    if write is not None:
        write(tmp_path)
        args = [a.replace("=.", f"={tmp_path}") for a in args]
    one = fit(tmp_path / "one", recipe, args, 1)
    two = fit(tmp_path / "two", recipe, args, 2)
    (losses, weights, scores), (losses2, weights2, scores2) = one, two
    assert len(losses) == len(losses2) == 3
    assert losses2 == pytest.approx(losses, rel=LOSS_TOLERANCE)
    assert weights.keys() == weights2.keys()
    assert all(torch.equal(weights[k].isnan(), weights2[k].isnan()) for k in weights)
    differences = {k: float((weights[k].double() - weights2[k].double()).nan_to_num(0.0).abs().max()) for k in weights}
    worst = max(v for k, v in differences.items() if k not in NO_GRADIENT)
    assert worst < WEIGHT_TOLERANCE, sorted(differences.items(), key=lambda kv: -kv[1])[:3]
    # the same scores to float32's precision, relative as the losses' (a perplexity of 30,000 is not
    # the same to 4 decimals: the last of its 24 bits is 0.002)
    assert scores and scores2 == pytest.approx(scores, rel=LOSS_TOLERANCE, abs=1e-6)
    print(
        f"{head}: max |d loss| {max(abs(a - b) for a, b in zip(losses, losses2, strict=True)):.2e}, max |d weight| {worst:.2e}"
    )
