"""Callbacks a recipe can add: ``PredictionWriter`` writes ``predict`` results as JSON Lines;
``ExportPretrained`` writes the trained model in Hugging Face format when ``fit`` ends."""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import BasePredictionWriter, Callback
from typing_extensions import override

from bertkit.io import write_jsonl

log = logging.getLogger(__name__)


def prediction_records(pl_module: pl.LightningModule, datamodule: Any, batches: list[list[dict]]) -> list[dict]:
    """Per-example records from ``trainer.predict`` output (lists of per-feature predictions)."""
    flat = [p for batch in batches for p in batch]
    return pl_module.head.format_predictions(datamodule.examples["predict"], flat)


class PredictionWriter(BasePredictionWriter):
    """Write one JSON record per predicted example, atomically, when ``predict`` ends.

    The head turns per-window outputs back into per-example records (for NER: words, tags and
    entity spans with character offsets).

    Args:
        output_file: the JSONL file to (over)write.
    """

    def __init__(self, output_file: str = "predictions.jsonl") -> None:
        super().__init__(write_interval="epoch")
        self.output_file = output_file

    @override
    def write_on_epoch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        count = write_jsonl(self.output_file, prediction_records(pl_module, trainer.datamodule, predictions))
        log.warning("wrote %d predictions to %s", count, self.output_file)


class ExportPretrained(Callback):
    """When ``fit`` ends, write the model as a Hugging Face format directory
    (``BertModule.save_pretrained``): the ``pretrained:`` of a fine-tuning recipe, and, after
    pre-training, a ``transformers.BertForPreTraining`` checkpoint. Rank 0 writes; files are
    replaced atomically.

    Args:
        output_dir: the directory to (over)write.
    """

    def __init__(self, output_dir: str = "export") -> None:
        self.output_dir = output_dir

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            pl_module.save_pretrained(self.output_dir)
            log.warning("exported the model in Hugging Face format to %s", self.output_dir)
