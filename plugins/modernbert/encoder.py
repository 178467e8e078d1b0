"""The ModernBERT encoder family (Warner et al. 2024, "Smarter, Better, Faster, Longer: A Modern
Bidirectional Encoder for Fast, Memory Efficient, and Long Context Finetuning and Inference").

What differs from BERT (AnswerDotAI/ModernBERT; transformers ``ModernBertModel``, whose
state-dict keys these are): rotary position embeddings (RoPE, Su et al. 2021) instead of learned
positions, with θ 160,000 in global-attention layers and 10,000 in local ones; every
``global_attn_every_n_layers``-th layer (the first included) attends globally, the others to a
sliding window of ``local_attention`` tokens (a token sees those at most ``local_attention // 2``
positions away); pre-norm blocks (the first without an attention norm) with a final norm;
GeGLU feed-forward layers; no biases; LayerNorm on the token embeddings; no token types; 8,192
positions. On CUDA the local layers run FlashAttention varlen with ``window_size``; elsewhere an
exact banded mask (``bertkit.model.unpadded``).

transformers puts one more layer in every ModernBERT task class, ``head`` (dense, GELU, norm:
``ModernBertPredictionHead``), between the encoder and the task layer. Here it is part of the
encoder (``ModernBertModel.head``), so bertkit's heads see what transformers' task layers see:
``last_hidden_state`` is ``head(final_norm(x))`` and ``pooler_output`` its ``[CLS]`` row
(``classifier_pooling: cls``); ``hidden_states`` ends with ``final_norm(x)``, transformers'
``ModernBertModel`` output, which ``bertkit embed`` reads.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from bertkit.api.encoder import (
    ACTIVATIONS,
    PRESETS,
    BertConfig,
    Dropout,
    EncoderFamily,
    EncoderOutput,
    Preset,
    Unpadded,
    attend,
    band,
    check_length,
    dropout,
    first_tokens,
    read_json,
    renamed,
    truncated_normal_,
    typed_fields,
    varlen_attention,
)

# config.json names of transformers' ModernBertConfig -> the BertConfig names bertkit's heads read
_HF_NAMES = {
    "hidden_activation": "hidden_act",
    "norm_eps": "layer_norm_eps",
    "attention_dropout": "attention_probs_dropout_prob",
    "embedding_dropout": "hidden_dropout_prob",
}


@dataclass
class ModernBertConfig(BertConfig):
    """ModernBERT's hyper-parameters (defaults: ModernBERT-base). ``hidden_act``,
    ``layer_norm_eps``, ``attention_probs_dropout_prob`` and ``hidden_dropout_prob`` (embedding
    dropout) are written to ``config.json`` under transformers' names (``hidden_activation``,
    ``norm_eps``, ``attention_dropout``, ``embedding_dropout``).

    Args:
        global_attn_every_n_layers: layers 0, n, 2n … attend globally; the others locally.
        local_attention: the local window in tokens (each token sees ``local_attention // 2``
            positions either side).
        global_rope_theta, local_rope_theta: RoPE base of the global and local layers.
        mlp_dropout: dropout inside the GeGLU feed-forward layer.
        classifier_activation: activation of the prediction head.
        initializer_cutoff_factor: fresh weights are normal, truncated at this many std.
    """

    vocab_size: int = 50368
    hidden_size: int = 768
    num_hidden_layers: int = 22
    intermediate_size: int = 1152
    attention_probs_dropout_prob: float = 0.0
    hidden_dropout_prob: float = 0.0
    max_position_embeddings: int = 8192
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 50283
    global_attn_every_n_layers: int = 3
    local_attention: int = 128
    global_rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    mlp_dropout: float = 0.0
    classifier_activation: str = "gelu"
    initializer_cutoff_factor: float = 2.0

    prediction_transform_in_encoder: ClassVar[bool] = True  # the encoder's ``head``

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.local_attention < 2 or self.local_attention % 2:
            raise ValueError(f"local_attention={self.local_attention}: expected an even number of tokens >= 2")
        if self.global_attn_every_n_layers < 1:
            raise ValueError(f"global_attn_every_n_layers={self.global_attn_every_n_layers}: expected >= 1")

    @classmethod
    def preset(cls, name: Preset, **overrides: Any) -> ModernBertConfig:
        """A standard depth and width (``bertkit.model.config.PRESETS``) with ModernBERT's GeGLU width
        (1.5 H, as ModernBERT-base's 1,152 for 768).

        Raises:
            ValueError: unknown preset name.
        """
        hidden = PRESETS[name][1] if name in PRESETS else 0
        return super().preset(name, **{"intermediate_size": hidden * 3 // 2, **overrides})

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> ModernBertConfig:
        """Read a transformers ``ModernBertConfig`` ``config.json`` (``layer_types`` and
        ``rope_parameters`` of transformers 5, or the flat ``global_attn_every_n_layers`` /
        ``global_rope_theta`` / ``local_rope_theta`` of earlier versions).

        Raises:
            FileNotFoundError: no ``config.json``.
            ValueError: not valid JSON, or ``layer_types`` that are not a global layer every n.
        """
        path = Path(directory) / "config.json"
        raw = read_json(path, "no config.json in the model directory")
        raw = {_HF_NAMES.get(k, k): v for k, v in raw.items()}
        rope = raw.get("rope_parameters") or {}
        for kind, field in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
            if "rope_theta" in (rope.get(kind) or {}):
                raw[field] = rope[kind]["rope_theta"]
        types = raw.get("layer_types")
        if types:
            every = (types[1:] + ["full_attention"]).index("full_attention") + 1
            if types != [("sliding_attention", "full_attention")[i % every == 0] for i in range(len(types))]:
                raise ValueError(f"{path}: layer_types {types} are not a global layer every n layers")
            raw["global_attn_every_n_layers"] = every
        return cls(**typed_fields(cls, raw, str(path)))

    def layer_is_global(self, index: int) -> bool:
        return index % self.global_attn_every_n_layers == 0

    def to_dict(self) -> dict[str, Any]:
        """``config.json`` as transformers' ``ModernBertConfig`` reads it (both its forms)."""
        hf_name = {ours: theirs for theirs, ours in _HF_NAMES.items()}
        fields = {hf_name.get(k, k): v for k, v in dataclasses.asdict(self).items()}
        fields.pop("type_vocab_size")
        layer_types = [
            "full_attention" if self.layer_is_global(i) else "sliding_attention" for i in range(self.num_hidden_layers)
        ]
        rope = {
            "full_attention": {"rope_type": "default", "rope_theta": self.global_rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": self.local_rope_theta},
        }
        extra = {"norm_bias": False, "attention_bias": False, "mlp_bias": False, "classifier_bias": False}
        return {
            "model_type": "modernbert", "architectures": ["ModernBertModel"], **fields, **extra,
            "layer_types": layer_types, "rope_parameters": rope, "classifier_pooling": "cls",
        }  # fmt: skip


def _norm(config: ModernBertConfig) -> nn.LayerNorm:
    return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=False)


class ModernBertEmbeddings(nn.Module):
    """Token embeddings, LayerNorm, dropout; no positions (RoPE) and no token types."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.norm = _norm(config)
        self.drop = Dropout(config.hidden_dropout_prob)

    @property
    def word_embeddings(self) -> nn.Embedding:
        """The token embeddings under BERT's name (heads tie their decoder to it)."""
        return self.tok_embeddings

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))  # (*S) -> (*S, H)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE (Su et al. 2021) in the half-split layout of GPT-NeoX / transformers: (…, A, D) with
    cos, sin (…, D), computed in fp32 and returned in ``x``'s dtype."""
    xf = x.float()
    half = torch.cat((-xf[..., x.shape[-1] // 2 :], xf[..., : x.shape[-1] // 2]), dim=-1)
    return (xf * cos.unsqueeze(-2) + half * sin.unsqueeze(-2)).to(x.dtype)


class ModernBertAttention(nn.Module):
    """Multi-head attention with RoPE; ``window`` (tokens either side) for a local layer."""

    def __init__(self, config: ModernBertConfig, window: int | None) -> None:
        super().__init__()
        self.num_heads, self.window = config.num_attention_heads, window
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
        layout: Unpadded | None,
    ) -> torch.Tensor:
        """Padded (B, T, H) or unpadded (N, H) with ``layout`` -> the same shape. ``mask``: (B, 1, 1,
        T) key mask, or (B, 1, T, T) with the band of a local layer (for the padded paths)."""
        A = self.num_heads
        q, k, v = self.Wqkv(x).unflatten(-1, (3, A, -1)).unbind(-3)  # each (…, A, D)
        q, k = rotate(q, *rope), rotate(k, *rope)
        dropout_p = self.dropout_p if self.training else 0.0
        if layout is not None:
            y = varlen_attention(q, k, v, layout, dropout_p, window=self.window)  # (N, A, D)
        else:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, A, T, D)
            y = attend(q, k, v, mask, dropout_p).transpose(1, 2)
        return dropout(self.Wo(y.flatten(-2)), dropout_p, self.training)


class ModernBertMLP(nn.Module):
    """GeGLU (Shazeer 2020): Wo(dropout(act(x Wi_a) * x Wi_b))."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.act = ACTIVATIONS[config.hidden_act]()
        self.drop = Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(inputs) * gate))


class ModernBertLayer(nn.Module):
    """A pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)); layer 0 has no attention norm
    (the embeddings are normed already)."""

    def __init__(self, config: ModernBertConfig, index: int) -> None:
        super().__init__()
        self.is_global = config.layer_is_global(index)
        self.attn_norm = nn.Identity() if index == 0 else _norm(config)
        self.attn = ModernBertAttention(config, None if self.is_global else config.local_attention // 2)
        self.mlp_norm = _norm(config)
        self.mlp = ModernBertMLP(config)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
        layout: Unpadded | None,
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rope, mask, layout)
        return x + self.mlp(self.mlp_norm(x))


class ModernBertPredictionHead(nn.Module):
    """norm(act(dense(x))): the layer every transformers ModernBERT task class puts before its
    task layer (``head.*`` in its checkpoints)."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.act = ACTIVATIONS[config.classifier_activation]()
        self.norm = _norm(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(x)))


