"""Checkpoint files: written atomically beside their final name, read by one checked
``weights_only`` loader, found again by a later process (``--ckpt_path best|last``), with a
``last.ckpt`` that holds the last state and a resume that refuses a changed recipe."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import ModelCheckpoint as LightningModelCheckpoint
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException
from typing_extensions import override

from bertkit.utils.io import atomic_path

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that writes each checkpoint to a temporary file in the same folder
    and renames it into place (``bertkit.utils.io.atomic_path``): a run killed while saving leaves the
    previous checkpoint intact, and files get the permissions of the user's umask. (Lightning's
    own save goes through a temporary file in the system temp folder, then a copy across file
    systems, with mode 0600.) Local paths only; anything else is Lightning's."""

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        with atomic_path(path) as tmp:
            torch.save(checkpoint, tmp)

    @override
    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Every file the trainer reads (resume, ``--ckpt_path best|last``, and the weights rank 0
        hands back under ``ddp_fork``/``ddp_notebook``, a bare state dict) goes through
        ``load_checkpoint``: ``weights_only=True`` whatever torch's default. (Commands check a
        ``--ckpt_path`` to be a Lightning checkpoint before the trainer starts:
        ``check_checkpoint``.)"""
        if "://" in str(path):
            return super().load_checkpoint(path, map_location, weights_only=True)
        return load_checkpoint(path, map_location=map_location, lightning=False)


class LastStateCheckpoint(LightningModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` with ``save_last`` that holds the last state: ``last.ckpt``
    is written at every validation end, every training epoch end and when training ends, also
    when the monitored score did not improve (Lightning 2.6 writes it only together with a new
    top-k checkpoint, so a plateau leaves it behind). Run folders use it in place of Lightning's
    (``bertkit.training.run_folder.place_outputs``); every argument is Lightning's."""

    last_step: int = -1
    """The global step that last.ckpt holds (-1: none written yet)."""

    @override
    def _save_last_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict[str, Any]) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        if self.save_last:
            self.last_step = trainer.global_step

    def _keep_last_current(self, trainer: pl.Trainer) -> None:
        if (
            not self.save_last
            or trainer.fast_dev_run
            or trainer.sanity_checking
            or trainer.state.fn != TrainerFn.FITTING
            or self.last_step == trainer.global_step
            or trainer.global_step == 0
        ):
            return
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    @override
    def _save_topk_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict[str, Any]) -> None:
        if self.monitor is not None and self.monitor not in monitor_candidates and not sum(trainer.num_val_batches):
            return  # no validation ran: nothing to rank (the fit summary says so), last.ckpt is kept
        super()._save_topk_checkpoint(trainer, monitor_candidates)

    @property
    @override
    def state_key(self) -> str:
        """Lightning's key for its ``ModelCheckpoint``: runs resume from either class's checkpoints."""
        return super().state_key.replace(type(self).__qualname__, "ModelCheckpoint", 1)

    # After the hook where Lightning decides on a top-k checkpoint (validation end, or training
    # epoch end for runs without validation), so a new best is never skipped as "already saved".
    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._keep_last_current(trainer)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._keep_last_current(trainer)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self._keep_last_current(trainer)

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """SIGTERM (a scheduler, ``timeout``): Lightning stops at a batch boundary, a consistent
        state, which ``last.ckpt`` then holds. Ctrl-C can land inside a step: nothing is written."""
        super().on_exception(trainer, pl_module, exception)
        if isinstance(exception, SIGTERMException):
            self._keep_last_current(trainer)


