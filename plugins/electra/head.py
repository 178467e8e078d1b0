"""``ElectraPreTrainingHeads``: ELECTRA's generator and discriminator heads (Clark et al. 2020).

Layers and names follow google-research/electra ``run_pretraining.py`` and transformers
(``ElectraGeneratorPredictions``: dense H_g -> E, GELU, LayerNorm, then a decoder tied to the
word embeddings plus a bias; ``ElectraDiscriminatorPredictions``: dense H -> H, activation,
``dense_prediction`` H -> 1).

Any encoder family: a BERT or ELECTRA discriminator gets the ELECTRA generator; another family's
(RoBERTa, ModernBERT) a narrower encoder of its own class on its embeddings through a projection
(``family_generator``), so positions, RoPE and attention pattern are the family's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from bertkit_plugins.electra.encoder import ElectraConfig, ElectraModel
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.classification import BinaryPrecision, BinaryRecall

from bertkit.api.task import (
    ACTIVATIONS,
    Batch,
    BertConfig,
    EncoderOutput,
    Head,
    TransformersExport,
    forwarding,
    mean_over_processes,
    truncated_normal_,
)


def generator_width(config: BertConfig, generator_size: float) -> int:
    """``generator_size`` x the discriminator's width, a multiple of 64 (one attention head per 64)."""
    return max(64, round(config.hidden_size * generator_size / 64) * 64)


