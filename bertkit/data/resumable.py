"""A training loader that keeps its place inside an epoch.

Lightning saves the ``state_dict()`` of every training loader that has one in each checkpoint
and hands it back to ``load_state_dict`` before a resumed run iterates (its stateful-loader
protocol, ``pytorch_lightning.utilities.types._Stateful``; ``torchdata``'s
``StatefulDataLoader`` follows the same one). Without it, a run resumed from a checkpoint written
inside an epoch (a SIGTERM, ``every_n_train_steps``, ``val_check_interval`` below one epoch)
restarts the epoch's order and trains again on batches it has seen.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from bertkit.data.samplers import ResumableOrder

log = logging.getLogger(__name__)


def fingerprint(lengths: Sequence[int], *settings: Any) -> str:
    """A short digest of the training features' lengths and the settings that shape the batches
    (batch size, seed, processes …): a resume whose digest differs cannot continue the same order."""
    digest = hashlib.sha256(np.asarray(lengths, dtype=np.int64).tobytes())
    digest.update(repr(settings).encode())
    return digest.hexdigest()[:16]


class TrainingLoader(DataLoader):
    """A ``DataLoader`` over a ``ResumableOrder`` (its ``batch_sampler``, else its ``sampler``)
    whose ``state_dict`` is its place in the epoch: ``{"epoch", "batches", "data"}``, the batches
    it has handed out in that epoch and the ``fingerprint`` of the data and settings.

    Args:
        *args, **kwargs: those of ``DataLoader``.
        data: the ``fingerprint`` of the features and the batch settings.
    """

    def __init__(self, *args: Any, data: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.data, self.epoch, self.handed_out = data, 0, 0

    @property
    def order(self) -> ResumableOrder:
        """The object that draws the epoch's order (and that Lightning calls ``set_epoch`` on)."""
        return self.batch_sampler if isinstance(self.batch_sampler, ResumableOrder) else self.sampler

    def __iter__(self) -> Iterator[Any]:
        order = self.order
        self.epoch = order.epoch
        self.handed_out = order.begins_at()
        for batch in super().__iter__():
            self.handed_out += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batches": self.handed_out, "data": self.data}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Begin epoch ``state["epoch"]`` after ``state["batches"]`` batches; if the data or the
        batch settings changed since the checkpoint, say that the resume is not exact and begin
        that epoch from its start."""
        if state.get("data") != self.data:
            log.warning(
                "resuming inside epoch %d after %d batches, but the training data or the batch settings "
                "(batch_size, max_tokens, seed, group_by_length, tasks, processes) differ from the checkpoint's: "
                "the epoch begins again from its start, and the run will not match an uninterrupted one",
                state.get("epoch", 0), state.get("batches", 0),
            )  # fmt: skip
            return
        self.order.resume(state["epoch"], state["batches"])
