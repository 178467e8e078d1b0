"""The run folder is stated once: ``trainer.default_root_dir`` places the logs, the
checkpoints, the predictions and the export, and an overlay that moves it changes nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit import ExportPretrained, PredictionWriter, compose
from bertkit.training.run_folder import LOG_NAME

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
FINE_TUNING = ["ner", "ner_nested", "mrpc", "squad"]
OVERLAYS = ["pretrain_wwm", "pretrain_sop", "pretrain_continue", "pretrain_modernbert"]


def outputs(run) -> dict[str, str]:
    """Where a composed run writes: logger folder, checkpoint folder, predictions, export."""
    trainer = run.trainer
    found = {
        "logs": str(Path(trainer.logger.save_dir) / trainer.logger.name),
        "checkpoints": trainer.checkpoint_callback.dirpath,
    }
    for callback in trainer.callbacks:
        if isinstance(callback, PredictionWriter):
            found["predictions"] = callback.output_file
        if isinstance(callback, ExportPretrained):
            found["export"] = callback.output_dir
    return found


def callback_types(run) -> list[str]:
    return [type(c).__name__ for c in run.trainer.callbacks]


@pytest.mark.parametrize("recipe", FINE_TUNING)
def test_moving_the_run_folder_moves_every_output(recipe, tmp_path):
    root = tmp_path / "elsewhere"
    run = compose(RECIPES / f"{recipe}.yaml", overrides={"trainer.default_root_dir": str(root)})
    found = outputs(run)
    assert found["logs"] == str(root / LOG_NAME)
    assert found["checkpoints"] == str(root / "checkpoints")
    assert found["predictions"] is None  # resolved when predict runs: <root>/predictions.jsonl
    assert run.trainer.default_root_dir == str(root)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pretraining_overlays_change_the_folder_and_keep_the_callbacks(overlay):
    base = compose(RECIPES / "pretrain_bert.yaml")
    run = compose(RECIPES / "pretrain_bert.yaml", RECIPES / f"{overlay}.yaml")
    assert callback_types(run) == callback_types(base)  # PredictionWriter included
    assert "PredictionWriter" in callback_types(run) and "ExportPretrained" in callback_types(run)
    folder = Path("runs", overlay).resolve()
    assert Path(outputs(run)["checkpoints"]).resolve() == folder / "checkpoints"
    assert Path(outputs(run)["logs"]).resolve() == folder / LOG_NAME


def test_a_path_given_is_kept(tmp_path):
    chosen = tmp_path / "my_checkpoints"
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        "trainer:\n  callbacks:\n    - class_path: ModelCheckpoint\n"
        f"      init_args: {{dirpath: {chosen}, monitor: val/f1, mode: max}}\n"
    )
    run = compose(RECIPES / "ner.yaml", overlay, overrides={"trainer.default_root_dir": str(tmp_path / "run")})
    assert outputs(run)["checkpoints"] == str(chosen)
    assert outputs(run)["logs"] == str(tmp_path / "run" / LOG_NAME)


def test_writers_fill_their_path_from_the_trainer(tmp_path):
    """Outside the CLI too: a writer built from Python with no path writes into the run folder."""
    run = compose(RECIPES / "ner.yaml", overrides={"trainer.default_root_dir": str(tmp_path), "trainer.max_epochs": 1})
    run.trainer.predict(run.model, datamodule=run.datamodule)  # untrained weights: only the path matters here
    assert (tmp_path / "predictions.jsonl").is_file()
