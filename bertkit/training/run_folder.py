"""One run folder per recipe: ``trainer.default_root_dir`` places every output of a run.

A recipe states its folder once (``trainer.default_root_dir: runs/ner``) and an overlay or
``--trainer.default_root_dir`` moves all of it. Where a recipe leaves a path out:

- the logger (none given, or ``logger: true``) is a ``CSVLogger`` in ``<root>/logs`` — the CSV
  files the fit summary's learning curves read — for ``fit``; ``validate``, ``test`` and
  ``predict`` add no logger version: their scores go to ``<root>/<command>_scores.json``;
- trackers a recipe or overlay gives (``recipes/trackers/``: TensorBoard, MLflow, W&B) log
  beside that ``CSVLogger``, which ``fit`` adds to them when none of them is one;
- a ``ModelCheckpoint`` without ``dirpath`` writes to ``<root>/checkpoints`` (not Lightning's
  per-version logger folder), so ``--ckpt_path best|last`` of a later process finds it;
  Lightning's own ``ModelCheckpoint`` runs as ``bertkit.training.checkpoints.LastStateCheckpoint`` (same
  arguments; ``last.ckpt`` always holds the last state);
- ``PredictionWriter`` and ``ExportPretrained`` without a path write
  ``<root>/predictions.jsonl`` and ``<root>/export`` (they read the trainer's folder when they
  run, so this also holds outside the CLI).

A path a recipe does give is used as given. With no ``default_root_dir`` Lightning's defaults
apply unchanged. While a ``fit`` runs, its folder is locked (``claim``): a second ``fit`` into
it refuses, and a new run refuses to start over an earlier run's checkpoints.
"""

from __future__ import annotations

import fcntl
import importlib
import json
import os
from pathlib import Path
from typing import IO

from jsonargparse import Namespace
from pytorch_lightning import Trainer
from pytorch_lightning.callbacks import ModelCheckpoint as LightningModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from bertkit.training.checkpoints import LastStateCheckpoint
from bertkit.utils.io import atomic_path
from bertkit.utils.runs import earlier_run

LOG_NAME = "logs"
LOCK_NAME = ".fit.lock"


def absolute_location(uri: str, cwd: Path) -> str:
    """A tracker's location with a relative path made absolute against ``cwd``: ``sqlite:///x.db``
    (SQLAlchemy's relative form), ``file:x`` and a plain path; absolute paths, ``sqlite://`` (in
    memory) and network URIs (``http://…``, ``databricks``) as they are. MLflow keeps one store per
    location string for the whole process: a relative one would keep writing where the process
    first resolved it, whatever folder a later run starts in."""
    if uri.startswith("sqlite:///"):
        path = uri.removeprefix("sqlite:///")
        return uri if not path or path.startswith("/") else f"sqlite:///{cwd / path}"
    if uri.startswith("file:"):  # file:///path and file://host/path stay
        path = uri.removeprefix("file:")
        return uri if path.startswith("/") else f"file:{cwd / path}"
    if "://" in uri or ":" in uri.split("/")[0] or uri in ("", "databricks"):
        return uri
    return str(cwd / uri)


def place_outputs(trainer: Namespace, subcommand: str | None = None) -> None:
    """Fill the logger and checkpoint folders a parsed ``trainer`` config leaves out, in place;
    no logger for a ``subcommand`` other than ``fit`` (None: as for ``fit``); make a tracker's
    relative location absolute against the working folder (``absolute_location``)."""
    for logger in trainer.get("logger") if isinstance(trainer.get("logger"), list) else [trainer.get("logger")]:
        settings = logger.get("init_args") if isinstance(logger, Namespace) else None
        if settings is not None and isinstance(settings.get("tracking_uri"), str):
            settings.tracking_uri = absolute_location(settings.tracking_uri, Path.cwd())
    root = trainer.get("default_root_dir")
    if root is None:
        return
    logger = trainer.get("logger")
    csv = Namespace(class_path=f"{CSVLogger.__module__}.CSVLogger", init_args=Namespace(save_dir=root, name=LOG_NAME))
    if logger in (None, True) and subcommand not in (None, "fit"):
        trainer.logger = False
    elif logger in (None, True):
        trainer.logger = csv
    elif logger is not False and subcommand in (None, "fit"):
        given = logger if isinstance(logger, list) else [logger]
        if not any(isinstance(g, CSVLogger) or isinstance(g, Namespace) and _is_csv(g.class_path) for g in given):
            trainer.logger = [csv, *given]  # the summary's learning curves and plots read its files
    for callback in trainer.get("callbacks") or []:
        if not isinstance(callback, Namespace):  # an instance given from Python: already built
            continue
        module, _, name = callback.class_path.rpartition(".")  # parsed: a full, importable path
        cls = getattr(importlib.import_module(module), name)
        if cls is LightningModelCheckpoint:
            callback.class_path = f"{LastStateCheckpoint.__module__}.{LastStateCheckpoint.__qualname__}"
        if issubclass(cls, LightningModelCheckpoint) and callback.init_args.get("dirpath") is None:
            callback.init_args.dirpath = str(Path(root) / "checkpoints")


