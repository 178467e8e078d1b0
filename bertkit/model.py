"""The BERT encoder (Devlin et al. 2019), one readable file.

Module and parameter names mirror Hugging Face ``BertModel`` exactly, so its state dict keys
(``embeddings.word_embeddings.weight``, ``encoder.layer.0.attention.self.query.weight`` …) load
and export without renaming. Attention runs through ``F.scaled_dot_product_attention`` with a
boolean key-padding mask. Shapes: B batch, T tokens, H hidden_size, A heads, D = H / A.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import BertConfig

# Activation modules by config name; a fresh instance per use (a shared one would carry one
# model's train/eval mode into every other model).
ACTIVATIONS = {
    "gelu": nn.GELU,
    "gelu_new": partial(nn.GELU, approximate="tanh"),
    "relu": nn.ReLU,
}


@dataclass
class EncoderOutput:
    """What ``BertEncoder.forward`` returns.

    Attributes:
        last_hidden_state: (B, T, H) output of the last block.
        pooler_output: (B, H) tanh(W h_[CLS] + b), or None without a pooler.
        hidden_states: L + 1 tensors (B, T, H): embeddings, then each block; None unless asked.
    """

    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


class BertEmbeddings(nn.Module):
    """Token + segment + learned position embeddings, then LayerNorm and dropout (§3, Figure 2)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.shape[1]
        positions = torch.arange(T, device=input_ids.device)  # (T,)
        x = (
            self.word_embeddings(input_ids)  # (B, T, H)
            + self.token_type_embeddings(token_type_ids)  # (B, T, H)
            + self.position_embeddings(positions)  # (T, H), broadcast over B
        )
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention; padding keys are masked out."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor, n_queries: int | None = None) -> torch.Tensor:
        """(B, T, H) -> (B, T, H); with ``n_queries``, outputs for the first ``n_queries`` positions
        only (B, n_queries, H), their keys and values still from all T tokens."""
        B, T, H = x.shape
        xq = x if n_queries is None else x[:, :n_queries]

        def heads(t: torch.Tensor) -> torch.Tensor:  # (B, T', H) -> (B, A, T', D)
            return t.view(B, t.shape[1], self.num_heads, H // self.num_heads).transpose(1, 2)

        q, k, v = heads(self.query(xq)), heads(self.key(x)), heads(self.value(x))
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=key_mask, dropout_p=self.dropout_p if self.training else 0.0
        )  # (B, A, T', D)
        return y.transpose(1, 2).reshape(B, xq.shape[1], H)


class BertSelfOutput(nn.Module):
    """Attention output projection, dropout, residual, post-LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, y: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(y)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor, n_queries: int | None = None) -> torch.Tensor:
        residual = x if n_queries is None else x[:, :n_queries]
        return self.output(self.self(x, key_mask, n_queries), residual)


class BertIntermediate(nn.Module):
    """Feed-forward expansion H -> intermediate_size with the activation."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACTIVATIONS[config.hidden_act]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))  # (B, T, intermediate_size)


class BertOutput(BertSelfOutput):
    """Feed-forward contraction back to H, dropout, residual, post-LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)


class BertLayer(nn.Module):
    """One post-LN transformer block (Vaswani et al. 2017)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor, n_queries: int | None = None) -> torch.Tensor:
        x = self.attention(x, key_mask, n_queries)  # (B, T, H), or (B, n_queries, H)
        return self.output(self.intermediate(x), x)


class BertLayerStack(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence representation used by NSP and classifiers (§3.1)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, H)


class BertEncoder(nn.Module):
    """BERT: embeddings, ``num_hidden_layers`` blocks, optional pooler.

    Args:
        config: sizes and dropout.
        add_pooling_layer: build the tanh pooler on ``[CLS]``.
    """

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertLayerStack(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        """Truncated normal(0, initializer_range), zero biases (google-research/bert modeling.py)."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            module.weight.data[module.padding_idx].zero_()
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        cls_only: bool = False,
    ) -> EncoderOutput:
        """Encode a batch.

        Args:
            input_ids: (B, T) WordPiece ids.
            attention_mask: (B, T), 1/True for real tokens, 0/False for padding; None = all real.
            token_type_ids: (B, T) segment ids (0 = A, 1 = B); None = all A.
            output_hidden_states: also return the embeddings and every block's output.
            cls_only: compute the last block for the ``[CLS]`` position only (its attention still
                reads every token): ``last_hidden_state`` is then (B, 1, H), the pooler output is
                unchanged, and the last block costs a fraction of a full one. For heads that
                read ``[CLS]`` alone (MosaicML BERT's ``subset_idx``).

        Returns:
            ``EncoderOutput`` with (B, T, H) hidden states ((B, 1, H) last with ``cls_only``).

        Raises:
            ValueError: T exceeds ``max_position_embeddings``.
        """
        B, T = input_ids.shape
        if T > self.config.max_position_embeddings:
            raise ValueError(
                f"input_ids has {T} tokens, more than max_position_embeddings ({self.config.max_position_embeddings})"
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        key_mask = None
        if attention_mask is not None:
            key_mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): True = attend
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, H)
        states = [x] if output_hidden_states else None
        last = len(self.encoder.layer) - 1
        for i, block in enumerate(self.encoder.layer):
            x = block(x, key_mask, 1 if cls_only and i == last else None)
            if states is not None:
                states.append(x)
        pooled = self.pooler(x) if self.pooler is not None else None
        return EncoderOutput(x, pooled, tuple(states) if states is not None else None)

    @classmethod
    def from_pretrained(cls, directory: str | Path, add_pooling_layer: bool = True) -> BertEncoder:
        """Build from a Hugging Face format directory (``config.json`` + weights).

        Raises:
            FileNotFoundError, ValueError: see ``bertkit.weights.load_encoder_weights``.
        """
        from bertkit.weights import load_encoder_weights

        encoder = cls(BertConfig.from_pretrained(directory), add_pooling_layer)
        load_encoder_weights(encoder, directory)
        return encoder

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``config.json`` and ``model.safetensors`` that ``transformers.BertModel`` loads."""
        from bertkit.weights import save_encoder

        save_encoder(self, directory)


FEATURE_POOLINGS = ("last", "second_to_last", "sum_last_four", "concat_last_four")


def token_features(hidden_states: tuple[torch.Tensor, ...], how: str = "last") -> torch.Tensor:
    """Contextual token features from ``EncoderOutput.hidden_states`` (Devlin et al. 2019, §5.3).

    Args:
        hidden_states: L + 1 tensors (B, T, H), embeddings first.
        how: ``last``, ``second_to_last``, ``sum_last_four`` -> (B, T, H); ``concat_last_four``
            -> (B, T, 4H).

    Raises:
        ValueError: unknown ``how``, or fewer than four blocks for the ``*_four`` options.
    """
    if how not in FEATURE_POOLINGS:
        raise ValueError(f"how={how!r}: expected one of {', '.join(FEATURE_POOLINGS)}")
    if how == "last":
        return hidden_states[-1]
    if how == "second_to_last":
        return hidden_states[-2]
    if len(hidden_states) < 5:
        raise ValueError(f"how={how!r} needs at least 4 blocks, the encoder has {len(hidden_states) - 1}")
    last_four = hidden_states[-4:]
    return torch.stack(last_four).sum(0) if how == "sum_last_four" else torch.cat(last_four, dim=-1)
