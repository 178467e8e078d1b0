"""The stop on a non-finite training loss, read on the host only now and then
(``bertkit.training.nonfinite``): whichever step goes bad and however seldom the flag is read,
the run stops naming that step, no later step has changed the weights (they equal a clean run's
of that many steps), no checkpoint holds weights past it, and the fused AdamW's skip leaves
parameters, moments and step count as they were."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import compose
from bertkit.training.nonfinite import NonFiniteLoss
from tests.conftest import ROOT


class Before(pl.Callback):
    """The weights at the start of step ``step`` (before it changes them)."""

    def __init__(self, step: int | None) -> None:
        self.step, self.weights = step, None

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            self.weights = {k: v.clone() for k, v in module.state_dict().items()}


def _run(
    tmp: Path, steps: int, every: int, bad_step: int | None
) -> tuple[pl.LightningModule, Before, BaseException | None]:
    """A tiny SST-2 sample fit of ``steps`` steps, the flag read every ``every``; the loss of
    ``bad_step`` made NaN."""
    run = compose(
        ROOT / "recipes" / "sst2.yaml",
        overrides={
            "model.pretrained": None, "model.preset": "tiny", "model.vocab_file": "all-MiniLM-L6-v2",
            "data.dataset": None, "data.batch_size": 4, "data.validation_file": None, "trainer.max_steps": steps,
            "trainer.log_every_n_steps": every, "trainer.enable_progress_bar": False, "trainer.logger": False,
            "trainer.default_root_dir": str(tmp), "seed_everything": 3,
        },
    )  # fmt: skip
    model, step, before = run.model, run.model._shared_step, Before(bad_step)
    run.trainer.callbacks.append(before)

    def poisoned(batch, stage):
        outputs = step(batch, stage)
        if stage == "train" and model.global_step == bad_step:
            outputs["loss"] = outputs["loss"] * float("nan")
        return outputs

    model._shared_step = poisoned
    try:
        run.trainer.fit(model, datamodule=run.datamodule)
    except FloatingPointError as err:
        return model, before, err
    return model, before, None


@settings(max_examples=6, deadline=None)
@given(bad_step=st.integers(0, 5), every=st.integers(1, 4))
def test_a_bad_step_stops_the_run_with_the_weights_from_before_it(tmp_path_factory, bad_step, every):
    tmp = tmp_path_factory.mktemp("nonfinite")
    model, before, err = _run(tmp, 8, every, bad_step)
    assert err is not None and f"training loss is not finite (nan on this process) at step {bad_step}" in str(err)
    assert bad_step < model.global_step <= bad_step + every  # read within `every` steps
    assert all(torch.equal(w, before.weights[k]) for k, w in model.state_dict().items())
    assert not list(tmp.rglob("*.ckpt"))  # no checkpoint of the steps after it


def test_a_clean_run_trains_with_the_flag_handed_to_the_optimizer(tmp_path):
    model, _, err = _run(tmp_path, 3, 50, None)
    assert err is None and model.global_step == 3
    assert model._nonfinite.found is not None and float(model._nonfinite.found) == 0.0


@pytest.mark.parametrize("fused", [True, False])
def test_the_fused_adamw_skip_leaves_parameters_moments_and_step_as_they_were(fused):
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(4, 3))
    optimizer = torch.optim.AdamW([weight], lr=0.1, fused=fused)
    weight.grad = torch.randn(4, 3)
    optimizer.step()
    before = {k: v.clone() for k, v in optimizer.state[weight].items()}, weight.detach().clone()
    flag = NonFiniteLoss()
    weight.grad = torch.full((4, 3), float("nan"))
    skips = flag.update(torch.tensor(float("inf")), 1, optimizer)
    assert skips == fused
    if fused:
        optimizer.step()
        assert torch.equal(weight.detach(), before[1])
        assert all(torch.equal(optimizer.state[weight][k], v) for k, v in before[0].items())
    with pytest.raises(FloatingPointError, match=r"not finite \(inf on this process\) at step 1"):
        flag.check(2)
