"""``PooledClassificationHead``: the sequence-classification head (BERT's GLUE layer).

The pooled ``[CLS]`` vector (BERT's tanh pooler; or the mean of the last hidden states) ->
dropout -> one linear layer (Devlin et al. 2019, §4.1; google-research/bert run_classifier.py).
Loss: cross-entropy (single label), binary cross-entropy per label (multi-label) or mean squared
error (regression), with the task's class weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from bertkit_plugins.sequence_classification.metrics import ClassificationMetrics
from torch import nn

from bertkit.api.task import (
    Batch,
    BertConfig,
    Dropout,
    EncoderOutput,
    Head,
    TransformersExport,
    forwarding,
    mean_over_processes,
)

if TYPE_CHECKING:
    from bertkit_plugins.sequence_classification.task import SequenceClassification


class PooledClassificationHead(Head, TransformersExport):
    """Dropout and a linear layer on the pooled ``[CLS]`` (or mean) vector.

    Args:
        task: the task: problem type, labels, pooling, dropout, class weights, metrics' settings.
        config: the encoder's config (``hidden_size``, ``initializer_range``).

    Raises:
        ValueError: see ``SequenceClassification.num_outputs``.
    """

    hf_architecture = "BertForSequenceClassification"
    onnx_outputs = ("logits",)

    def __init__(self, task: SequenceClassification, config: BertConfig) -> None:
        super().__init__()
        hp = task.hparams
        self.problem_type, self.pooling = hp.problem_type, hp.pooling
        num_outputs = task.num_outputs()
        self.dropout = Dropout(hp.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_outputs)
        nn.init.normal_(self.classifier.weight, std=config.initializer_range)
        nn.init.zeros_(self.classifier.bias)
        weights = task.loss_weights()
        if weights is not None:
            self.register_buffer("loss_weight", torch.tensor(weights, dtype=torch.float))
        positive = task.positive_index()
        self.metrics = nn.ModuleDict(
            {
                stage: ClassificationMetrics(hp.problem_type, num_outputs, positive, hp.threshold, hp.labels)
                for stage in ("val", "test")
            }
        )
        problem = {"single_label": "single_label_classification", "multi_label": "multi_label_classification"}
        labels = hp.labels if hp.problem_type != "regression" else ["score"]
        self._hf_config = {
            "problem_type": problem.get(hp.problem_type, "regression"),
            "id2label": dict(enumerate(labels)),
            "label2id": {label: i for i, label in enumerate(labels)},
        }

    @property
    def reads_cls_only(self) -> bool:  # type: ignore[override]
        return self.pooling == "cls"

    @property
    def reads_pooler(self) -> bool:  # type: ignore[override]
        return self.pooling == "cls"

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """``classifier.*`` (on the pooler, as transformers computes it); none for mean pooling."""
        if self.pooling != "cls":
            return {}
        return {f"classifier.{k}": v for k, v in self.classifier.state_dict().items()}

    def hf_config(self) -> dict[str, Any]:
        """``problem_type``, ``id2label`` and ``label2id`` (regression: one label, ``score``)."""
        return dict(self._hf_config)

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        """``logits`` (B, labels) or (B, 1); with labels, ``loss``.

        Raises:
            ValueError: ``pooling: cls`` on an encoder without a pooler.
        """
        if self.pooling == "cls":
            if encoded.pooler_output is None:
                raise ValueError("model.task.pooling=cls needs the encoder's pooler; this encoder has none: use mean")
            pooled = encoded.pooler_output
        else:
            mask = batch["attention_mask"].unsqueeze(-1).to(encoded.last_hidden_state.dtype)
            pooled = (encoded.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels) or (B, 1)
        out = {"logits": logits}
        if "labels" in batch:
            out["loss"] = self._loss(logits, batch["labels"])
        return out

    def distillation_targets(
        self, outputs: dict[str, torch.Tensor], batch: Batch
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Each sentence's label distribution (single-label classification); regression and
        multi-label heads have no distribution over labels to learn and take no part."""
        if self.problem_type != "single_label":
            return {}
        logits = outputs["logits"]
        return {"logits": (logits, torch.ones(logits.shape[:-1], dtype=torch.bool, device=logits.device))}

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        weight = getattr(self, "loss_weight", None)
        if self.problem_type == "regression":
            total = F.mse_loss(logits.squeeze(-1).float(), labels.float(), reduction="sum")
            return mean_over_processes(total, labels.numel(), self.training)
        if self.problem_type == "multi_label":
            total = F.binary_cross_entropy_with_logits(
                logits.float(), labels.float(), pos_weight=weight, reduction="sum"
            )
            return mean_over_processes(total, labels.numel(), self.training)
        total = F.cross_entropy(logits.float(), labels, weight=weight, reduction="sum")  # weighted: / the weights' sum
        return mean_over_processes(total, weight[labels].sum() if weight is not None else labels.numel(), self.training)

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        self.metrics[stage].update(outputs["logits"], batch["labels"])

    def feature_predictions(self, decoded: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        """Per text: ``example_index`` and ``scores``, each label's probability (softmax; a sigmoid
        per label for multi-label), or the regression's one value."""
        logits = decoded["logits"].float()
        if self.problem_type == "regression":
            scores = logits.squeeze(-1)
        else:
            scores = logits.sigmoid() if self.problem_type == "multi_label" else logits.softmax(-1)
        return [
            {"example_index": i, "scores": s}
            for i, s in zip(batch["example_index"].tolist(), scores.tolist(), strict=True)
        ]


# release 0.1's bertkit_plugins.sequence_classification.head.SequenceClassificationHead
__getattr__ = forwarding(__name__, "bertkit_plugins.sequence_classification.task")
