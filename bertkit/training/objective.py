"""The training-objective seam of ``BertModule``: a term a Lightning callback adds to the training
loss (``BertModule.add_objective``; ``bertkit.training.distillation.Distillation`` is one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

from bertkit.tasks.task import Batch

if TYPE_CHECKING:
    import pytorch_lightning as pl


class TrainingObjective(Protocol):
    """What ``BertModule`` asks of an objective in each training step (never in validation, test
    or predict)."""

    reads_hidden_states: bool
    """Whether ``combine`` reads the student's hidden states (they are then computed)."""

    modules: dict[str, nn.Module]
    """Trainable layers the objective adds to the model by attribute name (a projection, say):
    trained with it and held by its checkpoints while it trains; a model loaded without the
    objective drops them."""

    def combine(
        self,
        outputs: dict[str, torch.Tensor],
        batch: Batch,
        model: pl.LightningModule,
        states: tuple[torch.Tensor, ...] | None,
    ) -> dict[str, Any]:
        """The step's outputs with this objective's term in ``loss``, and its parts under keys
        ending in ``_loss`` (logged as ``train/…``).

        Args:
            outputs: the head's training outputs (``loss`` and its parts), or an earlier
                objective's result.
            batch: the collated batch.
            model: the ``BertModule`` training.
            states: with ``reads_hidden_states``, the encoder's hidden states, embeddings first,
                one per block, each (B, T, H); else None.
        """
        ...
