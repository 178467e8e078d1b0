"""The model owns its input length (``model.max_length``): saved with it, read back from every
checkpoint and export, given to the data module; ``data.max_length`` is release 0.1's place."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
import torch
from bertkit_plugins.token_tagging import TokenClassification
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertDataModule, BertModule, compose
from bertkit.training.checkpoints import refuse_changed_recipe
from bertkit.training.trained import load_trained
from bertkit.utils.deprecation import BertkitRemovedIn03Warning
from tests.conftest import RECIPE


def tiny(**settings) -> BertModule:
    return BertModule(
        TokenClassification(["PER"]), pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2", **settings
    )


@settings(max_examples=8, deadline=None)
@given(length=st.integers(-(1 << 40), 7) | st.integers(513, 1 << 40))
def test_a_length_the_encoder_cannot_read_is_refused_by_its_setting(length: int) -> None:
    with pytest.raises(ValueError, match=rf"model.max_length={length}: expected an integer in \[8, 512\]"):
        tiny(max_length=length)


@settings(max_examples=6, deadline=None)
@given(model_length=st.integers(8, 512), data_length=st.none() | st.integers(8, 512))
def test_the_data_module_reads_at_the_models_length(model_length: int, data_length: int | None) -> None:
    """None follows the model; a length given beside a model of another is release 0.1's way: it
    warns, and the model records the length its input is read with."""
    model, data = tiny(max_length=model_length), BertDataModule(max_length=data_length)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data.attach(model)
    deprecated = [w for w in caught if issubclass(w.category, BertkitRemovedIn03Warning)]
    moved = data_length is not None and data_length != model_length
    assert len(deprecated) == moved
    assert data.max_length == model.hparams.max_length == (data_length if moved else model_length)


def test_a_data_length_past_the_models_positions_is_refused() -> None:
    with pytest.raises(ValueError, match=r"data.max_length=600: expected an integer in \[8, 512\]"):
        BertDataModule(max_length=600).attach(tiny())


@pytest.mark.slow
def test_a_recipes_data_max_length_warns_and_becomes_the_models() -> None:
    with pytest.warns(BertkitRemovedIn03Warning, match="give model.max_length 48 instead"):
        composed = compose(RECIPE, overrides={"data.max_length": 48})
    assert composed.model.hparams.max_length == composed.datamodule.max_length == 48
    composed = compose(RECIPE, overrides={"model.max_length": 40})
    assert composed.datamodule.hparams.max_length is None and composed.datamodule.max_length == 40


@pytest.mark.slow
def test_checkpoints_carry_the_length_and_older_ones_read_their_runs(tiny_run: Path, tmp_path: Path) -> None:
    """A checkpoint records ``model.max_length``; one of an earlier release, which kept it with
    the data module's settings, loads with that length (not the default)."""
    stored = torch.load(tiny_run / "runs/ner/checkpoints/last.ckpt", weights_only=True)
    length = stored["hyper_parameters"]["max_length"]
    assert load_trained(tiny_run / "runs/ner/checkpoints/last.ckpt", "cpu", BertModule)[1] == length
    del stored["hyper_parameters"]["max_length"]
    stored["datamodule_hyper_parameters"]["max_length"] = 48
    torch.save(stored, tmp_path / "old.ckpt")
    model, read = load_trained(tmp_path / "old.ckpt", "cpu", BertModule)
    assert read == model.hparams.max_length == 48


@settings(max_examples=8, deadline=None)
@given(then=st.integers(8, 512), now=st.integers(8, 512), earlier=st.booleans())
def test_resuming_with_another_input_length_applies_it_with_a_warning(then: int, now: int, earlier: bool) -> None:
    """As ``data.max_length`` did: a resumed run reads input at the recipe's length, saying so;
    a checkpoint of an earlier release is compared with its data module's length."""
    model = tiny(max_length=now)
    settings_then = {**dict(model.hparams), "max_length": then, "task": model.task.spec()}
    data = BertDataModule()
    data_then = dict(data.hparams)
    if earlier:
        del settings_then["max_length"]
        data_then.update(max_length=then, task_temperature=1.0)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("bertkit.training.checkpoints")
    logger.addHandler(handler)
    try:
        refuse_changed_recipe(
            "run.ckpt",
            {"hyper_parameters": settings_then, "datamodule_hyper_parameters": data_then},
            model,
            BertDataModule(),
        )
    finally:
        logger.removeHandler(handler)
    said = [r.getMessage() for r in records]
    assert said == (
        [f"run.ckpt: resuming with model.max_length={now} (checkpoint: {then}); the recipe's value applies"]
        if now != then
        else []
    )
