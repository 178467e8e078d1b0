"""The ELECTRA encoder family (Clark et al. 2020, "ELECTRA: Pre-training Text Encoders as
Discriminators Rather Than Generators", §3).

The discriminator is BERT's encoder with two differences (google-research/electra
``modeling.py``; transformers ``ElectraModel``, whose state-dict keys these are): the embeddings
may be narrower than the hidden states (``embedding_size`` E < H, then ``embeddings_project``
maps E -> H before the first block), and there is no pooler. The tokenizer and its
``[CLS] A [SEP] B [SEP]`` template are BERT's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bertkit.api.encoder import BertConfig, BertModel, EncoderFamily, renamed


@dataclass
class ElectraConfig(BertConfig):
    """``BertConfig`` plus ``embedding_size`` (transformers ``ElectraConfig`` field names).

    Args:
        embedding_size: width E of the token, segment and position embeddings; None = hidden_size.
    """

    embedding_size: int | None = None

    @property
    def embedding_width(self) -> int:
        return self.embedding_size or self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        """Plain dict, as written to ``config.json`` (``model_type: electra``)."""
        fields = {**dataclasses.asdict(self), "embedding_size": self.embedding_width}
        return {"model_type": "electra", "architectures": ["ElectraModel"], **fields}


class ElectraModel(BertModel):
    """ELECTRA's encoder: BERT's blocks on (projected) embeddings, no pooler.

    Args:
        config: sizes and dropout; ``embedding_size`` < ``hidden_size`` adds ``embeddings_project``.
        add_pooling_layer: ignored (ELECTRA has no pooler); accepted for ``BertModel``'s signature.
    """

    def __init__(self, config: ElectraConfig, add_pooling_layer: bool = False) -> None:
        super().__init__(config, add_pooling_layer=False)
        self.embeddings_project = None
        if config.embedding_width != config.hidden_size:
            self.embeddings_project = nn.Linear(config.embedding_width, config.hidden_size)
            self.init_weights(self.embeddings_project)

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(*S) ids -> (*S, H): the embeddings (E wide), projected to H when E != H."""
        x = super().embed(input_ids, token_type_ids, positions)
        return x if self.embeddings_project is None else self.embeddings_project(x)


class ElectraFamily(EncoderFamily):
    """``model.encoder: electra``; pretrained directories with ``model_type: electra``."""

    name = "electra"
    config_class = ElectraConfig
    encoder_class = ElectraModel
    hf_prefix = "electra."

    @classmethod
    def hf_architecture(cls, head_architecture: str) -> str | None:
        """``ElectraFor…`` where transformers' ELECTRA class has BERT's task layer
        (token classification, question answering) or is the head's own; else None
        (ELECTRA's sequence classifier has an extra dense layer; there is no NSP)."""
        same_layers = {
            "BertForTokenClassification": "ElectraForTokenClassification",
            "BertForQuestionAnswering": "ElectraForQuestionAnswering",
        }
        if head_architecture.startswith("Electra"):
            return head_architecture
        return same_layers.get(head_architecture)


__getattr__ = renamed(__name__, {"ElectraEncoder": "ElectraModel"}, globals())
