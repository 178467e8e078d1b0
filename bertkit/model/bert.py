"""The BERT encoder (Devlin et al. 2019), one readable file.

Module and parameter names mirror Hugging Face ``BertModel`` exactly, so its state dict keys
(``embeddings.word_embeddings.weight``, ``encoder.layer.0.attention.self.query.weight`` …) load
and export without renaming. Two equivalent paths, the same parameters:

- **unpadded** (default): padding is dropped once after the input ids are read; every block
  runs on the N real tokens as one (N, H) tensor and attention is told the sequence boundaries
  (``bertkit.model.unpadded``: FlashAttention varlen on CUDA, exact attention by length groups elsewhere);
- **padded**: every block runs on (B, T, H) and ``F.scaled_dot_product_attention`` masks the
  padding keys.

Shapes: B batch, T tokens per row, N real tokens in the batch, H hidden_size, A heads, D = H / A.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model.config import BertConfig
from bertkit.model.dropout import Dropout
from bertkit.model.unpadded import Unpadded, attend, varlen_attention
from bertkit.model.weights import truncated_normal_
from bertkit.utils.choices import Features, check_choice
from bertkit.utils.deprecation import warn_deprecated
from bertkit.utils.moved import renamed

# Activation modules by config name; a fresh instance per use (a shared one would carry one
# model's train/eval mode into every other model).
ACTIVATIONS = {
    "gelu": nn.GELU,
    "gelu_new": partial(nn.GELU, approximate="tanh"),
    "relu": nn.ReLU,
}


class EncoderOutput:
    """What ``BertModel.forward`` returns, the same whichever path ran.

    Attributes:
        last_hidden_state: (B, T, H) output of the last block, zeros at padding (built from the
            unpadded states on first use after an unpadded run); (B, 1, H) with ``cls_only``.
        pooler_output: (B, H) tanh(W h_[CLS] + b), or None without a pooler.
        hidden_states: L + 1 tensors (B, T, H): embeddings, then each block; None unless asked.
        layout: the layout of an unpadded run (``Unpadded``; None after a padded one).
        unpadded: (N, H) last block of an unpadded run, real tokens only (None after a padded one).

    Heads that read tokens should use ``map_tokens`` and ``select``: on an unpadded run they
    touch only the real tokens and never build the padded tensor.
    """

    def __init__(
        self,
        last_hidden_state: torch.Tensor | None,
        pooler_output: torch.Tensor | None = None,
        hidden_states: tuple[torch.Tensor, ...] | None = None,
        layout: Unpadded | None = None,
        unpadded: torch.Tensor | None = None,
    ) -> None:
        self._last, self.pooler_output, self.hidden_states = last_hidden_state, pooler_output, hidden_states
        self.layout, self.unpadded = layout, unpadded  # (N, H) last block of an unpadded run

    @property
    def last_hidden_state(self) -> torch.Tensor:
        if self._last is None:
            self._last = self.layout.pad(self.unpadded)
        return self._last

    def map_tokens(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """``fn`` applied to every token's last hidden state: (B, T, *) for ``fn``: (…, H) -> (…, *),
        computed on the real tokens only after an unpadded run (zeros at padding)."""
        if self.unpadded is None:
            return fn(self.last_hidden_state)
        return self.layout.pad(fn(self.unpadded))

    def select(self, mask: torch.Tensor) -> torch.Tensor:
        """(M, H) last hidden states where a (B, T) mask is True, in row-major order (the rows of
        ``last_hidden_state[mask]``); the mask must be True at real tokens only."""
        if self.unpadded is None:
            return self.last_hidden_state[mask]
        return self.unpadded[self.layout.rows(mask)]

    @classmethod
    def of(
        cls,
        x: torch.Tensor,
        pooler_output: torch.Tensor | None,
        states: list[torch.Tensor] | None,
        layout: Unpadded | None,
    ) -> EncoderOutput:
        """The output of an encoder's last block ``x`` ((B, T, H), or (N, H) with ``layout``), its
        pooler output, and the hidden states collected on the way (padded here where they are
        unpadded; ``output_hidden_states`` off: None)."""
        hidden_states = None if states is None else tuple(s if s.dim() == 3 else layout.pad(s) for s in states)
        if layout is None:
            return cls(x, pooler_output, hidden_states)
        return cls(None, pooler_output, hidden_states, layout, unpadded=x)

    @property
    def packed(self) -> torch.Tensor | None:
        """Release 0.1's name of ``unpadded`` (deprecated)."""
        warn_deprecated("EncoderOutput.packed is release 0.1's name of .unpadded")
        return self.unpadded


