"""Callbacks a recipe can add: ``PredictionWriter`` writes ``predict`` results as JSON Lines;
``ExportPretrained`` writes the trained model in Hugging Face format when ``fit`` ends."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import BasePredictionWriter, Callback
from typing_extensions import override

from bertkit.training.run_folder import in_run_folder
from bertkit.utils.io import replace_output, write_jsonl

log = logging.getLogger(__name__)


def prediction_records(pl_module: pl.LightningModule, datamodule: Any, batches: list[list[dict]]) -> list[dict]:
    """Per-example records from ``trainer.predict`` output (lists of per-feature predictions).

    Only examples that were predicted get a record (``trainer.limit_predict_batches`` stops
    early), in the order of the input; the task's ``format`` sees just those.
    """
    flat = [p for batch in batches for p in batch]
    examples = datamodule.examples["predict"]
    kept = sorted({p["example_index"] for p in flat})
    if len(kept) < len(examples):
        log.warning("predicted %d of %d examples (trainer.limit_predict_batches?)", len(kept), len(examples))
    position = {index: i for i, index in enumerate(kept)}
    flat = [{**p, "example_index": position[p["example_index"]]} for p in flat]
    return pl_module.task.format_predictions([examples[i] for i in kept], flat)


class PredictionWriter(BasePredictionWriter):
    """Write one JSON record per predicted example when ``predict`` ends.

    The task turns per-window outputs back into per-example records (for NER: words, tags and
    entity spans with character offsets). ``bertkit predict`` predicts in parts
    (``data.predict_chunk_size``): each part's records are appended to ``<output_file>.partial``
    as it ends, and that file is renamed to ``output_file`` after the last part, so memory does
    not grow with the input and an interrupted run keeps every finished part. A single
    ``trainer.predict`` call writes ``output_file`` atomically.

    Args:
        output_file: the JSONL file to (over)write; None: ``predictions.jsonl`` in the
            trainer's ``default_root_dir`` (the run folder).
    """

    def __init__(self, output_file: str | None = None) -> None:
        super().__init__(write_interval="epoch")
        self.output_file = output_file

    @override
    def write_on_epoch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        if trainer.world_size > 1:  # each process predicted its share: gather them, rank 0 writes
            shares: list[Any] = [None] * trainer.world_size
            torch.distributed.all_gather_object(shares, predictions)
            predictions = [batch for share in shares for batch in share]
        if not trainer.is_global_zero:
            return
        path = in_run_folder(trainer.default_root_dir, self.output_file, "predictions.jsonl")
        records = prediction_records(pl_module, trainer.datamodule, predictions)
        part = trainer.datamodule.predict_part
        if part is None:
            self._report(write_jsonl(path, records), path)
            return
        index, last = part
        partial = Path(f"{path}.partial")
        if index == 0:
            partial.parent.mkdir(parents=True, exist_ok=True)
            self._written = 0
        with partial.open("a" if index else "w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                self._written += 1
        if last:
            replace_output(partial, path)
            self._report(self._written, path)

    @staticmethod
    def _report(count: int, path: str) -> None:
        print(f"\nwrote {count} prediction{'s' if count != 1 else ''} to {path}", flush=True)


class ExportPretrained(Callback):
    """When ``fit`` ends, write the model as a Hugging Face format directory
    (``BertModule.save_pretrained``): the ``pretrained:`` of a fine-tuning recipe, and, after
    pre-training, a ``transformers.BertForPreTraining`` checkpoint. Rank 0 writes; files are
    replaced atomically.

    Args:
        output_dir: the directory to (over)write; None: ``export`` in the trainer's
            ``default_root_dir`` (the run folder).
    """

    def __init__(self, output_dir: str | None = None) -> None:
        self.output_dir = output_dir

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            path = in_run_folder(trainer.default_root_dir, self.output_dir, "export")
            pl_module.save_pretrained(path)
            log.warning("exported the model in Hugging Face format to %s", path)
