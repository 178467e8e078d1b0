"""The RoBERTa and XLM-RoBERTa encoder families (Liu et al. 2019, "RoBERTa: A Robustly Optimized
BERT Pretraining Approach"; Conneau et al. 2020, "Unsupervised Cross-lingual Representation
Learning at Scale").

The encoder is BERT's with three differences (fairseq ``TransformerSentenceEncoder``; transformers
``RobertaModel`` / ``XLMRobertaModel``, whose state-dict keys these are): position ids start
after the padding id (``padding_idx + 1``, so ``max_position_embeddings`` is 514 for 512
tokens), there is one token type (every ``token_type_ids`` is 0, as transformers' RoBERTa
tokenizers never return them), and the tokenizer is byte-level BPE (RoBERTa) or SentencePiece
Unigram (XLM-R) with the template ``<s> A </s></s> B </s>`` (``bertkit.model.tokenizer`` reads it from
``tokenizer.json``). No next-sentence task.

The pooler here is RoBERTa's sentence classifier's first layer (``RobertaClassificationHead``:
dropout, dense, tanh on ``<s>``; exported as ``classifier.dense``), so the sequence classification
head on it computes ``RobertaForSequenceClassification``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from bertkit.api.encoder import (
    BertConfig,
    BertModel,
    BertPooler,
    BertTokenizer,
    Dropout,
    EncoderFamily,
    Preset,
    renamed,
)


@dataclass
class RobertaConfig(BertConfig):
    """``BertConfig`` with RoBERTa's defaults (transformers ``RobertaConfig`` field names):
    50,265 tokens, 514 positions, one token type, LayerNorm eps 1e-5, ``<pad>`` = 1."""

    model_type: ClassVar[str] = "roberta"
    hf_model: ClassVar[str] = "RobertaModel"
    """transformers' encoder class, ``config.json``'s ``architectures`` of an encoder export."""
    vocab_size: int = 50265
    max_position_embeddings: int = 514
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1

    @property
    def max_length(self) -> int:
        """Most tokens per sequence: positions ``pad_token_id + 1`` … ``max_position_embeddings - 1``."""
        return self.max_position_embeddings - self.pad_token_id - 1

    def to_dict(self) -> dict[str, Any]:
        """Plain dict, as written to ``config.json`` (``model_type: roberta`` / ``xlm-roberta``)."""
        return {"model_type": self.model_type, "architectures": [self.hf_model], **dataclasses.asdict(self)}


@dataclass
class XLMRobertaConfig(RobertaConfig):
    """``RobertaConfig`` written as ``model_type: xlm-roberta`` (XLM-R's 250,002-token vocabulary
    comes from its tokenizer)."""

    model_type: ClassVar[str] = "xlm-roberta"
    hf_model: ClassVar[str] = "XLMRobertaModel"
    vocab_size: int = 250002


class RobertaPooler(BertPooler):
    """tanh(W dropout(h_<s>) + b): the first layer of ``RobertaClassificationHead``."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        return super().forward(self.dropout(cls))  # (B, H) -> (B, H)


class RobertaModel(BertModel):
    """RoBERTa's encoder: BERT's blocks; positions offset past ``pad_token_id``; one token type.

    Args:
        config: sizes and dropout.
        add_pooling_layer: build ``RobertaPooler`` (the sentence classifier's dense layer).
    """

    def __init__(self, config: RobertaConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config, add_pooling_layer)
        if add_pooling_layer:
            self.pooler = RobertaPooler(config)
            self.init_weights(self.pooler.dense)

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(*S) ids -> (*S, H); position p of a sequence reads embedding ``pad_token_id + 1 + p``
        (fairseq's ``make_positions``), every token type is 0."""
        offset = self.config.pad_token_id + 1
        return super().embed(input_ids, torch.zeros_like(token_type_ids), positions + offset)


class RobertaFamily(EncoderFamily):
    """``model.encoder: roberta``; pretrained directories with ``model_type: roberta``."""

    name = "roberta"
    config_class = RobertaConfig
    encoder_class = RobertaModel
    hf_prefix = "roberta."
    hf_token_roles: ClassVar[dict[str, str]] = {"bos_token_id": "cls", "eos_token_id": "sep"}
    hf_class_prefix: ClassVar[str] = "Roberta"

    @classmethod
    def hf_architecture(cls, head_architecture: str) -> str | None:
        """``RobertaFor…`` (``XLMRobertaFor…``) for token classification, question answering,
        sequence classification and masked LM; None for BERT's pre-training (NSP) class."""
        task = head_architecture.removeprefix("Bert")
        if task in ("ForTokenClassification", "ForQuestionAnswering", "ForSequenceClassification", "ForMaskedLM"):
            return cls.hf_class_prefix + task
        return head_architecture if head_architecture.startswith(cls.hf_class_prefix) else None

    @classmethod
    def hf_renames(cls, architecture: str) -> dict[str, str]:
        """transformers' names of the task layers: the sentence classifier's dense layer is this
        encoder's pooler, the masked-LM layers are ``lm_head.*``."""
        if architecture.endswith("ForSequenceClassification"):
            return {cls.hf_prefix + "pooler.dense.": "classifier.dense.", "classifier.": "classifier.out_proj."}
        if architecture.endswith("ForMaskedLM"):
            return {
                "cls.predictions.transform.dense.": "lm_head.dense.",
                "cls.predictions.transform.LayerNorm.": "lm_head.layer_norm.",
                "cls.predictions.decoder.": "lm_head.decoder.",
                "cls.predictions.bias": "lm_head.bias",
            }
        return {}

    @classmethod
    def fresh(cls, preset: Preset, tokenizer: BertTokenizer) -> nn.Module:
        """A randomly initialised encoder of a standard size, 512 positions after ``<pad>``'s id."""
        pad = tokenizer.pad_token_id
        config = cls.config_class.preset(
            preset, vocab_size=tokenizer.vocab_size, pad_token_id=pad, max_position_embeddings=512 + pad + 1
        )
        return cls.encoder_class(config)


class XLMRobertaFamily(RobertaFamily):
    """``model.encoder: xlm-roberta``; pretrained directories with ``model_type: xlm-roberta``."""

    name = "xlm-roberta"
    config_class = XLMRobertaConfig
    hf_class_prefix = "XLMRoberta"


__getattr__ = renamed(__name__, {"RobertaEncoder": "RobertaModel"}, globals())