class ModernBertModel(nn.Module):
    """ModernBERT: embeddings, ``num_hidden_layers`` pre-norm blocks, final norm, prediction head.

    Args:
        config: sizes, attention pattern, RoPE bases and dropout.
        add_pooling_layer: build the prediction head ``head`` (transformers' task classes have
            it; without it ``last_hidden_state`` is ``final_norm``'s output).
    """

    pooler = None  # no tanh pooler: pooler_output is the head's [CLS] row
    optional_weights = ("head.",)  # a ModernBertModel directory written by transformers has none: it starts fresh

    def __init__(self, config: ModernBertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__()
        self.config = config
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(ModernBertLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_norm = _norm(config)
        self.head = ModernBertPredictionHead(config) if add_pooling_layer else None
        D = config.hidden_size // config.num_attention_heads
        for kind, theta in (("global", config.global_rope_theta), ("local", config.local_rope_theta)):
            inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float) / D))  # (D / 2,)
            self.register_buffer(f"{kind}_inv_freq", inv_freq, persistent=False)
        self._init_weights()

    @property
    def blocks(self) -> nn.ModuleList:
        return self.layers

    def set_attention_dropout(self, p: float) -> None:
        """Dropout on attention probabilities and outputs (``attention_dropout``) in every layer."""
        self.config.attention_probs_dropout_prob = p
        for layer in self.layers:
            layer.attn.dropout_p = p

    def _init_weights(self) -> None:
        """Truncated normal (± ``initializer_cutoff_factor`` std): ``initializer_range`` for the
        embeddings and input projections, that / sqrt(2 L) for output projections and the head
        (ModernBERT's ``_init_weights``); norms at 1."""
        c = self.config
        std_in, std_out = c.initializer_range, c.initializer_range / math.sqrt(2.0 * c.num_hidden_layers)

        def init(weight: torch.Tensor, std: float) -> None:
            truncated_normal_(weight, std, c.initializer_cutoff_factor)

        init(self.embeddings.tok_embeddings.weight, std_in)
        for layer in self.layers:
            init(layer.attn.Wqkv.weight, std_in)
            init(layer.attn.Wo.weight, std_out)
            init(layer.mlp.Wi.weight, std_in)
            init(layer.mlp.Wo.weight, std_out)
        if self.head is not None:
            init(self.head.dense.weight, std_out)

    def _rope(self, positions: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[..., None].float() * getattr(self, f"{kind}_inv_freq")  # (…, D / 2)
        angles = torch.cat((freqs, freqs), dim=-1)  # (…, D)
        return angles.cos(), angles.sin()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        cls_only: bool = False,
        unpad: bool = True,
    ) -> EncoderOutput:
        """Encode a batch (``BertModel.forward``'s interface; ``token_type_ids`` are ignored).

        Args:
            input_ids: (B, T) token ids, T at most ``max_position_embeddings``.
            attention_mask: (B, T), 1/True at real tokens; None = all real.
            output_hidden_states: also return the embeddings, each block's output and, last,
                ``final_norm``'s output (transformers' ``ModernBertModel.last_hidden_state``).
            cls_only: return only the ``[CLS]`` row ((B, 1, H)); every block still runs in full.
            unpad: run on the real tokens only (FlashAttention varlen on CUDA, else exact);
                False runs on the padded batch. Both give the same outputs.

        Raises:
            ValueError: T exceeds ``max_position_embeddings``; a row has no real token (unpadded).
        """
        B, T = input_ids.shape
        check_length(self.config, T)
        device = input_ids.device
        positions = torch.arange(T, device=device)
        layout = key_mask = local_mask = None  # the masks are for the padded path; the unpadded one is told the lengths
        if unpad:
            layout = Unpadded.of(input_ids, attention_mask)
            input_ids, positions = layout.unpad(input_ids), layout.unpad(positions.expand(B, T))
        else:
            key_mask = attention_mask.bool()[:, None, None, :] if attention_mask is not None else None  # (B, 1, 1, T)
            local = band(T, self.config.local_attention // 2, device)  # (T, T): |i - j| <= w
            # (B, 1, T, T) or (T, T); a padding query sees itself, so that no row is fully masked (its
            # softmax would be NaN in the backward pass); real queries are unchanged (they see themselves)
            eye = torch.eye(T, dtype=torch.bool, device=device)
            local_mask = local if key_mask is None else (key_mask & local) | eye
        ropes = {kind: self._rope(positions, kind) for kind in ("global", "local")}
        x = self.embeddings(input_ids)  # (B, T, H), unpadded (N, H)
        states = [x] if output_hidden_states else None
        for layer in self.layers:
            kind, mask = ("global", key_mask) if layer.is_global else ("local", local_mask)
            x = layer(x, ropes[kind], mask, layout)
            if states is not None:
                states.append(x)
        x = self.final_norm(x)
        if states is not None:
            states[-1] = x
        if self.head is not None:
            x = self.head(x)
        pooled = first_tokens(x, layout).reshape(B, -1)  # (B, H): the [CLS] row
        out = EncoderOutput.of(x, pooled, states, layout)
        return EncoderOutput(pooled.unsqueeze(1), pooled, out.hidden_states) if cls_only else out

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``config.json`` and ``model.safetensors`` that ``transformers.ModernBertModel``
        loads; the prediction head's ``head.*`` are kept (transformers skips them, as it does
        loading a ``ModernBertForMaskedLM`` checkpoint into ``ModernBertModel``)."""
        from bertkit.api.encoder import save_encoder

        save_encoder(self, directory)


class ModernBertFamily(EncoderFamily):
    """``model.encoder: modernbert``; pretrained directories with ``model_type: modernbert``."""

    name = "modernbert"
    config_class = ModernBertConfig
    encoder_class = ModernBertModel
    hf_prefix = "model."
    adapter_targets = ("Wqkv", "Wo", "Wi")  # every linear layer of the blocks, as for BERT (EncoderFamily)
    hf_token_roles: ClassVar[dict[str, str]] = {
        "cls_token_id": "cls",
        "sep_token_id": "sep",
        "bos_token_id": "cls",
        "eos_token_id": "sep",
    }

    @classmethod
    def hf_architecture(cls, head_architecture: str) -> str | None:
        """``ModernBertFor…`` for token classification, question answering, sequence
        classification (their ``head`` is the encoder's) and masked LM (a decoder on that
        ``head``); None for BERT's NSP/SOP pre-training, which ModernBERT has no class for."""
        task = head_architecture.removeprefix("Bert")
        if task in ("ForTokenClassification", "ForQuestionAnswering", "ForSequenceClassification", "ForMaskedLM"):
            return "ModernBert" + task
        return head_architecture if head_architecture.startswith("ModernBert") else None

    @classmethod
    def hf_renames(cls, architecture: str) -> dict[str, str]:
        """The prediction head sits beside ``model.`` in transformers' task classes, its QA
        class calls the span layer ``classifier``, and its masked-LM output bias is the
        ``decoder``'s (whose weight is tied to the token embeddings)."""
        return {"model.head.": "head.", "qa_outputs.": "classifier.", "cls.predictions.bias": "decoder.bias"}


__getattr__ = renamed(__name__, {"ModernBertEncoder": "ModernBertModel"}, globals())
