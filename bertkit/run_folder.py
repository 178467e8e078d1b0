"""One run folder per recipe: ``trainer.default_root_dir`` places every output of a run.

A recipe states its folder once (``trainer.default_root_dir: runs/ner``) and an overlay or
``--trainer.default_root_dir`` moves all of it. Where a recipe leaves a path out:

- the logger (none given, or ``logger: true``) is a ``CSVLogger`` in ``<root>/logs`` — the CSV
  files the fit summary's learning curves read;
- a ``ModelCheckpoint`` without ``dirpath`` writes to ``<root>/checkpoints`` (not Lightning's
  per-version logger folder), so ``--ckpt_path best|last`` of a later process finds it;
- ``PredictionWriter`` and ``ExportPretrained`` without a path write
  ``<root>/predictions.jsonl`` and ``<root>/export`` (they read the trainer's folder when they
  run, so this also holds outside the CLI).

A path a recipe does give is used as given. With no ``default_root_dir`` Lightning's defaults
apply unchanged.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from jsonargparse import Namespace
from pytorch_lightning.callbacks import ModelCheckpoint

LOG_NAME = "logs"


def place_outputs(trainer: Namespace) -> None:
    """Fill the logger and checkpoint folders a parsed ``trainer`` config leaves out, in place."""
    root = trainer.get("default_root_dir")
    if root is None:
        return
    if trainer.get("logger") in (None, True):
        trainer.logger = Namespace(
            class_path="pytorch_lightning.loggers.CSVLogger", init_args=Namespace(save_dir=root, name=LOG_NAME)
        )
    for callback in trainer.get("callbacks") or []:
        if not isinstance(callback, Namespace):  # an instance given from Python: already built
            continue
        module, _, name = callback.class_path.rpartition(".")  # parsed: a full, importable path
        cls = getattr(importlib.import_module(module), name)
        if issubclass(cls, ModelCheckpoint) and callback.init_args.get("dirpath") is None:
            callback.init_args.dirpath = str(Path(root) / "checkpoints")


def in_run_folder(default_root_dir: str | Path, path: str | None, name: str) -> str:
    """``path`` if given, else ``<default_root_dir>/<name>``."""
    return path if path is not None else str(Path(default_root_dir) / name)
