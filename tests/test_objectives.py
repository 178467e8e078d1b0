"""The training-objective seam (``BertModule.add_objective``): a callback's term joins the training
loss and is logged; the layers it adds train with the model and are held by its checkpoints while
it trains; a model read without the objective drops them; evaluation never runs it."""

from __future__ import annotations

import csv
import os
from io import StringIO

import pytorch_lightning as pl
import torch
from torch import nn

from bertkit import BertModule, compose
from tests.conftest import RECIPE, isolated

TINY = {"model.pretrained": None, "model.preset": "tiny", "model.vocab_file": "all-MiniLM-L6-v2"}


class Shrink(pl.Callback):
    """A toy objective: the squared weights of a layer of its own, added to the loss."""

    reads_hidden_states = False

    def __init__(self) -> None:
        self.modules = {"shrink": nn.Linear(3, 3)}
        self.calls = {"train": 0}

    def setup(self, trainer: pl.Trainer, pl_module: BertModule, stage: str) -> None:
        if stage == "fit":
            pl_module.add_objective(self)

    def combine(self, outputs, batch, model, states):
        assert states is None and model.training
        self.calls["train"] += 1
        term = model.shrink.weight.pow(2).sum()
        return {**outputs, "loss": outputs["loss"] + term, "shrink_loss": term}


def test_an_objective_added_by_a_callback_trains_is_logged_and_stays_out_of_a_loaded_model(tmp_path):
    overrides = {**TINY, "trainer.max_steps": 3, "trainer.limit_val_batches": 1, "trainer.log_every_n_steps": 1,
                 "trainer.enable_progress_bar": False, "data.batch_size": 8}  # fmt: skip
    shrink = Shrink()
    before = shrink.modules["shrink"].weight.detach().clone()
    with isolated(tmp_path, dict(os.environ), StringIO(), StringIO()):
        run = compose(RECIPE, overrides=overrides)
        run.trainer.callbacks.append(shrink)
        run.trainer.fit(run.model, datamodule=run.datamodule)
    assert shrink.calls["train"] == 3  # training steps only: validation ran, and never called it
    after = run.model.shrink.weight.detach()
    assert after.norm() < before.norm()  # trained, towards smaller weights
    last = tmp_path / "runs/ner/checkpoints/last.ckpt"
    saved = torch.load(last, weights_only=True)
    assert saved["objective_modules"] == ["shrink"] and torch.equal(saved["state_dict"]["shrink.weight"], after)
    rows = list(csv.DictReader(next((tmp_path / "runs/ner/logs").rglob("metrics.csv")).open()))
    assert len([r for r in rows if r.get("train/shrink_loss")]) == 3
    loaded = BertModule.load_from_checkpoint(last)
    assert not hasattr(loaded, "shrink")
