"""Settings with a fixed set of values are ``Literal`` types: LightningCLI (jsonargparse) checks
them when a recipe is read and ``--help`` lists them; ``check`` gives Python callers (notebooks,
which no parser checks) the same one-line error."""

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
