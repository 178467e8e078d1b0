"""``BertConfig``: the encoder's hyper-parameters, with Hugging Face ``BertConfig`` field names.

Presets follow the 24 compact BERT models of Turc et al. 2019 ("Well-Read Students Learn Better",
google-research/bert README) for tiny/mini/small/medium and Devlin et al. 2019 §3 for base/large.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from bertkit.utils.choices import check_choice, check_int
from bertkit.utils.io import read_json
from bertkit.utils.precision import check_float32
from bertkit.utils.schema import parse

MAX_LENGTH = 128
"""Tokens per sequence, specials included, that a model reads unless its recipe says otherwise
(``model.max_length``): BERT's length for 90 % of its pre-training steps (Devlin et al. 2019, §A.2)."""
MIN_LENGTH = 8
"""The fewest tokens per sequence a setting may ask for (room for the specials and some text)."""

# name -> (num_hidden_layers, hidden_size); heads = hidden/64, intermediate = 4 * hidden.
Preset = Literal["tiny", "mini", "small", "medium", "base", "large"]
PRESETS: dict[Preset, tuple[int, int]] = {
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}


def typed_fields(cls: type, raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The entries of ``raw`` (a ``config.json``) that are fields of the dataclass ``cls``, each
    checked against the field's type in strict mode (``bertkit.utils.schema.parse``).

    Raises:
        ValueError: ``where: FIELD: expected TYPE, got VALUE``.
    """
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: parse(hints[k], v, f"{where}: {k}") for k, v in raw.items() if k in names}


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable`` of ``/proc/meminfo``, else
    the physical memory by ``os.sysconf``); None where neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_memory(config: BertConfig) -> None:
    """Refuse a config whose float32 weights alone (``parameter_count`` x 4 bytes) exceed the
    memory available now, before anything is allocated.

    Raises:
        ValueError: names the sizes and both amounts.
    """
    needed, available = 4 * config.parameter_count(), available_memory()
    if available is not None and needed > available:
        raise ValueError(
            f"vocab_size {config.vocab_size}, hidden_size {config.hidden_size}, num_hidden_layers "
            f"{config.num_hidden_layers}, intermediate_size {config.intermediate_size}: the weights alone take "
            f"{needed / 1e9:.1f} GB in float32, more than the {available / 1e9:.1f} GB of memory available"
        )


@dataclass
class BertConfig:
    """Hyper-parameters of a BERT encoder (field names and defaults as Hugging Face ``BertConfig``).

    Args:
        vocab_size: WordPiece vocabulary size.
        hidden_size: width H of every hidden state.
        num_hidden_layers: number L of transformer blocks.
        num_attention_heads: number A of attention heads; must divide ``hidden_size``.
        intermediate_size: width of the feed-forward layer (4H in BERT).
        hidden_act: feed-forward activation; ``gelu`` (erf form) as in google-research/bert.
        hidden_dropout_prob: dropout on embeddings and every sub-layer output.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: number of learned positions (512 in BERT).
        type_vocab_size: number of segment (token type) embeddings (2: A and B).
        initializer_range: std of the truncated-normal initialiser for fresh weights.
        layer_norm_eps: LayerNorm epsilon.
        pad_token_id: id of ``[PAD]``.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    prediction_transform_in_encoder: ClassVar[bool] = False
    """True where the encoder's ``last_hidden_state`` has passed a prediction transform already
    (ModernBERT's ``head``: dense, activation, norm): a masked-LM head then adds only its decoder."""

    def __post_init__(self) -> None:
        sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        for name in (*sizes, "max_position_embeddings", "type_vocab_size"):
            check_int(getattr(self, name), name, 1)
        check_int(self.pad_token_id, "pad_token_id", 0, self.vocab_size - 1)  # an embedding row
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            check_float32(getattr(self, name), name, low=0.0, high=1.0, high_open=True)
        check_float32(self.layer_norm_eps, "layer_norm_eps", low=0.0, low_open=True)
        check_float32(self.initializer_range, "initializer_range", low=0.0)
        check_memory(self)
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in ("gelu", "gelu_new", "relu"):
            raise ValueError(f"hidden_act {self.hidden_act!r}: expected gelu, gelu_new or relu")

    def parameter_count(self) -> int:
        """The encoder's parameters as this config sizes them: embeddings (word, position,
        segment, LayerNorm), per block the attention's four H x H products, the feed-forward's
        two H x I products and two LayerNorms, and the pooler (Devlin et al. 2019 §3; 109.5 M
        for BERT-base). A family with other blocks differs by a few per cent; the figure is for
        refusing sizes that cannot fit (``check_memory``), not for reporting."""
        h, i = self.hidden_size, self.intermediate_size
        embeddings = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size + 2) * h
        block = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
        return embeddings + self.num_hidden_layers * block + h * h + h

    @classmethod
    def preset(cls, name: Preset, **overrides: Any) -> BertConfig:
        """Config of a standard size: one of ``tiny mini small medium base large``.

        Raises:
            ValueError: unknown preset name.
        """
        check_choice("preset", name, Preset)
        layers, hidden = PRESETS[name]
        sizes = dict(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=hidden // 64,
            intermediate_size=4 * hidden,
        )
        return cls(**{**sizes, **overrides})

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> BertConfig:
        """Read ``config.json`` of a Hugging Face format model directory.

        Keys that are not ``BertConfig`` fields (``architectures``, ``model_type`` …) are ignored.

        Raises:
            FileNotFoundError: no ``config.json`` in ``directory``.
            ValueError: the file is not valid JSON, a field's value is not of the field's type
                (``"hidden_size": "384"``, ``true`` for a number: never converted), or uses a
                position embedding type other than ``absolute``.
        """
        path = Path(directory) / "config.json"
        raw = read_json(path, "no config.json in the model directory")
        kind = raw.get("position_embedding_type", "absolute")
        if kind != "absolute":
            raise ValueError(f"{path}: position_embedding_type {kind!r} is not supported (absolute only)")
        try:
            return cls(**typed_fields(cls, raw, str(path)))
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None

    @property
    def max_length(self) -> int:
        """Most tokens per sequence: ``max_position_embeddings`` (a family whose positions start
        later, as RoBERTa's after the padding id, allows fewer)."""
        return self.max_position_embeddings

    @property
    def embedding_width(self) -> int:
        """Width E of the embeddings (``hidden_size`` in BERT; ELECTRA may make it smaller)."""
        return self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        """Plain dict, as written to ``config.json`` (with ``model_type: bert``)."""
        return {"model_type": "bert", "architectures": ["BertModel"], **dataclasses.asdict(self)}
