"""What ``bertkit fit`` prints when it ends: how far it trained, the best score and its
checkpoint, the last checkpoint, where the logs and plots are, and the commands to run next."""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path

import pytorch_lightning as pl

from bertkit.training.plots import write_plots

log = logging.getLogger(__name__)


def _relative(path: str | Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)


def _score(value: object) -> str:
    return f"{float(value):.4f}" if value is not None else "n/a"


def options(args: list[str]) -> str:
    """A run's command-line options (``args`` after the command), shell-quoted, without
    ``--ckpt_path``: what the next command needs to find the same run (every ``--config`` and
    dotted override, ``--trainer.default_root_dir`` among them)."""
    kept = [a for i, a in enumerate(args) if not a.startswith("--ckpt_path") and args[i - 1 : i] != ["--ckpt_path"]]
    return " ".join(shlex.quote(a) for a in kept)


def tracker_line(logger: object) -> str:
    """Where a tracker logged the run: its class, folder (TensorBoard, W&B's local files) or
    experiment and run (MLflow)."""
    where = getattr(logger, "log_dir", None)
    if where:
        return f"{type(logger).__name__} {_relative(where)}"
    return f"{type(logger).__name__} experiment {getattr(logger, 'name', None)}, run {getattr(logger, 'version', None)}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {secs} s" if minutes else f"{secs} s"


def no_validation(trainer: pl.Trainer) -> str:
    """Why a fit logged no validation score, and what to pass for one."""
    if not trainer.limit_val_batches:
        return f"no validation ran: trainer.limit_val_batches is {trainer.limit_val_batches}"
    batches = trainer.num_training_batches
    if 0 <= trainer.max_steps == trainer.global_step and batches != float("inf") and trainer.max_steps < batches:
        return (
            f"no validation ran: trainer.max_steps {trainer.max_steps} stopped training inside the first epoch "
            f"({batches} batches), before its validation; pass --trainer.val_check_interval {trainer.max_steps} "
            "(in batches) or more steps"
        )
    return "no validation ran: no validation data, or the run stopped before its first validation"


def fit_summary(trainer: pl.Trainer, args: list[str], seconds: float | None = None) -> str:
    """The end-of-fit summary (writes the plots it names; see ``bertkit.training.plots``);
    ``args`` are fit's options, repeated in the commands it suggests next; ``seconds`` the wall
    time of the fit."""
    took = f" in {_duration(seconds)}" if seconds is not None else ""
    lines = [f"\nbertkit fit: done after {trainer.current_epoch} epoch(s), {trainer.global_step} optimizer steps{took}"]
    pretrained = trainer.lightning_module.hparams.get("pretrained")
    if pretrained:  # a Hub id with the commit it resolved to (bertkit.model.hub.pinned)
        lines.append(f"  started from: {pretrained}")
    checkpoint = trainer.checkpoint_callback
    if checkpoint is not None and checkpoint.monitor and checkpoint.best_model_path:
        lines.append(
            f"  best {checkpoint.monitor} {_score(checkpoint.best_model_score)}: {_relative(checkpoint.best_model_path)}"
        )
    if getattr(trainer.datamodule, "on_sample", False):
        lines.append("  (on a sample, not the task's data: the scores show the loop runs, not how good the model is)")
    elif checkpoint is not None and checkpoint.monitor and not checkpoint.best_model_path:
        seen = trainer.callback_metrics.get(checkpoint.monitor)
        why = no_validation(trainer) if seen is None else f"its value was {float(seen)}, never an improvement"
        lines.append(f"  best {checkpoint.monitor}: none kept ({why})")
    if checkpoint is not None and checkpoint.last_model_path:
        step = getattr(checkpoint, "last_step", -1)  # LastStateCheckpoint: the step last.ckpt holds
        at = f" at step {step}" if step >= 0 else ""
        path = Path(checkpoint.last_model_path)
        size = ""  # adapter checkpoints hold the adapters and the head only: say how small
        if trainer.lightning_module.hparams.get("adapter") and path.is_file():
            size = f", {path.stat().st_size / 1e6:.1f} MB (adapters and head)"
        lines.append(f"  last checkpoint{at}: {_relative(path)}{size} (resume: --ckpt_path last)")
    logger = trainer.logger
    metrics = Path(logger.log_dir) / "metrics.csv" if logger is not None and logger.log_dir else None
    if metrics is not None and metrics.is_file():
        try:
            plots = [p.name for p in write_plots(metrics)]
        except (OSError, ValueError) as err:  # a plot is a convenience: say why, keep the run's result
            log.warning("could not write plots beside %s: %s", metrics, err)
            plots = []
        lines.append(f"  logs: {_relative(metrics.parent)} (metrics.csv{''.join(', ' + p for p in plots)})")
    for tracker in trainer.loggers[1:]:  # trackers beside the CSV logs (recipes/trackers/)
        lines.append(f"  also logged to: {tracker_line(tracker)}")
    if args:
        config = options(args)
        best = "best" if checkpoint is not None and checkpoint.best_model_path else "last"
        lines += [
            f"  next: bertkit test {config} --ckpt_path {best}",
            f"        bertkit predict {config} --ckpt_path {best} --data.predict_file FILE",
        ]
    return "\n".join(lines)
