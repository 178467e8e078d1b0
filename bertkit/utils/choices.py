"""Settings with a fixed set of values are ``Literal`` types: LightningCLI (jsonargparse) checks
them when a recipe is read and ``--help`` lists them; ``check_choice`` gives Python callers
(notebooks, which no parser checks) the same one-line error, and ``check_int`` the bounds of a
size or index."""

from __future__ import annotations

from typing import Any, Literal, get_args

Features = Literal["last", "second_to_last", "sum_last_four", "concat_last_four"]
"""Which hidden states make a token's features (BERT, Devlin et al. 2019, §5.3 and Table 7)."""

Pooling = Literal["mean", "cls", "tokens"]
"""Per line: the mean over its tokens, the [CLS] vector, or every token's vector."""

Pruner = Literal["median", "successive_halving", "none"]
"""How ``bertkit tune`` stops unpromising trials early (Optuna's MedianPruner or
SuccessiveHalvingPruner), or never."""

Backend = Literal["torch", "onnx", "onnx-int8"]
"""What computes a served model's logits: the torch model, or onnxruntime on an export's
``model.onnx`` / ``model.int8.onnx`` (``bertkit export``)."""

Precision = Literal["fp32", "bf16", "int8"]
"""What a served torch model computes in: float32 as trained, bfloat16 (``Predictor.to_bfloat16``)
or int8 linear layers (``Predictor.to_int8``)."""


def check_choice(field: str, value: Any, kind: Any) -> None:
    """Check that ``value`` is one of the ``Literal`` type ``kind``'s values.

    Raises:
        ValueError: it is not; the message names ``field`` and lists the values.
    """
    allowed = get_args(kind)
    if value not in allowed:
        raise ValueError(f"{field}={value!r}: expected one of {', '.join(map(str, allowed))}")


def check_int(value: Any, where: str, low: int, high: int | None = None) -> int:
    """Check that a size or index setting is an integer in ``[low, high]`` (``high`` None: no
    upper bound), before anything is allocated or divided by it.

    Raises:
        ValueError: it is not an integer (a bool is not one) or lies outside the range; the
            message names ``where``, the value and the range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}={value!r}: expected an integer")
    if value < low or (high is not None and value > high):
        expected = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{where}={value}: expected an integer {expected}")
    return value
