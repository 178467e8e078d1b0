"""Callbacks for the crash tests: the process sends itself a signal when training reaches a given
optimizer step. ``KillAtStep``: SIGKILL, as ``kill -9`` (no clean-up, no final checkpoint);
``TermAtStep``: SIGTERM, as a scheduler's stop (Lightning stops at the batch boundary)."""

from __future__ import annotations

import os
import signal

from pytorch_lightning.callbacks import Callback


class KillAtStep(Callback):
    signal = signal.SIGKILL

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signal)


class TermAtStep(KillAtStep):
    signal = signal.SIGTERM
