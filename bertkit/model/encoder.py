"""``Encoder``: what an encoder family's module provides, the one interface heads and
``BertModule`` use (``BertModel`` is the reference; ``EncoderFamily.encoder_class`` names a
family's). Heads see only this and the tokenizer's template (``BertTokenizer.build_inputs``),
never a family's internals."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from bertkit.model.bert import EncoderOutput
from bertkit.model.config import BertConfig


@runtime_checkable
class Encoder(Protocol):
    """An encoder module (an ``nn.Module``): token ids in, ``EncoderOutput`` out.

    Attributes:
        config: its ``BertConfig`` (or subclass): ``hidden_size``, ``vocab_size``,
            ``initializer_range``, ``layer_norm_eps``, ``hidden_act``, ``max_length`` …
        embeddings: its embedding module; ``embeddings.word_embeddings`` is the ``nn.Embedding``
            a head may tie a decoder to.
        pooler: the ``[CLS]`` layer sentence heads read (``EncoderOutput.pooler_output``), or None.
        optional_weights: key prefixes a pretrained directory may lack (``("pooler.",)``).
    """

    config: BertConfig
    embeddings: nn.Module
    pooler: nn.Module | None
    optional_weights: tuple[str, ...]

    @property
    def blocks(self) -> nn.ModuleList:
        """The transformer blocks, in order (``model.compile`` compiles them one by one)."""
        ...

    def set_attention_dropout(self, p: float) -> None:
        """Dropout on the attention probabilities of every block (``model.attention_dropout``)."""
        ...

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        cls_only: bool = False,
        unpad: bool = True,
    ) -> EncoderOutput:
        """Encode a (B, T) batch: ``attention_mask`` (B, T) 1 at real tokens; ``cls_only``: only
        ``[CLS]`` is needed from the last block; ``unpad``: run on the real tokens only
        (``bertkit.model.unpadded``), False: on the padded batch, with the same outputs."""
        ...

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``config.json`` and ``model.safetensors`` of the encoder alone, as transformers'
        class of the family loads them."""
        ...


def missing_members(encoder_class: type) -> list[str]:
    """The ``Encoder`` members an encoder class lacks (instance attributes such as ``config``
    are set in ``__init__``, so only the methods and ``optional_weights`` are checked on the class)."""
    return [m for m in ("forward", "optional_weights", "blocks", "set_attention_dropout", "save_pretrained")
            if not hasattr(encoder_class, m)]  # fmt: skip
