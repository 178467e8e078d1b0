"""Pre-training heads: ``MaskedLMHead`` (masked LM) and ``PreTrainingHead`` (that head plus
next-sentence or sentence-order prediction), on the corpus plumbing of ``CorpusHead``.

The layers are Hugging Face ``BertForPreTraining``'s ``cls`` (google-research/bert
``run_pretraining.py``): MLM = dense H -> H, GELU, LayerNorm, then a decoder tied to the word
embeddings plus a separate output bias; NSP/SOP = one 2-way linear layer on the pooled
``[CLS]``. MLM logits are computed **only at the predicted positions** (M of the B x T tokens;
a dense head spends (B x T) / M times the FLOPs and memory on the vocabulary projection).
Loss = mean MLM cross-entropy + mean NSP/SOP cross-entropy (Devlin et al. 2019, A.2).

Data: a training file is a corpus (file or folder, see ``corpus``) or a directory written by
``bertkit prepare``. A corpus is prepared on first use into a cache keyed by its contents and
every setting, then read from memory-mapped shards.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from bertkit_plugins.pretraining.corpus import python_docs_corpus
from bertkit_plugins.pretraining.instances import SentenceTask
from bertkit_plugins.pretraining.loss import LogitsBuffer, linear_cross_entropy
from bertkit_plugins.pretraining.masking import MaskingStrategy, TokenMasking, maskable
from bertkit_plugins.pretraining.prepare import prepare, vocab_fingerprint
from bertkit_plugins.pretraining.shards import MANIFEST, Shards, read_manifest
from torch import nn
from torchmetrics import MeanMetric

from bertkit.data.samples import cache_dir
from bertkit.model.bert import ACTIVATIONS, EncoderOutput
from bertkit.model.config import BertConfig
from bertkit.model.tokenizer import BertTokenizer
from bertkit.plugins import registered, stored_class
from bertkit.tasks.legacy import Batch, Feature, Head, by_example
from bertkit.tasks.task import LazyFeatures
from bertkit.utils.choices import check

SentencePairTask = Literal["nsp", "sop"]
log = logging.getLogger(__name__)


@dataclass
class Corpus:
    """A training/evaluation source: a corpus file or folder, or a prepared shard directory."""

    path: Path


@dataclass
class MaskedText:
    """A text to fill in at ``predict``: ``[MASK]`` marks each token to predict."""

    text: str
    source: str


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


class PreTrainingInstances(LazyFeatures):
    """Features from prepared shards, masked on the fly (a lazy sequence for the DataLoader).

    Static masks (stored by ``prepare``) are used as stored. Dynamic masks (RoBERTa, Liu et al.
    2019) are drawn anew each time a training instance is read, from a per-process generator
    seeded by ``torch.initial_seed()`` (``seed_everything`` and each DataLoader worker's seed),
    and fixed per instance index in evaluation (``for_training(False)``, from the data module),
    so held-out scores compare across steps.
    """

    def __init__(self, shards: Shards, tokenizer: BertTokenizer, masking: MaskingStrategy, dynamic: bool) -> None:
        self.shards, self.masking, self.dynamic = shards, masking, dynamic
        self.cls_id, self.sep_id, self.mask_id = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id
        self.vocab_size, self.special_ids = tokenizer.vocab_size, tokenizer.special_ids
        self.training = True
        self._rng: tuple[int, random.Random] | None = None

    def __len__(self) -> int:
        return len(self.shards)

    @property
    def lengths(self) -> np.ndarray:
        return self.shards.lengths

    def for_training(self, training: bool) -> None:
        self.training = training

    def _generator(self, index: int) -> random.Random:
        if not self.training:
            return random.Random(f"eval/{index}")
        pid = os.getpid()
        if self._rng is None or self._rng[0] != pid:
            self._rng = (pid, random.Random(torch.initial_seed()))
        return self._rng[1]

    def __getitem__(self, index: int) -> Feature:
        item = self.shards[index]
        ids = item["input_ids"].tolist()
        a = item["segment_a_length"]
        labels = [-100] * len(ids)
        if self.dynamic:
            masked = self.masking.mask(
                ids,
                item["word_starts"].tolist(),
                maskable(ids, self.cls_id, self.sep_id),
                self._generator(index),
                self.mask_id,
                self.vocab_size,
                self.special_ids,
            )
            inputs = masked.input_ids
            for p, label in zip(masked.positions, masked.labels, strict=True):
                labels[p] = label
        else:
            inputs = list(ids)
            for p, token in zip(item["masked_positions"].tolist(), item["masked_input_ids"].tolist(), strict=True):
                inputs[p], labels[p] = token, ids[p]
        return {
            "input_ids": inputs,
            "token_type_ids": [0] * a + [1] * (len(ids) - a),
            "labels": labels,
            "next_sentence_label": item["sentence_label"],
            "example_index": index,
        }


class CorpusHead(Head):
    """What every pre-training objective on raw text shares: reading a corpus or prepared shards,
    preparing a corpus into the cache on first use, masking (``self.masking``, static or dynamic),
    and the default corpus. A subclass sets ``self.masking`` with ``use_masking`` in its
    ``__init__`` and has the hyper-parameters ``dynamic_masking``, ``dupe_factor``,
    ``short_seq_prob``, ``documents_per_shard``, ``prepare_workers`` and ``prepare_seed``
    (and ``sentence_task`` if it pairs segments; none = ``none``)."""

    def use_masking(self, masking: MaskingStrategy | dict | None) -> None:
        """Set ``self.masking`` (a strategy, its spec from a checkpoint, or None = ``TokenMasking()``)
        and store its spec in the hyper-parameters (plain values: weights_only checkpoints)."""
        if isinstance(masking, dict):  # rebuilt from a checkpoint's hyper-parameters
            source = "checkpoint model.head.init_args.masking.class_path"
            cls = stored_class(str(masking.get("class_path")), MaskingStrategy, registered("register_masking"), source)
            masking = cls(**masking.get("init_args", {}))
        self.masking = masking or TokenMasking()
        self.hparams["masking"] = self.masking.spec()
        self._tokenizer: BertTokenizer | None = None

    @property
    def sentence_task(self) -> SentenceTask:
        return self.hparams.get("sentence_task", "none")

    # ----- data -----

    def read(self, path: Path, labelled: bool = True) -> list[Any]:
        """A corpus (file or folder) or a ``bertkit prepare`` directory, as one source."""
        return [Corpus(Path(path))]

    def featurize(self, examples: list[Any], tokenizer: BertTokenizer, max_length: int) -> Any:
        """Texts to predict on (``MaskedText``) -> encoded features; a ``Corpus`` -> its prepared
        instances (``PreTrainingInstances``, masked as ``self.masking`` says)."""
        self._tokenizer = tokenizer
        if examples and isinstance(examples[0], MaskedText):
            encoded = tokenizer.encode_batch([e.text for e in examples], max_length=max_length)
            return [
                {"input_ids": e.input_ids, "token_type_ids": e.token_type_ids, "example_index": i}
                for i, e in enumerate(encoded)
            ]
        (source,) = examples
        shards = Shards(self._prepared(source.path, tokenizer, max_length))
        return PreTrainingInstances(shards, tokenizer, self.masking, self.hparams.dynamic_masking)

    def _settings(self, max_length: int) -> dict[str, Any]:
        hp = self.hparams
        return dict(
            max_seq_length=max_length,
            sentence_task=self.sentence_task,
            short_seq_prob=hp.short_seq_prob,
            dupe_factor=hp.dupe_factor,
            seed=hp.prepare_seed,
        )

    def _prepared(self, path: Path, tokenizer: BertTokenizer, max_length: int) -> Path:
        """A prepared directory for ``path``: itself if it has a manifest, else a cached one.

        Raises:
            ValueError: prepared shards that do not fit this head or tokenizer (names the field).
        """
        if not (path / MANIFEST).is_file():
            static = self.masking if not self.hparams.dynamic_masking else None
            key = _corpus_key(path, vocab_fingerprint(tokenizer), self._settings(max_length), static)
            target = cache_dir() / "pretraining" / key
            if not (target / "train" / MANIFEST).is_file():
                log.warning("preparing %s into %s (once; later runs reuse it)", path, target)
                prepare(
                    [path],
                    target,
                    tokenizer,
                    static_masking=static,
                    documents_per_shard=self.hparams.documents_per_shard,
                    workers=self.hparams.prepare_workers,
                    overwrite=True,
                    **self._settings(max_length),
                )
            path = target / "train"
        manifest = read_manifest(path)
        expected = {"vocab_sha256": vocab_fingerprint(tokenizer), "sentence_task": self.sentence_task}
        for field, value in expected.items():
            if manifest.get(field) != value:
                raise ValueError(
                    f"{path / MANIFEST}: {field} is {manifest.get(field)!r}, but this model needs {value!r} "
                    "(prepare the corpus with the model's tokenizer and sentence task)"
                )
        if manifest["max_seq_length"] > max_length:
            raise ValueError(
                f"{path / MANIFEST}: max_seq_length {manifest['max_seq_length']} > data.max_length {max_length}"
            )
        if not self.hparams.dynamic_masking and not manifest["static_masking"]:
            raise ValueError(
                f"{path / MANIFEST}: no static masks; prepare with static_masking or set dynamic_masking: true"
            )
        return path

    def sample_files(self) -> dict[str, Path]:
        """The Python documentation topics from the standard library (every machine has them)."""
        paths = python_docs_corpus(cache_dir() / "python-docs-corpus")
        return {**paths, "test": paths["validation"]}

    def _mask_id(self) -> int:
        if self._tokenizer is None:
            raise RuntimeError(f"{type(self).__name__}: featurize has not run (no tokenizer to find [MASK])")
        return self._tokenizer.mask_token_id


class MaskedLMHead(CorpusHead):
    """Masked LM alone (RoBERTa's objective, Liu et al. 2019; BERT's first task, Devlin et al.
    2019 §3.1): predict the masked tokens; ``PreTrainingHead`` adds NSP or SOP to it.

    The layers are Hugging Face ``BertForMaskedLM``'s ``cls.predictions`` (google-research/bert
    ``run_pretraining.py``): dense H -> H, GELU, LayerNorm, then a decoder tied to the word
    embeddings plus a separate output bias. Logits are computed **only at the predicted
    positions** (M of the B x T tokens). Loss = mean cross-entropy over the M positions.

    Args:
        masking: the masking strategy (``TokenMasking``, ``WholeWordMasking``, ``NgramMasking``
            or a plugin's; ``bertkit plugins`` lists them); default token-level 15 %, 80/10/10,
            at most 20 predictions per sequence.
        dynamic_masking: draw masks when an instance is read (RoBERTa) instead of using those
            stored by ``prepare`` (Google's static masks; the shards must have them).
        dupe_factor: when preparing a corpus: passes per document (see ``bertkit prepare``).
        short_seq_prob: when preparing: share of shorter target lengths (0.1).
        documents_per_shard: when preparing: documents per shard (NSP negatives' pool).
        prepare_workers: when preparing: worker processes (0 = one per core).
        prepare_seed: when preparing: the seed of instances and static masks.
        top_k: candidates per ``[MASK]`` written by ``predict``.
    """

    hf_architecture = "BertForMaskedLM"

    def __init__(
        self,
        masking: MaskingStrategy | None = None,
        dynamic_masking: bool = True,
        dupe_factor: int = 1,
        short_seq_prob: float = 0.1,
        documents_per_shard: int = 500,
        prepare_workers: int = 0,
        prepare_seed: int = 12345,
        top_k: int = 5,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["masking"])
        self.use_masking(masking)
        self._embedding: list[nn.Embedding] = []
        self._logits = LogitsBuffer()

    # ----- layers -----

    def add_layers(self, config: BertConfig) -> None:
        """Create the objective's layers (initialised by ``build``)."""
        self.predictions = MaskedLMPredictions(config)

    @property
    def metric_names(self) -> list[str]:
        return ["mlm_accuracy", "mlm_loss"]

    def build(self, config: BertConfig) -> None:
        self.add_layers(config)
        std = config.initializer_range
        for module in self.modules():  # BertPreTrainedModel._init_weights
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std)
                nn.init.zeros_(module.bias)
        self.metrics = nn.ModuleDict(
            {stage: nn.ModuleDict({name: MeanMetric() for name in self.metric_names}) for stage in ("val", "test")}
        )

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
        chosen = labels != -100 if labels is not None else batch["input_ids"] == self._mask_id()  # (B, T)
        hidden, decoder = encoded.select(chosen), self._embedding[0].weight  # (M, H), (V, H)
        if labels is not None and self._fused_loss(hidden, decoder):
            hidden = self.predictions.transform(hidden)
            token_losses = linear_cross_entropy(hidden, decoder, self.predictions.bias, labels[chosen], self._logits)
            out = {"mlm_chosen": chosen, "mlm_token_losses": token_losses, "mlm_loss": token_losses.mean()}
            return {**out, "loss": out["mlm_loss"]}
        logits = self.predictions(hidden, decoder)  # (M, V)
        out = {"mlm_logits": logits, "mlm_chosen": chosen}
        if labels is None:
            return out
        token_losses = F.cross_entropy(logits.float(), labels[chosen], reduction="none")  # (M,)
        out["mlm_token_losses"] = token_losses
        # a batch with nothing to predict (whole words too long for a tiny budget) adds zero, not NaN
        out["mlm_loss"] = token_losses.mean() if token_losses.numel() else logits.sum() * 0.0
        out["loss"] = out["mlm_loss"]
        return out

    # ----- metrics -----

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        metrics = self.metrics[stage]
        target = batch["labels"][outputs["mlm_chosen"]]
        metrics["mlm_accuracy"].update((outputs["mlm_logits"].argmax(-1) == target).float())
        metrics["mlm_loss"].update(outputs["mlm_token_losses"])

    def compute_metrics(self, stage: str) -> dict[str, torch.Tensor]:
        """``mlm_accuracy`` (of predicted tokens), ``mlm_loss`` (nats per predicted token),
        ``mlm_perplexity`` = exp(mlm_loss) (and a subclass's metrics)."""
        values = super().compute_metrics(stage)
        values["mlm_perplexity"] = torch.exp(values["mlm_loss"])
        return values

    # ----- predictions -----

    def read_text_lines(self, path: Path, lines: Iterable[tuple[int, str]]) -> list[MaskedText]:
        """Texts to fill in, one per line, each with at least one ``[MASK]``.

        Raises:
            ValueError: a line without ``[MASK]`` (names the file and line).
        """
        examples = []
        for number, line in lines:
            if not line.strip():
                continue
            if "[MASK]" not in line:
                raise ValueError(f"{path}:{number}: no [MASK] to predict in {line[:60]!r}")
            examples.append(MaskedText(line, f"{path}:{number}"))
        return examples

    def predict(self, outputs: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        probabilities = outputs["mlm_logits"].float().softmax(-1)  # (M, V)
        top = probabilities.topk(min(self.hparams.top_k, probabilities.shape[-1]), dim=-1)
        rows, positions = outputs["mlm_chosen"].nonzero(as_tuple=True)
        to_token = self._tokenizer.backend.id_to_token
        records = [{"example_index": int(i), "masks": []} for i in batch["example_index"].tolist()]
        for m, (row, position) in enumerate(zip(rows.tolist(), positions.tolist(), strict=True)):
            candidates = [
                {"token": to_token(t), "probability": round(p, 6)}
                for t, p in zip(top.indices[m].tolist(), top.values[m].tolist(), strict=True)
            ]
            records[row]["masks"].append({"position": position, "candidates": candidates})
        return records

    def format_predictions(self, examples: list[MaskedText], predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per text: each ``[MASK]``'s token position and top-k candidates, and the text with
        every ``[MASK]`` replaced by its best candidate (``##`` continuation marks dropped)."""
        records = []
        for example, features in zip(examples, by_example(predictions, len(examples), self), strict=True):
            masks = [mask for feature in features for mask in feature["masks"]]
            filled = example.text
            for mask in masks:
                filled = filled.replace("[MASK]", mask["candidates"][0]["token"].removeprefix("##"), 1)
            records.append({"source": example.source, "text": example.text, "filled": filled, "masks": masks})
        return records


class PreTrainingHead(MaskedLMHead):
    """BERT's pre-training: the masked-LM head plus a sentence-pair head, NSP or SOP, on the
    pooled ``[CLS]`` (one 2-way linear layer, ``BertForPreTraining``'s ``cls.seq_relationship``).
    Loss = mean MLM cross-entropy + mean NSP/SOP cross-entropy (Devlin et al. 2019, A.2).

    Args:
        sentence_task: ``nsp`` (next sentence prediction, BERT) or ``sop`` (sentence order
            prediction, ALBERT; Lan et al. 2020). MLM alone is ``MaskedLMHead``.
        masking, dynamic_masking, dupe_factor, short_seq_prob, documents_per_shard,
            prepare_workers, prepare_seed, top_k: as ``MaskedLMHead``.

    Raises:
        ValueError: an unknown ``sentence_task``.
    """

    hf_architecture = "BertForPreTraining"

    def __init__(
        self,
        sentence_task: SentencePairTask = "nsp",
        masking: MaskingStrategy | None = None,
        dynamic_masking: bool = True,
        dupe_factor: int = 1,
        short_seq_prob: float = 0.1,
        documents_per_shard: int = 500,
        prepare_workers: int = 0,
        prepare_seed: int = 12345,
        top_k: int = 5,
    ) -> None:
        check("model.head.sentence_task", sentence_task, SentencePairTask)
        super().__init__(
            masking, dynamic_masking, dupe_factor, short_seq_prob, documents_per_shard, prepare_workers, prepare_seed,
            top_k,
        )  # fmt: skip
        self.hparams["sentence_task"] = sentence_task

    def add_layers(self, config: BertConfig) -> None:
        super().add_layers(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    @property
    def metric_names(self) -> list[str]:
        return [*super().metric_names, f"{self.sentence_task}_accuracy"]

    @property
    def reads_pooler(self) -> bool:
        return True

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        out = super().forward(encoded, batch)
        out["sentence_logits"] = self.seq_relationship(encoded.pooler_output)  # (B, 2)
        if "loss" in out:
            name = f"{self.sentence_task}_loss"
            out[name] = F.cross_entropy(out["sentence_logits"].float(), batch["next_sentence_label"])
            out["loss"] = out["loss"] + out[name]
        return out

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        super().update_metrics(stage, outputs, batch)
        right = outputs["sentence_logits"].argmax(-1) == batch["next_sentence_label"]
        self.metrics[stage][f"{self.sentence_task}_accuracy"].update(right.float())


def _corpus_key(path: Path, vocab: str, settings: dict[str, Any], static: MaskingStrategy | None) -> str:
    """Cache key: the corpus files' paths, sizes and modification times, vocabulary and settings."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    stats = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    blob = json.dumps([stats, vocab, settings, static.spec() if static else None], sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]
