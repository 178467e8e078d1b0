"""A callback for the equality tests: dropout off (every ``nn.Dropout`` and the attention's), and
each training step's loss, averaged over the processes, appended by rank 0 to ``path`` (one JSON
number per line)."""

from __future__ import annotations

import json

from pytorch_lightning.callbacks import Callback
from torch import nn


class NoDropoutStepLosses(Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_fit_start(self, trainer, pl_module) -> None:
        for module in pl_module.modules():
            if isinstance(module, nn.Dropout):
                module.p = 0.0
        pl_module.encoder.set_attention_dropout(0.0)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = trainer.strategy.reduce(outputs["loss"].detach(), reduce_op="mean")
        if trainer.is_global_zero:
            with open(self.path, "a") as f:
                f.write(json.dumps(float(loss)) + "\n")