def generator_config(config: BertConfig, generator_size: float) -> ElectraConfig:
    """The generator's config for a BERT or ELECTRA discriminator: ``generator_width`` wide, 4x that
    in the feed-forward layer, the same depth, and embeddings of the discriminator's width (they
    are shared)."""
    width = generator_width(config, generator_size)
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(BertConfig)}
    return ElectraConfig(
        **{**fields, "hidden_size": width, "num_attention_heads": width // 64, "intermediate_size": 4 * width},
        embedding_size=config.embedding_width,
    )


class Generator(ElectraModel):
    """ELECTRA's generator encoder: its own (narrower) blocks on the discriminator's embeddings
    (``share``), which stay listed once, under the discriminator."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__(config)
        del self.embeddings  # the discriminator's are used
        self._shared: list[nn.Module] = []

    def share(self, embeddings: nn.Module) -> None:
        self._shared = [embeddings]  # a list: not a submodule

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self._shared[0](input_ids, token_type_ids, positions)  # (*S, E)
        return x if self.embeddings_project is None else self.embeddings_project(x)  # (*S, H_g)


def has_electra_generator(config: BertConfig) -> bool:
    """Whether a discriminator of ``config`` takes ELECTRA's ``Generator`` (BERT and ELECTRA), or
    else ``family_generator`` of its own class."""
    return type(config) in (BertConfig, ElectraConfig)


class ProjectedEmbeddings(nn.Module):
    """Another family's generator input: the discriminator's embedding module (not a submodule:
    its weights stay listed once), called as the family calls it, then ``project`` H -> H_g."""

    def __init__(self, embeddings: nn.Module, width: int, generator_width: int) -> None:
        super().__init__()
        self._shared = [embeddings]
        self.project = nn.Linear(width, generator_width)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.project(self._shared[0](*inputs))  # (*S, H) -> (*S, H_g)


def family_generator(encoder: nn.Module, generator_size: float) -> nn.Module:
    """The generator of a discriminator of another family (RoBERTa, ModernBERT …): the same
    encoder class, ``generator_width`` wide with the feed-forward width scaled alike, the same
    depth, no pooler, on ``ProjectedEmbeddings`` of the discriminator's embeddings."""
    config = encoder.config
    width = generator_width(config, generator_size)
    narrow = dataclasses.replace(
        config,
        hidden_size=width,
        num_attention_heads=width // 64,
        intermediate_size=config.intermediate_size * width // config.hidden_size,
    )
    generator = type(encoder)(narrow, add_pooling_layer=False)
    del generator.embeddings
    generator.embeddings = ProjectedEmbeddings(encoder.embeddings, config.hidden_size, width)
    init_linears(generator.embeddings, config.initializer_range)
    return generator


def init_linears(module: nn.Module, std: float) -> None:
    """BERT's initialisation of ``module``'s linear layers: truncated normal(0, std) at 2 std, zero
    biases (google-research/bert ``modeling.py``; LayerNorms start at 1 and 0 as PyTorch makes them)."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            truncated_normal_(layer.weight, std)
            nn.init.zeros_(layer.bias)


class ElectraPreTrainingHeads(Head, TransformersExport):
    """The generator (its encoder, ``generator_predictions`` and an output bias, tied to the word
    embeddings) and the discriminator's ``discriminator_predictions``.

    Args:
        config: the discriminator's (encoder's) config.
        generator_size: the generator's width as a fraction of the encoder's.
        discriminator_weight: λ, the weight of the replaced-token-detection loss.
        temperature: softmax temperature of the generator's samples.
    """

    hf_architecture = "ElectraForPreTraining"

    def __init__(
        self, config: BertConfig, generator_size: float, discriminator_weight: float, temperature: float
    ) -> None:
        super().__init__()
        self.generator_size, self.discriminator_weight, self.temperature = (
            generator_size,
            discriminator_weight,
            temperature,
        )
        self._embedding: list[nn.Embedding] = []
        gen = generator_config(config, generator_size)
        if has_electra_generator(config):  # else ``attach`` builds one of the encoder's family
            self.generator = Generator(gen)
        self.generator_predictions = nn.Sequential()
        self.generator_predictions.add_module("dense", nn.Linear(gen.hidden_size, gen.embedding_width))
        self.generator_predictions.add_module("activation", ACTIVATIONS[gen.hidden_act]())
        self.generator_predictions.add_module("LayerNorm", nn.LayerNorm(gen.embedding_width, eps=gen.layer_norm_eps))
        self.generator_lm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.discriminator_predictions = nn.Sequential()
        self.discriminator_predictions.add_module("dense", nn.Linear(config.hidden_size, config.hidden_size))
        self.discriminator_predictions.add_module("activation", ACTIVATIONS[config.hidden_act]())
        self.discriminator_predictions.add_module("dense_prediction", nn.Linear(config.hidden_size, 1))
        for module in (self.generator_predictions, self.discriminator_predictions):
            init_linears(module, config.initializer_range)
        kinds = {
            "mlm_accuracy": MeanMetric,
            "mlm_loss": MeanMetric,
            "rtd_accuracy": MeanMetric,
            "replaced_precision": BinaryPrecision,
            "replaced_recall": BinaryRecall,
        }
        self.metrics = nn.ModuleDict(
            {stage: nn.ModuleDict({name: kind() for name, kind in kinds.items()}) for stage in ("val", "test")}
        )

    def attach(self, encoder: nn.Module) -> None:
        """Share the word embeddings; for an encoder of another family than BERT/ELECTRA, build
        the generator here, as ``family_generator`` of it (it needs the encoder's class)."""
        self._embedding = [encoder.embeddings.word_embeddings]  # a list: not a submodule
        if has_electra_generator(encoder.config):
            self.generator.share(encoder.embeddings)
        else:
            self.generator = family_generator(encoder, self.generator_size)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """``ElectraForPreTraining``'s ``discriminator_predictions.*`` (the generator is not exported)."""
        return {f"discriminator_predictions.{k}": v for k, v in self.discriminator_predictions.state_dict().items()}

    # ----- the generator, before the encoder -----

    def encoder_inputs(self, batch: Batch) -> Batch:
        """Run the generator on the masked batch and put its samples at the masked positions:
        ``input_ids`` becomes the corrupted (B, T) text, ``replaced`` (B, T) marks the tokens that
        differ from the original, ``generator_logits`` (M, V) are kept for the MLM loss. A batch
        without ``labels`` (text to predict on) is returned as it is."""
        labels = batch.get("labels")
        if labels is None:
            return batch
        chosen = labels != -100  # (B, T)
        generated = self.generator(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        hidden = self.generator_predictions(generated.select(chosen))  # (M, E)
        logits = F.linear(hidden, self._embedding[0].weight, self.generator_lm_bias)  # (M, V)
        with torch.no_grad():
            probabilities = F.softmax(logits.float() / self.temperature, dim=-1)
            sampled = torch.multinomial(probabilities, 1).squeeze(-1) if len(logits) else labels[chosen]  # (M,)
        corrupted = torch.where(chosen, labels, batch["input_ids"])  # the original text …
        corrupted[chosen] = sampled  # … with the generator's tokens where it was masked
        replaced = corrupted != torch.where(chosen, labels, batch["input_ids"])
        return {**batch, "input_ids": corrupted, "replaced": replaced, "generator_logits": logits, "chosen": chosen}

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        logits = encoded.map_tokens(self.discriminator_predictions).squeeze(-1)  # (B, T)
        out = {"rtd_logits": logits}
        if "replaced" not in batch:
            return out
        real = batch["attention_mask"].bool()
        target = batch["replaced"]
        replaced = F.binary_cross_entropy_with_logits(logits[real].float(), target[real].float(), reduction="sum")
        out["rtd_loss"] = mean_over_processes(replaced, real.sum(), self.training)
        generator_logits, chosen = batch["generator_logits"], batch["chosen"]
        token_losses = F.cross_entropy(generator_logits.float(), batch["labels"][chosen], reduction="none")  # (M,)
        # a batch with nothing to predict adds zero, not NaN
        mlm_total = token_losses.sum() if token_losses.numel() else generator_logits.sum() * 0.0
        out["mlm_loss"] = mean_over_processes(mlm_total, len(token_losses), self.training)
        out["loss"] = out["mlm_loss"] + self.discriminator_weight * out["rtd_loss"]
        out.update(mlm_logits=generator_logits, mlm_chosen=chosen, mlm_token_losses=token_losses, replaced=target)
        return out

    def feature_predictions(self, decoded: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        """Per text: ``example_index``, its ``input_ids`` and ``p``, each token's probability of
        having been replaced (the discriminator's sigmoid), specials included."""
        probabilities = decoded["rtd_logits"].float().sigmoid()  # (B, T)
        lengths = batch["attention_mask"].sum(-1).tolist()
        return [
            {"example_index": e, "input_ids": batch["input_ids"][i, :n].tolist(), "p": probabilities[i, :n].tolist()}
            for i, (e, n) in enumerate(zip(batch["example_index"].tolist(), lengths, strict=True))
        ]

    # ----- metrics -----

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        metrics = self.metrics[stage]
        target = batch["labels"][outputs["mlm_chosen"]]
        metrics["mlm_accuracy"].update((outputs["mlm_logits"].argmax(-1) == target).float())
        metrics["mlm_loss"].update(outputs["mlm_token_losses"])
        real = batch["attention_mask"].bool()
        predicted, replaced = outputs["rtd_logits"][real] > 0, outputs["replaced"][real]
        metrics["rtd_accuracy"].update((predicted == replaced).float())
        metrics["replaced_precision"].update(predicted.long(), replaced.long())
        metrics["replaced_recall"].update(predicted.long(), replaced.long())

    def compute_metrics(self, stage: str) -> dict[str, torch.Tensor]:
        """The generator's ``mlm_accuracy``, ``mlm_loss`` (nats per masked token) and
        ``mlm_perplexity``; the discriminator's ``rtd_accuracy`` over all real tokens and the
        ``replaced_precision`` / ``replaced_recall`` of its "replaced" calls."""
        values = super().compute_metrics(stage)
        values["mlm_perplexity"] = torch.exp(values["mlm_loss"])
        return values


# release 0.1's bertkit_plugins.electra.head.ReplacedTokenDetectionHead
__getattr__ = forwarding(__name__, "bertkit_plugins.electra.task")
