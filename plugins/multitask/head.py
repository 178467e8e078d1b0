"""``MultiTaskHeads``: the heads of a ``MultiTask``, one per named task, on one encoder."""

from __future__ import annotations

from typing import Any

import torch
from bertkit_plugins.multitask.task import own_outputs
from torch import nn

from bertkit.api.task import Batch, EncoderOutput, Head


class MultiTaskHeads(Head):
    """Each batch's task's head: its outputs, its loss times the task's weight, its metrics.

    The head's own losses are returned as ``{task}/loss`` (and ``{task}/mlm_loss`` …), metrics
    as ``{task}/{name}``, so ``BertModule`` logs ``val/ner/f1``.

    Args:
        heads: the heads by task name.
        loss_weights: each task's loss weight.
    """

    trains_every_parameter = False  # a batch trains its task's head only

    def __init__(self, heads: dict[str, Head], loss_weights: dict[str, float]) -> None:
        super().__init__()
        self.heads = nn.ModuleDict(heads)
        self.loss_weights = dict(loss_weights)
        self._updated: set[tuple[str, str]] = set()  # (stage, task) with metric updates to compute

    @property
    def reads_cls_only(self) -> bool:  # type: ignore[override]
        return all(head.reads_cls_only for head in self.heads.values())

    @property
    def reads_pooler(self) -> bool:  # type: ignore[override]
        return any(head.reads_pooler for head in self.heads.values())

    @property
    def reads_padding(self) -> bool:  # type: ignore[override]
        return any(head.reads_padding for head in self.heads.values())

    def attach(self, encoder: nn.Module) -> None:
        for head in self.heads.values():
            head.attach(encoder)

    def parameter_settings(self) -> list[tuple[list[nn.Parameter], dict[str, float]]]:
        return [group for head in self.heads.values() for group in head.parameter_settings()]

    def encoder_inputs(self, batch: Batch) -> Batch:
        return self.heads[batch["task"][0]].encoder_inputs(batch)

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        task = batch["task"][0]
        outputs = self.heads[task](encoded, batch)
        losses = [k for k in outputs if k == "loss" or k.endswith("_loss")]
        result = {k: v for k, v in outputs.items() if k not in losses}
        result.update({f"{task}/{k}": outputs[k] for k in losses})
        if "loss" in outputs:
            result["loss"] = self.loss_weights[task] * outputs["loss"]
        return result

    def decode(self, outputs: dict[str, torch.Tensor], batch: Batch) -> dict[str, torch.Tensor]:
        task = batch["task"][0]
        return {**outputs, **self.heads[task].decode(own_outputs(outputs, task), batch)}

    def feature_predictions(self, decoded: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        """The batch's task's head's, each feature's with the ``task`` named."""
        task = batch["task"][0]
        return [{**p, "task": task} for p in self.heads[task].feature_predictions(own_outputs(decoded, task), batch)]

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        task = batch["task"][0]
        self.heads[task].update_metrics(stage, own_outputs(outputs, task), batch)
        self._updated.add((stage, task))

    def compute_metrics(self, stage: str) -> dict[str, torch.Tensor]:
        """Each task's metrics as ``{task}/{name}``, for the tasks that had ``stage`` batches (the
        sanity check's few batches may hold one task only)."""
        tasks = [n for n in self.heads if (stage, n) in self._updated]
        self._updated -= {(stage, n) for n in tasks}
        return {f"{n}/{k}": v for n in tasks for k, v in self.heads[n].compute_metrics(stage).items()}