def _is_csv(class_path: str) -> bool:
    module, _, name = class_path.rpartition(".")
    return issubclass(getattr(importlib.import_module(module), name), CSVLogger)


def write_scores(trainer: Trainer, command: str, checkpoint: str | None, recipes: list[str]) -> Path | None:
    """Write the scores of ``validate``/``test`` (``trainer.callback_metrics``) with the checkpoint
    and recipes they came from to ``<default_root_dir>/<command>_scores.json`` (atomically);
    return the file (None on other ranks than 0).

    Raises:
        NothingDone: no score was computed (no batch ran); an earlier file is left as it was.
    """
    if not trainer.is_global_zero:
        return None
    scores = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(("val/", "test/"))}
    path = Path(trainer.default_root_dir) / f"{command}_scores.json"
    if not scores:
        kept = f"; {path} was left as it was" if path.exists() else ""
        raise NothingDone(f"bertkit {command}: no score was computed (no {command} batch ran){kept}")
    record = {"command": command, "checkpoint": checkpoint, "recipes": recipes, "scores": scores}
    sources = getattr(trainer.datamodule, "data_sources", None)
    if sources is not None:  # what was scored: a model card says whether it was a sample
        record["data_sources"] = sources()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def in_run_folder(default_root_dir: str | Path, path: str | None, name: str) -> str:
    """``path`` if given, else ``<default_root_dir>/<name>``."""
    return path if path is not None else str(Path(default_root_dir) / name)


class NothingDone(ValueError):
    """A command whose work was empty (no training step, no evaluated or predicted batch): it
    exits non-zero and writes nothing in place of an earlier result."""


class RunFolderBusy(ValueError):
    """Another ``bertkit fit`` writes the run folder, or it holds another run's checkpoints."""


_held: dict[str, IO[str]] = {}


def claim(root: str | Path, checkpoints: str | Path | None, resuming: bool, overwrite: bool) -> None:
    """Take the run folder for one ``fit``: an exclusive lock (``<root>/.fit.lock``, released when
    the process ends, also by ``kill -9``) so that two fits never write one folder, and a refusal
    to start a new run over another run's checkpoints unless it resumes them or ``overwrite``.

    Args:
        root: ``trainer.default_root_dir``.
        checkpoints: the checkpoint folder (None: none kept).
        resuming: ``--ckpt_path`` was given.
        overwrite: ``--overwrite true``: a new run replaces the old run's checkpoints (its
            ``.ckpt`` files are removed when the run starts: a smoke run of one task leaves no
            best checkpoint of another behind).

    Raises:
        RunFolderBusy: the folder is locked by another process, or holds checkpoints of an earlier
            run; the message names the folder and the ways on.
    """
    root = Path(root)
    key = str(root.resolve())
    if key not in _held:
        root.mkdir(parents=True, exist_ok=True)
        handle = (root / LOCK_NAME).open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            handle.close()
            raise RunFolderBusy(
                f"{root}: another `bertkit fit` is writing this run folder (pid {owner}); wait for it to end, "
                "or pass another --trainer.default_root_dir"
            ) from None
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        _held[key] = handle
    taken = earlier_run(checkpoints)
    if taken and not resuming and not overwrite:
        raise RunFolderBusy(taken)
    if taken and not resuming:  # overwrite: the new run replaces them (none is left to pass as this run's best)
        for old in Path(checkpoints).glob("*.ckpt"):
            old.unlink()


def release_all() -> None:
    """Release the run folders this process holds (``claim``): a ``fit`` ends; a later one in the
    same process (a notebook, a test) or another process may take them."""
    for handle in _held.values():
        handle.close()  # closing the file releases its flock
    _held.clear()
