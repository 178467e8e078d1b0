"""A callback for the crash test: the process kills itself (SIGKILL, as ``kill -9``) when
training reaches a given optimizer step — no clean-up, no final checkpoint."""

from __future__ import annotations

import os
import signal

from pytorch_lightning.callbacks import Callback


class KillAtStep(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
