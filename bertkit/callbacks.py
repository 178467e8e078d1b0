"""Callbacks a recipe can add: ``PredictionWriter`` writes ``predict`` results as JSON Lines."""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import BasePredictionWriter
from typing_extensions import override

from bertkit.io import write_jsonl

log = logging.getLogger(__name__)


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
        flat = [p for batch in predictions for p in batch]
        examples = trainer.datamodule.examples["predict"]
        count = write_jsonl(self.output_file, pl_module.head.format_predictions(examples, flat))
        log.warning("wrote %d predictions to %s", count, self.output_file)