def newest_last(checkpoint: LightningModelCheckpoint) -> Path | None:
    """The newest ``last*.ckpt`` (``last.ckpt``, ``last-v1.ckpt`` …) in a checkpoint directory."""
    found = sorted(Path(checkpoint.dirpath or ".").glob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def recorded_best(checkpoint: LightningModelCheckpoint) -> str | None:
    """The newest ``best_model_path`` that a checkpoint in the folder records and that still
    exists: a run without validation records none, so an earlier run's best is found. A file
    ``load_checkpoint`` cannot read is passed over, with a warning naming it."""
    found = sorted(Path(checkpoint.dirpath or ".").glob("*.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in found:
        try:
            state = load_checkpoint(path, mmap=True).get("callbacks", {})
        except ValueError as err:
            log.warning("%s", err)
            continue
        for key, value in state.items():
            best = value.get("best_model_path") if key.startswith("ModelCheckpoint") else None
            if best and Path(best).is_file():
                return best
    return None


def load_checkpoint(
    path: str | Path, mmap: bool = False, map_location: Any = "cpu", lightning: bool = True
) -> dict[str, Any]:
    """The one way bertkit reads a ``.ckpt`` file: ``torch.load(weights_only=True)`` (tensors and
    plain values only: no pickled object of the file runs), checked to be a Lightning checkpoint.

    Args:
        path: the file.
        mmap: map the tensors instead of reading them (to look at the hyper-parameters only).
        map_location: ``torch.load``'s.
        lightning: check that it is a Lightning checkpoint (a dict with ``state_dict``); False:
            any dict (Lightning's own files, such as the weights a forked rank 0 hands back).

    Raises:
        FileNotFoundError: no such file (or a directory).
        ValueError: not a readable checkpoint (truncated, another format, pickled objects).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: checkpoint file not found" + (" (it is a directory)" if path.is_dir() else "")
        )
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as err:  # any unreadable file gets the same clear message
        reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"{path}: not a readable checkpoint ({reason}); pass a .ckpt file written by `bertkit fit`"
        ) from None
    if not isinstance(state, dict) or (lightning and "state_dict" not in state):
        raise ValueError(f"{path}: not a Lightning checkpoint (no state_dict)")
    return state


def stored_task(checkpoint: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The task spec a checkpoint's hyper-parameters hold and its key (``task``; release 0.1
    stored it as ``head``); (None, "task") when there is none."""
    hparams = checkpoint.get("hyper_parameters") or {}
    for key in ("task", "head"):
        if isinstance(hparams.get(key), dict):
            return hparams[key], key
    return None, "task"


def check_checkpoint(path: str | Path, task: str | None) -> dict[str, Any]:
    """Fail early, with the file's name, on a checkpoint that is missing, unreadable, names a
    task bertkit does not know (``bertkit.plugins.stored_class``: nothing is imported for it) or
    another task than the recipe's (compared by full class path, a deprecated alias as the class
    it stands for).

    Args:
        path: the file.
        task: the recipe's task (registered name or dotted path), None when unknown.

    Returns:
        The checkpoint, tensors memory-mapped.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unreadable, an unknown stored task, or trained with another task.
    """
    from bertkit.plugins import full_name, import_class, registered_tasks, stored_class
    from bertkit.tasks.task import Task, canonical

    state = load_checkpoint(path, mmap=True)
    spec, key = stored_task(state)
    if spec is None:
        return state
    tasks = registered_tasks()
    trained = canonical(
        stored_class(str(spec.get("class_path")), Task, tasks, f"{path}: hyper_parameters.{key}.class_path")
    )
    if task:
        wanted = canonical(tasks[task] if task in tasks else import_class(task, Task))
        if full_name(trained) != full_name(wanted):
            raise ValueError(f"{path}: trained with {full_name(trained)}, but the recipe's task is {full_name(wanted)}")
    return state


def _changed(now: dict[str, Any], stored: dict[str, Any], prefix: str, skip: tuple[str, ...] = ()) -> list[str]:
    """``prefix.key=now (checkpoint: stored)`` for each setting whose value differs (compared as JSON)."""
    changes = []
    for key in sorted(set(now) | set(stored)):
        if key in skip or key.startswith("_"):
            continue
        a, b = (json.dumps(d.get(key), sort_keys=True, default=str) for d in (now, stored))
        if a != b:
            changes.append(f"{prefix}.{key}={a} (checkpoint: {b})")
    return changes


def recorded_max_length(stored: dict[str, Any]) -> int | None:
    """The input length a loaded checkpoint records: its ``model.max_length``, or where an earlier
    release kept it, its data module's ``max_length``; None where it records neither."""
    for settings in (stored.get("hyper_parameters"), stored.get("datamodule_hyper_parameters")):
        if isinstance((settings or {}).get("max_length"), int):
            return settings["max_length"]
    return None


def refuse_changed_recipe(path: str | Path, stored: dict[str, Any], model: Any, datamodule: Any) -> None:
    """Resuming ``fit`` continues the checkpoint's optimizer, learning-rate schedule and model, so
    a model setting that differs from the checkpoint's would be silently ignored: refuse it. A
    changed data setting (the data module's, a task's ``Task.data_settings``, or the length the
    model reads input in, ``model.max_length``) applies (the recipe's value), with a warning
    naming it. A checkpoint of an earlier release, which kept the input length and the
    multi-task temperature with the data module's settings, is compared with those.

    Args:
        path: the checkpoint, for messages.
        stored: the loaded checkpoint (``load_checkpoint``).
        model: the ``BertModule`` built from the recipe.
        datamodule: the ``BertDataModule`` (or None).

    Raises:
        ValueError: model settings differ; the message lists each with both values.
    """
    hparams = {k: v for k, v in (stored.get("hyper_parameters") or {}).items() if k not in ("task", "head")}
    data_then = stored.get("datamodule_hyper_parameters") or {}
    hparams.pop("max_length", None)
    length_then = recorded_max_length(stored)
    now = dict(model.hparams)
    length_now = now.pop("max_length", None)
    task_now, (task_then, _) = now.pop("task", {}) or {}, stored_task(stored)
    learned, reading = model.task.learned, model.task.data_settings
    args_now = {k: v for k, v in (task_now.get("init_args") or {}).items() if not (k in learned and v is None)}
    args_then = (task_then or {}).get("init_args") or {}
    changes = _changed(now, hparams, "model")
    changes += _changed(args_now, args_then, "model.task.init_args", skip=learned + reading)
    if changes:
        raise ValueError(
            f"{path}: resuming with a changed recipe: {'; '.join(changes)}. A resumed run continues the checkpoint's "
            "optimizer, learning-rate schedule and model, so these would be ignored: resume with the recipe as it "
            "was, or start a new run (another --trainer.default_root_dir)"
        )
    read_now, read_then = ({k: v for k, v in args.items() if k in reading} for args in (args_now, args_then))
    applied = _changed(read_now, read_then, "model.task.init_args")
    applied += _changed({"max_length": length_now}, {"max_length": length_then}, "model")
    if datamodule is not None and data_then:  # the settings that moved to the model and the task are compared there
        applied += _changed(dict(datamodule.hparams), data_then, "data", skip=("max_length", "task_temperature"))
    for change in applied:
        log.warning("%s: resuming with %s; the recipe's value applies", path, change)
