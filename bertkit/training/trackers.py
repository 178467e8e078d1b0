"""The whole resolved recipe in experiment trackers: MLflow params and TensorBoard's HParams tab
(with the monitored score as its metric), so that runs are compared by every setting (the
task's, the trainer's budget and precision), not only the model's and data module's
hyper-parameters Lightning logs itself."""

from __future__ import annotations

import json
from typing import Any

from pytorch_lightning.loggers import CSVLogger, Logger, TensorBoardLogger


def flat_settings(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested recipe as ``{"model.task.init_args.crf": True, "trainer.max_epochs": 3, …}``:
    numbers, booleans and strings as they are, None as ``"null"``, lists and other values as
    JSON text (what trackers store); jsonargparse's own keys (``__path__``, ``config``) left out.
    """
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if key in ("__path__", "config") or key.startswith("_"):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_settings(value, f"{name}."))
        elif value is None:
            flat[name] = "null"
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        else:
            flat[name] = json.dumps(value, default=str)
    return flat


def log_settings(loggers: list[Logger], settings: dict[str, Any], monitor: str | None) -> None:
    """Give each tracker the flat settings: TensorBoard as an HParams session whose metric is
    ``monitor`` (the score the checkpoints keep; its values are the ones the run logs under that
    name), any other tracker through ``log_hyperparams``; the CSV logs keep theirs in the run's
    ``config.yaml``."""
    for logger in loggers:
        if isinstance(logger, CSVLogger):
            continue
        if isinstance(logger, TensorBoardLogger):
            from torch.utils.tensorboard.summary import hparams

            writer = logger.experiment._get_file_writer()  # as TensorBoardLogger.log_hyperparams writes them
            for summary in hparams(settings, {monitor: 0.0} if monitor else {}):
                writer.add_summary(summary)
        else:
            logger.log_hyperparams(settings)
