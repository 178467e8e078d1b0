"""``BertConfig``: the encoder's hyper-parameters, with Hugging Face ``BertConfig`` field names.

Presets follow the 24 compact BERT models of Turc et al. 2019 ("Well-Read Students Learn Better",
google-research/bert README) for tiny/mini/small/medium and Devlin et al. 2019 §3 for base/large.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from bertkit.utils.choices import check_choice
from bertkit.utils.io import read_json
from bertkit.utils.schema import parse

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
        small = next((n for n in (*sizes, "max_position_embeddings", "type_vocab_size") if getattr(self, n) < 1), None)
        if small:
            raise ValueError(f"{small} {getattr(self, small)}: must be at least 1")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in ("gelu", "gelu_new", "relu"):
            raise ValueError(f"hidden_act {self.hidden_act!r}: expected gelu, gelu_new or relu")

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
        return cls(**typed_fields(cls, raw, str(path)))

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
