"""A quiet console for ``bertkit`` runs: Lightning's advertisements, its own deprecation noise and
notes that do not concern a bertkit user are dropped; everything else (warnings about the user's
settings and data) is kept."""

from __future__ import annotations

import logging
import os
import re
import warnings

# Messages (by their start) Lightning logs at INFO that carry nothing for the run.
_DROPPED_INFO = (
    "💡 Tip:",
    "Loading `train_dataloader` to estimate",
    "TPU available:",
    "HPU available:",
    "Trainer already configured with model summary",  # bertkit.training.progress.BriefSummary replaces the table
    "GPU available: False, used: False",  # a CPU run; a GPU's line stays
    "`Trainer.fit` stopped: `max_epochs=",  # the fit summary says how far it trained
    "`Trainer.fit` stopped: `max_steps=",
    "Seed set to ",  # the recipe states seed_everything; checkpoints keep it
)
# Warnings by message (a regex matched at the start): fixed in libraries, not in a user's recipe.
_DROPPED_WARNINGS = (
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # Lightning 2.6 with torch >= 2.10
    r"The number of training batches \(\d+\) is smaller than the logging interval",  # logged per epoch anyway
    r"You are using a custom batch sampler `\w+` for prediction",  # a task's own order yields every index (BatchOrder)
    r"It is recommended to use `self.log\('(val|test)/",  # epoch metrics are torchmetrics', synced by them
    r"Total length of `list` across ranks is zero",
    r"Your `IterableDataset` has `__len__` defined",  # litdata's streams share themselves out by process and worker
    r"LightningCLI's args parameter is intended to run from within Python",  # bertkit passes args on purpose  # no validation file: bertkit.data.datamodule says so in its words
)


class _DropInfo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:  # under DDP, Lightning prefixes "[rank: N] "
        return not re.sub(r"^\[rank: \d+\] ", "", str(record.msg)).startswith(_DROPPED_INFO)


class _RankZero(logging.Filter):
    """bertkit's notes (the data it reads, settings it changed) are the same in every process:
    under several processes only global rank 0 prints them; errors print everywhere. The rank
    is read as Lightning reads it before its strategy starts (``RANK``, ``LOCAL_RANK``,
    ``SLURM_PROCID``, ``JSM_NAMESPACE_RANK``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR or not record.name.startswith("bertkit"):
            return True
        ranks = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
        return next((os.environ[k] for k in ranks if k in os.environ), "0") == "0"


def quiet() -> None:
    """Install the filters (idempotent) on Lightning's loggers, on the handler that prints
    bertkit's own records (logging's last resort: bertkit configures none) and on ``warnings``."""
    for name in (
        "pytorch_lightning.utilities.rank_zero",
        "lightning_fabric.utilities.rank_zero",
        "lightning_fabric.utilities.seed",
    ):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropInfo) for f in logger.filters):
            logger.addFilter(_DropInfo())
    last = logging.lastResort
    if last is not None and not any(isinstance(f, _RankZero) for f in last.filters):
        last.addFilter(_RankZero())
    for message in _DROPPED_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
