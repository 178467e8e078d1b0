"""``bertkit.compose`` in a notebook: the data module works before any trainer call."""

from __future__ import annotations

from pathlib import Path

from bertkit import compose

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def test_a_composed_datamodule_sets_up_before_any_trainer_call(tmp_path):
    """In a notebook: look at the features before training (it once raised 'needs a trainer')."""
    run = compose(RECIPES / "ner.yaml", overrides={"trainer.default_root_dir": str(tmp_path)})
    run.datamodule.setup("fit")
    batch = next(iter(run.datamodule.train_dataloader()))  # featurizes the split
    features = run.datamodule.features["train"]
    assert len(features) >= len(run.datamodule.examples["train"]) > 0  # long sentences: several windows
    assert batch["input_ids"].shape[0] == min(run.datamodule.hparams.batch_size, len(features))
