"""``SpanClassificationHead``: every span of up to ``max_span_width`` words classified from its
first and last words' states and a learned width embedding (Lee et al. 2017; SpERT, Eberts &
Ulges 2020). No ``transformers`` class classifies spans: an export holds the encoder alone."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from bertkit_plugins.token_tagging.head import collated_positions
from bertkit_plugins.token_tagging.span_metric import SpanF1
from torch import nn

from bertkit.api.task import Batch, BertConfig, Dropout, EncoderOutput, Head, mean_over_processes


class SpanClassificationHead(Head):
    """A linear classifier over (first word, last word, width) of every span: ``1 + types``
    classes, 0 = not an entity.

    Args:
        types: the entity types (the task's).
        config: the encoder's config (``hidden_size``, ``initializer_range``).
        max_span_width: the longest span classified, in words.
        nested: the metric keeps every span classified as an entity (else the best
            non-overlapping ones).
        width_embedding_size: size of the span-width embedding.
        dropout: dropout before the classifier.
    """

    def __init__(
        self, types: list[str], config: BertConfig, max_span_width: int, nested: bool, width_embedding_size: int,
        dropout: float,
    ) -> None:  # fmt: skip
        super().__init__()
        self.types, self.max_span_width = list(types), max_span_width
        self.dropout = Dropout(dropout)
        self.width_embedding = nn.Embedding(max_span_width, width_embedding_size)
        self.classifier = nn.Linear(2 * config.hidden_size + width_embedding_size, len(types) + 1)
        for layer in (self.width_embedding, self.classifier):
            nn.init.normal_(layer.weight, std=config.initializer_range)
        nn.init.zeros_(self.classifier.bias)
        self.metrics = nn.ModuleDict({stage: SpanF1(list(types), nested) for stage in ("val", "test")})

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        """``logits`` (B, W, K, 1 + types) of the span of K words from each of the W words,
        ``span_start`` (B, W) each word's index, ``span_valid`` (B, W, K); with labels, ``loss``."""
        states = encoded.map_tokens(lambda h: h)  # (B, T, H)
        positions = collated_positions(batch, "present_positions", "word_present")  # (B, W): each word's first sub-word
        starts = torch.where(positions >= 0, batch["word_present"].gather(1, positions.clamp(min=0)), -1)  # its index
        size, count, width = positions.shape[0], positions.shape[1], self.max_span_width
        owned = (batch["word_index"].gather(1, positions.clamp(min=0)) >= 0) & (positions >= 0)  # (B, W)
        last = torch.arange(count, device=positions.device).unsqueeze(1) + torch.arange(width, device=positions.device)
        inside = (last < count) & (positions[:, last.clamp(max=count - 1)] >= 0)  # (B, W, K): last word in the row
        words = states.gather(1, positions.clamp(min=0).unsqueeze(2).expand(-1, -1, states.shape[2]))  # (B, W, H)
        spans = torch.cat(
            [
                words.unsqueeze(2).expand(-1, -1, width, -1),
                words[:, last.clamp(max=count - 1)],
                self.width_embedding.weight.expand(size, count, -1, -1),
            ],
            dim=-1,
        )  # (B, W, K, 2H + E): first word, last word, width
        logits = self.classifier(self.dropout(spans))  # (B, W, K, 1 + types); 0: not an entity
        out = {"logits": logits, "span_start": starts, "span_valid": owned.unsqueeze(2) & inside}
        if "span_labels" in batch:
            labels = batch["span_labels"].view(size, count, width)
            labels = labels.flatten()
            span_losses = F.cross_entropy(logits.flatten(0, 2).float(), labels, ignore_index=-100, reduction="sum")
            out["loss"] = mean_over_processes(span_losses, (labels != -100).sum(), self.training)
        return out

    def decode(self, outputs: dict[str, torch.Tensor], batch: Batch) -> dict[str, torch.Tensor]:
        """Adds the spans classified as entities: ``spans`` (N, 4) long rows ``(row, first word,
        end word (exclusive), type id)`` and ``span_scores`` (N,) their probabilities."""
        probs = outputs["logits"].float().softmax(-1)
        score, label = probs[..., 1:].max(-1)  # (B, W, K)
        chosen = outputs["span_valid"] & (score > probs[..., 0])
        rows, a, k = chosen.nonzero(as_tuple=True)
        first = outputs["span_start"][rows, a]
        spans = torch.stack([rows, first, first + k + 1, label[rows, a, k] + 1], 1)
        return {**outputs, "spans": spans, "span_scores": score[rows, a, k]}

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        spans, scores = outputs["spans"], outputs["span_scores"]
        examples = batch["example_index"]
        gold = batch["gold_spans"].reshape(len(examples), batch["gold_spans"].shape[1] // 3, 3)
        rows, slots = (gold[..., 0] >= 0).nonzero(as_tuple=True)
        self.metrics[stage].update(
            torch.cat([examples[spans[:, 0]].unsqueeze(1), spans[:, 1:]], 1), scores,
            torch.cat([examples[rows].unsqueeze(1), gold[rows, slots]], 1),
        )  # fmt: skip

    def feature_predictions(self, decoded: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        """Per window: ``example_index`` and the ``spans`` classified as entities (``decode``'s
        ``spans`` and ``span_scores``) as (first word, end word, type, probability)."""
        rows: list[dict[str, Any]] = [{"example_index": int(e), "spans": []} for e in batch["example_index"]]
        for (row, first, end, label), score in zip(
            decoded["spans"].tolist(), decoded["span_scores"].tolist(), strict=True
        ):
            rows[row]["spans"].append((first, end, self.types[label - 1], score))
        return rows
