"""Checkpoint files: written atomically beside their final name, and found again by a later
process (``--ckpt_path best|last``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import ModelCheckpoint
from typing_extensions import override

from bertkit.io import atomic_path


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that writes each checkpoint to a temporary file in the same folder
    and renames it into place (``bertkit.io.atomic_path``): a run killed while saving leaves the
    previous checkpoint intact, and files get the permissions of the user's umask. (Lightning's
    own save goes through a temporary file in the system temp folder, then a copy across file
    systems, with mode 0600.) Local paths only; anything else is Lightning's."""

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        with atomic_path(path) as tmp:
            torch.save(checkpoint, tmp)


def newest_last(checkpoint: ModelCheckpoint) -> Path | None:
    """The newest ``last*.ckpt`` (``last.ckpt``, ``last-v1.ckpt`` …) in a checkpoint directory."""
    found = sorted(Path(checkpoint.dirpath or ".").glob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def recorded_best(checkpoint: ModelCheckpoint) -> str | None:
    """The newest ``best_model_path`` that a checkpoint in the folder records and that still
    exists: a run without validation records none, so an earlier run's best is found."""
    found = sorted(Path(checkpoint.dirpath or ".").glob("*.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in found:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("callbacks", {})
        for key, value in state.items():
            best = value.get("best_model_path") if key.startswith("ModelCheckpoint") else None
            if best and Path(best).is_file():
                return best
    return None


def check_checkpoint(path: str | Path, head: str | None) -> None:
    """Fail early, with the file's name, on a ``--ckpt_path`` that is missing, unreadable or of
    another head than the recipe's (LightningCLI would otherwise replace the recipe's head with
    the checkpoint's, or fail deep inside unpickling).

    Args:
        path: the file.
        head: the recipe's head (class name or dotted path), None when unknown.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a readable Lightning checkpoint, or trained with another head.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: --ckpt_path file not found")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ValueError(
            f"{path}: --ckpt_path is not a readable checkpoint ({type(err).__name__}); pass a .ckpt file of `bertkit fit`"
        ) from None
    if not isinstance(state, dict) or "state_dict" not in state:
        raise ValueError(f"{path}: --ckpt_path is not a Lightning checkpoint (no state_dict)")
    trained = ((state.get("hyper_parameters") or {}).get("head") or {}).get("class_path", "").rpartition(".")[2]
    wanted = (head or "").rpartition(".")[2]
    if trained and wanted and trained != wanted:
        raise ValueError(f"{path}: --ckpt_path was trained with {trained}, but the recipe's head is {wanted}")
