"""Pre-training heads: ``MaskedLMPredictionHead`` (masked LM) and ``PreTrainingHeads`` (that head
plus next-sentence or sentence-order prediction).

The layers are Hugging Face ``BertForPreTraining``'s ``cls`` (google-research/bert
``run_pretraining.py``): MLM = dense H -> H, GELU, LayerNorm, then a decoder tied to the word
embeddings plus a separate output bias; NSP/SOP = one 2-way linear layer on the pooled
``[CLS]``. MLM logits are computed **only at the predicted positions** (M of the B x T tokens;
a dense head spends (B x T) / M times the FLOPs and memory on the vocabulary projection).
Loss = mean MLM cross-entropy + mean NSP/SOP cross-entropy (Devlin et al. 2019, A.2).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from bertkit_plugins.pretraining.instances import SentenceTask
from bertkit_plugins.pretraining.loss import LogitsBuffer, linear_cross_entropy
from torch import nn
from torchmetrics import MeanMetric

from bertkit.api.task import (
    ACTIVATIONS,
    Batch,
    BertConfig,
    EncoderOutput,
    Head,
    TransformersExport,
    forwarding,
    mean_over_processes,
)


class MaskedLMPredictions(nn.Module):
    """``BertLMPredictionHead`` without its decoder matrix (tied to the word embeddings); the
    bias alone where the encoder applies the transform (``config.prediction_transform_in_encoder``:
    ModernBERT, whose ``ModernBertForMaskedLM`` puts only a decoder on its ``head``)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.transform = nn.Sequential()  # empty (the identity) where the encoder applies it
        if not config.prediction_transform_in_encoder:
            self.transform.add_module("dense", nn.Linear(config.hidden_size, config.hidden_size))
            self.transform.add_module("transform_act_fn", ACTIVATIONS[config.hidden_act]())
            self.transform.add_module("LayerNorm", nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps))
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, decoder: torch.Tensor) -> torch.Tensor:
        """(M, H) hidden states, (V, H) tied decoder -> (M, V) logits."""
        return F.linear(self.transform(hidden), decoder, self.bias)