class BertEmbeddings(nn.Module):
    """Token + segment + learned position embeddings, then LayerNorm and dropout (§3, Figure 2),
    of width ``config.embedding_width`` (``hidden_size`` in BERT)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        E = config.embedding_width
        self.word_embeddings = nn.Embedding(config.vocab_size, E, config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, E)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, E)
        self.LayerNorm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        """Ids of any shape S ((B, T) padded, (N,) unpadded) -> (*S, E)."""
        x = (
            self.word_embeddings(input_ids)
            + self.token_type_embeddings(token_type_ids)
            + self.position_embeddings(position_ids)
        )
        return self.dropout(self.LayerNorm(x))


def check_length(config: BertConfig, length: int) -> None:
    """Raise ValueError unless ``length`` tokens fit an encoder of ``config`` (``config.max_length``)."""
    if length > config.max_length:
        raise ValueError(
            f"input_ids has {length} tokens, more than the encoder's {config.max_length} positions "
            f"(max_position_embeddings {config.max_position_embeddings})"
        )


def first_tokens(x: torch.Tensor, layout: Unpadded | None) -> torch.Tensor:
    """Each sequence's first token (``[CLS]``): (B, T, H) -> (B, 1, H); unpadded (N, H) -> (B, H)."""
    return x[:, :1] if layout is None else x[layout.first_rows]


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention over the real tokens of each sequence.

    The query, key and value projections run as one matrix product (their weights concatenated;
    the parameters stay three ``nn.Linear`` with Hugging Face's names).
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def _project(self, x: torch.Tensor, xq: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """q, k, v from one fused product; with separate queries ``xq``, k and v fused; three
        products where the projections are not ``nn.Linear`` (``bertkit.model.quantize.Int8Linear``)."""
        parts = (self.query, self.key, self.value) if xq is None else (self.key, self.value)
        if not all(isinstance(m, nn.Linear) for m in parts):  # int8 (bertkit.model.quantize): no weights to join
            return self.query(x if xq is None else xq), self.key(x), self.value(x)
        fused = F.linear(x, torch.cat([m.weight for m in parts]), torch.cat([m.bias for m in parts]))
        out = fused.chunk(len(parts), dim=-1)
        return out if xq is None else (self.query(xq), *out)

    def forward(
        self, x: torch.Tensor, key_mask: torch.Tensor | None, cls_only: bool = False, layout: Unpadded | None = None
    ) -> torch.Tensor:
        """Padded (B, T, H) -> (B, T, H), or unpadded (N, H) -> (N, H) with ``layout``; with
        ``cls_only`` outputs for each sequence's first token only ((B, 1, H), unpadded (B, H)), its
        keys and values still from every token."""
        H = x.shape[-1]
        A, D = self.num_heads, H // self.num_heads
        q, k, v = self._project(x, first_tokens(x, layout) if cls_only else None)
        dropout_p = self.dropout_p if self.training else 0.0
        if layout is not None:  # unpadded: (N, H) -> (N, A, D)
            q, k, v = (t.reshape(t.shape[0], A, D) for t in (q, k, v))
            return varlen_attention(q, k, v, layout, dropout_p, cls_only).reshape(q.shape[0], H)
        B = x.shape[0]
        q, k, v = (t.reshape(B, t.shape[1], A, D).transpose(1, 2) for t in (q, k, v))  # (B, A, T', D)
        y = attend(q, k, v, key_mask, dropout_p)  # (B, A, T', D)
        return y.transpose(1, 2).reshape(B, q.shape[2], H)


class BertSelfOutput(nn.Module):
    """Attention output projection, dropout, residual, post-LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, y: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(y)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(
        self, x: torch.Tensor, key_mask: torch.Tensor | None, cls_only: bool = False, layout: Unpadded | None = None
    ) -> torch.Tensor:
        residual = first_tokens(x, layout) if cls_only else x
        return self.output(self.self(x, key_mask, cls_only, layout), residual)


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

    def forward(
        self, x: torch.Tensor, key_mask: torch.Tensor | None, cls_only: bool = False, layout: Unpadded | None = None
    ) -> torch.Tensor:
        x = self.attention(x, key_mask, cls_only, layout)  # (B, T, H) or unpadded (N, H); fewer rows with cls_only
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

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(cls))  # (B, H) -> (B, H)


class BertModel(nn.Module):
    """BERT: embeddings, ``num_hidden_layers`` blocks, optional pooler.

    Args:
        config: sizes and dropout.
        add_pooling_layer: build the tanh pooler on ``[CLS]``.
    """

    optional_weights: tuple[str, ...] = ("pooler.",)
    """Key prefixes a pretrained directory may lack (they keep their fresh initialisation)."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertLayerStack(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.apply(self.init_weights)

    def init_weights(self, module: nn.Module) -> None:
        """Initialise ``module`` (one of this model's, or a layer a family adds, such as RoBERTa's
        pooler or ELECTRA's embedding projection) as BERT does: a linear or embedding layer's
        weights truncated normal(0, ``initializer_range``) at 2 std (``truncated_normal_``), zero
        biases and padding row; a LayerNorm at 1 and 0 (google-research/bert modeling.py). Not
        recursive: ``model.apply(model.init_weights)`` initialises every submodule."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            truncated_normal_(module.weight, std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            module.weight.data[module.padding_idx].zero_()
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def _init_weights(self, module: nn.Module) -> None:
        warn_deprecated("BertModel._init_weights is release 0.1's name of BertModel.init_weights")
        self.init_weights(module)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        cls_only: bool = False,
        unpad: bool = True,
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
            unpad: run the blocks on the real tokens only (see the module docstring); False runs
                them on the padded (B, T, H) batch. Both give the same outputs (tested to 1e-5).

        Returns:
            ``EncoderOutput`` with (B, T, H) hidden states ((B, 1, H) last with ``cls_only``).

        Raises:
            ValueError: T exceeds the positions (``config.max_length``); a row of ``attention_mask`` has no
                real token (unpadded path).
        """
        B, T = input_ids.shape
        check_length(self.config, T)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(T, device=input_ids.device).expand(B, T)  # (B, T)
        layout = key_mask = None
        if unpad:
            layout = Unpadded.of(input_ids, attention_mask)
            input_ids, token_type_ids, positions = (layout.unpad(t) for t in (input_ids, token_type_ids, positions))
        elif attention_mask is not None:  # the padded path; the unpadded one is told the lengths
            key_mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): True = attend
        x = self.embed(input_ids, token_type_ids, positions)  # (B, T, H), unpadded (N, H)
        states = [x if layout is None else layout.pad(x)] if output_hidden_states else None
        last = len(self.encoder.layer) - 1
        for i, block in enumerate(self.encoder.layer):
            x = block(x, key_mask, cls_only and i == last, layout)
            if cls_only and i == last and layout is not None:
                layout, x = None, x.unsqueeze(1)  # (B, H) -> (B, 1, H): only [CLS] is left
            if states is not None:
                states.append(x if layout is None else layout.pad(x))
        pooled = self.pooler(first_tokens(x, layout).reshape(B, -1)) if self.pooler is not None else None  # (B, H)
        return EncoderOutput.of(x, pooled, states, layout)

    @property
    def blocks(self) -> nn.ModuleList:
        """The transformer blocks, in order (for compiling them one by one)."""
        return self.encoder.layer

    def set_attention_dropout(self, p: float) -> None:
        """Dropout on the attention probabilities of every block (``model.attention_dropout``)."""
        self.config.attention_probs_dropout_prob = p
        for block in self.blocks:
            block.attention.self.dropout_p = p

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The first block's input: ids of any shape S -> (*S, H). An encoder family whose embeddings
        differ from BERT's (a projection, shared embeddings) overrides this."""
        return self.embeddings(input_ids, token_type_ids, positions)

    @classmethod
    def from_pretrained(cls, directory: str | Path, add_pooling_layer: bool = True) -> BertModel:
        """Build from a Hugging Face format directory (``config.json`` + weights).

        Raises:
            FileNotFoundError, ValueError: see ``bertkit.model.weights.pretrained_encoder``.
        """
        from bertkit.model.weights import pretrained_encoder

        config = BertConfig.from_pretrained(directory)
        return pretrained_encoder(lambda: cls(config, add_pooling_layer), directory)[0]

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``config.json`` and ``model.safetensors`` that ``transformers.BertModel`` loads."""
        from bertkit.model.weights import save_encoder

        save_encoder(self, directory)


def token_features(hidden_states: tuple[torch.Tensor, ...], how: Features = "last") -> torch.Tensor:
    """Contextual token features from ``EncoderOutput.hidden_states`` (Devlin et al. 2019, §5.3).

    Args:
        hidden_states: L + 1 tensors (B, T, H), embeddings first.
        how: ``last``, ``second_to_last``, ``sum_last_four`` -> (B, T, H); ``concat_last_four``
            -> (B, T, 4H).

    Raises:
        ValueError: unknown ``how``, or fewer than four blocks for the ``*_four`` options.
    """
    check_choice("how", how, Features)
    if how == "last":
        return hidden_states[-1]
    if how == "second_to_last":
        return hidden_states[-2]
    if len(hidden_states) < 5:
        raise ValueError(f"how={how!r} needs at least 4 blocks, the encoder has {len(hidden_states) - 1}")
    last_four = hidden_states[-4:]
    return torch.stack(last_four).sum(0) if how == "sum_last_four" else torch.cat(last_four, dim=-1)


__getattr__ = renamed(__name__, {"BertEncoder": "BertModel"}, globals())
