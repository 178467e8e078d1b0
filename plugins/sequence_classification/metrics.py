"""torchmetrics for each problem type, with the names GLUE reports.

- single_label: ``accuracy``, ``f1_macro``, ``mcc`` (Matthews, CoLA's metric); with two labels
  also ``f1`` of the positive label (MRPC, QQP); with ``labels``, ``f1_<label>`` for each label
  (plotted per label after fit).
- multi_label: ``exact_match`` (every label right), ``f1_macro``, ``f1_micro``.
- regression: ``pearson``, ``spearman`` (STS-B), ``mse``.
"""

from __future__ import annotations

import torch
from torch import nn
from torchmetrics import MeanSquaredError, PearsonCorrCoef, SpearmanCorrCoef
from torchmetrics.classification import (
    BinaryF1Score,
    MulticlassAccuracy,
    MulticlassF1Score,
    MulticlassMatthewsCorrCoef,
    MultilabelExactMatch,
    MultilabelF1Score,
)


class ClassificationMetrics(nn.Module):
    """One stage's metrics for a problem type.

    Args:
        problem_type: ``single_label``, ``multi_label`` or ``regression``.
        num_labels: number of labels (ignored for regression).
        positive_index: the positive label's index for binary ``f1`` (two labels only).
        threshold: probability at or above which a multi-label label is predicted.
        labels: label names, for the per-label ``f1_<label>`` (single_label only).
    """

    def __init__(
        self,
        problem_type: str,
        num_labels: int,
        positive_index: int = 1,
        threshold: float = 0.5,
        labels: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.problem_type, self.positive_index, self.labels = problem_type, positive_index, labels
        if problem_type == "single_label":
            metrics = {
                "accuracy": MulticlassAccuracy(num_labels, average="micro"),
                "f1_macro": MulticlassF1Score(num_labels, average="macro"),
                "mcc": MulticlassMatthewsCorrCoef(num_labels),
            }
            if num_labels == 2:
                metrics["f1"] = BinaryF1Score()
            if labels:
                metrics["f1_per_label"] = MulticlassF1Score(num_labels, average="none")
        elif problem_type == "multi_label":
            metrics = {
                "exact_match": MultilabelExactMatch(num_labels, threshold=threshold),
                "f1_macro": MultilabelF1Score(num_labels, threshold=threshold, average="macro"),
                "f1_micro": MultilabelF1Score(num_labels, threshold=threshold, average="micro"),
            }
        else:
            metrics = {"pearson": PearsonCorrCoef(), "spearman": SpearmanCorrCoef(), "mse": MeanSquaredError()}
        self.metrics = nn.ModuleDict(metrics)

    def update(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """Add a batch: logits (B, num_labels) or (B, 1) for regression; labels (B,) class ids,
        (B, num_labels) multi-hot, or (B,) targets."""
        if self.problem_type == "single_label":
            preds = logits.argmax(-1)
            for name, metric in self.metrics.items():
                if name == "f1":
                    metric.update(preds == self.positive_index, labels == self.positive_index)
                else:
                    metric.update(preds, labels)
        elif self.problem_type == "multi_label":
            for metric in self.metrics.values():
                metric.update(logits.sigmoid(), labels.long())
        else:
            for metric in self.metrics.values():
                metric.update(logits.squeeze(-1).float(), labels.float())

    def compute(self) -> dict[str, torch.Tensor]:
        """The epoch's values (``f1_<label>`` per label for single-label tasks with names)."""
        values = {name: metric.compute() for name, metric in self.metrics.items()}
        if "f1_per_label" in values:
            values |= {f"f1_{label}": f1 for label, f1 in zip(self.labels, values.pop("f1_per_label"), strict=True)}
        return values

    def reset(self) -> None:
        for metric in self.metrics.values():
            metric.reset()