class MaskedLMPredictionHead(Head, TransformersExport):
    """Masked LM: Hugging Face ``BertForMaskedLM``'s ``cls.predictions``, logits only at the
    predicted positions (labels other than -100; ``[MASK]`` tokens when there are no labels).

    Args:
        config: the encoder's config.
        mask_token_id: the tokenizer's ``[MASK]`` id (what to predict in a text without labels).
        top_k: candidates per ``[MASK]`` that ``feature_predictions`` gives.
    """

    hf_architecture = "BertForMaskedLM"

    def __init__(self, config: BertConfig, mask_token_id: int, top_k: int = 5) -> None:
        super().__init__()
        self.mask_token_id, self.top_k = mask_token_id, top_k
        self.add_layers(config)
        std = config.initializer_range
        for module in self.modules():  # BertPreTrainedModel._init_weights
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std)
                nn.init.zeros_(module.bias)
        self.metrics = nn.ModuleDict(
            {stage: nn.ModuleDict({name: MeanMetric() for name in self.metric_names}) for stage in ("val", "test")}
        )
        self._embedding: list[nn.Embedding] = []
        self._logits = LogitsBuffer()

    def add_layers(self, config: BertConfig) -> None:
        """Create the objective's layers (initialised by ``__init__``)."""
        self.predictions = MaskedLMPredictions(config)

    @property
    def metric_names(self) -> list[str]:
        return ["mlm_accuracy", "mlm_loss"]

    def attach(self, encoder: nn.Module) -> None:
        self._embedding = [encoder.embeddings.word_embeddings]  # a list: not a submodule (no second copy)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """``cls.*`` tensors of ``hf_architecture`` (the decoder weight is the tied embedding)."""
        return {
            f"cls.{k}": v for k, v in self.state_dict().items() if k.startswith(("predictions.", "seq_relationship."))
        }

    @staticmethod
    def _fused_loss(hidden: torch.Tensor, decoder: torch.Tensor) -> bool:
        """Whether the loss runs fused with the decoder (``loss.linear_cross_entropy``): when
        training in float32 (gradients on, no autocast) with at least one token to predict."""
        float32 = hidden.dtype == decoder.dtype == torch.float32
        training = torch.is_grad_enabled() and not torch.is_autocast_enabled(hidden.device.type)
        return float32 and training and len(hidden) > 0

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        """``mlm_chosen`` (B, T) the predicted positions; ``mlm_logits`` (M, V) their logits, except
        in float32 training, whose loss is computed fused without keeping them (``_fused_loss``);
        with labels, ``mlm_token_losses`` (M,), ``mlm_loss`` and ``loss``."""
        labels = batch.get("labels")
        chosen = labels != -100 if labels is not None else batch["input_ids"] == self.mask_token_id  # (B, T)
        hidden, decoder = encoded.select(chosen), self._embedding[0].weight  # (M, H), (V, H)
        if labels is not None and self._fused_loss(hidden, decoder):
            hidden = self.predictions.transform(hidden)
            token_losses = linear_cross_entropy(hidden, decoder, self.predictions.bias, labels[chosen], self._logits)
            mlm_loss = mean_over_processes(token_losses.sum(), token_losses.numel(), self.training)
            out = {"mlm_chosen": chosen, "mlm_token_losses": token_losses, "mlm_loss": mlm_loss}
            return {**out, "loss": out["mlm_loss"]}
        logits = self.predictions(hidden, decoder)  # (M, V)
        out = {"mlm_logits": logits, "mlm_chosen": chosen}
        if labels is None:
            return out
        token_losses = F.cross_entropy(logits.float(), labels[chosen], reduction="none")  # (M,)
        out["mlm_token_losses"] = token_losses
        # a batch with nothing to predict (whole words too long for a tiny budget) adds zero, not NaN
        mlm_total = token_losses.sum() if token_losses.numel() else logits.sum() * 0.0
        out["mlm_loss"] = mean_over_processes(mlm_total, len(token_losses), self.training)
        out["loss"] = out["mlm_loss"]
        return out

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        metrics = self.metrics[stage]
        target = batch["labels"][outputs["mlm_chosen"]]
        metrics["mlm_accuracy"].update((outputs["mlm_logits"].argmax(-1) == target).float())
        metrics["mlm_loss"].update(outputs["mlm_token_losses"])

    def feature_predictions(self, decoded: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        """Per text: ``example_index`` and its ``masks``, each ``[MASK]``'s token ``position`` and
        its ``top_k`` ``candidates`` (``token_id`` and ``probability``, 6 decimals), best first."""
        probabilities = decoded["mlm_logits"].float().softmax(-1)  # (M, V)
        top = probabilities.topk(min(self.top_k, probabilities.shape[-1]), dim=-1)
        rows, positions = decoded["mlm_chosen"].nonzero(as_tuple=True)
        features = [{"example_index": int(i), "masks": []} for i in batch["example_index"].tolist()]
        for m, (row, position) in enumerate(zip(rows.tolist(), positions.tolist(), strict=True)):
            candidates = [
                {"token_id": t, "probability": round(p, 6)}
                for t, p in zip(top.indices[m].tolist(), top.values[m].tolist(), strict=True)
            ]
            features[row]["masks"].append({"position": position, "candidates": candidates})
        return features

    def compute_metrics(self, stage: str) -> dict[str, torch.Tensor]:
        """``mlm_accuracy`` (of predicted tokens), ``mlm_loss`` (nats per predicted token),
        ``mlm_perplexity`` = exp(mlm_loss) (and a subclass's metrics)."""
        values = super().compute_metrics(stage)
        values["mlm_perplexity"] = torch.exp(values["mlm_loss"])
        return values


class PreTrainingHeads(MaskedLMPredictionHead):
    """BERT's pre-training heads (transformers' ``BertPreTrainingHeads``): the masked-LM head plus
    a sentence-pair head, NSP or SOP, on the pooled ``[CLS]`` (one 2-way linear layer,
    ``cls.seq_relationship``). Loss = mean MLM cross-entropy + mean NSP/SOP cross-entropy.

    Args:
        config, mask_token_id, top_k: as ``MaskedLMPredictionHead``.
        sentence_task: ``nsp`` or ``sop`` (names the loss and accuracy).
    """

    hf_architecture = "BertForPreTraining"
    reads_pooler = True

    def __init__(self, config: BertConfig, mask_token_id: int, sentence_task: SentenceTask, top_k: int = 5) -> None:
        self.sentence_task = sentence_task
        super().__init__(config, mask_token_id, top_k)

    def add_layers(self, config: BertConfig) -> None:
        super().add_layers(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    @property
    def metric_names(self) -> list[str]:
        return [*super().metric_names, f"{self.sentence_task}_accuracy"]

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        out = super().forward(encoded, batch)
        out["sentence_logits"] = self.seq_relationship(encoded.pooler_output)  # (B, 2)
        if "loss" in out:
            name = f"{self.sentence_task}_loss"
            pairs = F.cross_entropy(out["sentence_logits"].float(), batch["next_sentence_label"], reduction="sum")
            out[name] = mean_over_processes(pairs, len(batch["next_sentence_label"]), self.training)
            out["loss"] = out["loss"] + out[name]
        return out

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        super().update_metrics(stage, outputs, batch)
        right = outputs["sentence_logits"].argmax(-1) == batch["next_sentence_label"]
        self.metrics[stage][f"{self.sentence_task}_accuracy"].update(right.float())


# release 0.1's bertkit_plugins.pretraining.head.MaskedLMHead, PreTrainingHead, CorpusHead …
__getattr__ = forwarding(__name__, "bertkit_plugins.pretraining.task")
