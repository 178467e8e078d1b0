"""Linear layers with their weights pre-packed for oneDNN, for float32 inference on the CPU.

``F.linear`` hands its weight to the BLAS in plain row-major layout on every call; oneDNN's
inner-product primitive wants it in a blocked layout of its own, so reordering the weight once
(``torch.ops.mkldnn._reorder_linear_weight``, what ``torch.compile``'s CPU freezing pass does)
saves that work on every later call. The arithmetic stays float32: outputs match ``nn.Linear``'s
to float32 rounding (the sums are grouped differently). Measured on MiniLM on a 2-core CPU
(``benchmarks/inference_vs_transformers.py``): most at batch 1, where the products are small and
the weights are read from memory for a handful of tokens.

Packing replaces modules in place and is undone exactly (``unprepack_linears``: the blocked weight
converts back to the same values), so a model can be packed for serving and unpacked to train.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

BATCH_HINT = 32
"""Rows per call the blocked layout is chosen for; any other count runs correctly."""


def prepacking_available() -> bool:
    """True where this torch has oneDNN (x86 and most ARM builds) and its packed linear ops."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


class PrepackedLinear(nn.Module):
    """``nn.Linear``'s forward on a weight pre-packed for oneDNN (see the module docstring).
    Inference only: it has no parameters and no gradient.

    Args:
        linear: the float32 CPU layer to pack (weight (out_features, in_features), bias).
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), BATCH_HINT)
        self._bias = linear.bias.detach() if linear.bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in_features) float32 -> (..., out_features) float32."""
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self._packed, self._bias, "none", [], "")

    def unpacked(self) -> nn.Linear:
        """The ``nn.Linear`` this layer was packed from (the same values)."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self._bias is not None, device="meta")
        with torch.inference_mode(False):  # normal tensors, trainable again, even when unpacked after predict
            linear.weight = nn.Parameter(self._packed.to_dense())
            if self._bias is not None:
                linear.bias = nn.Parameter(self._bias.clone())
        return linear

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed"


def replace_modules(module: nn.Module, match: Callable[[nn.Module], bool], convert: Callable[[Any], nn.Module]) -> int:
    """Replace every submodule of ``module`` for which ``match`` is True by ``convert(it)``, in
    place; returns how many were replaced. The layers inside an adapter's layer (peft's tuner
    layers, which have ``get_base_layer``: they read their base layer's ``weight`` themselves)
    are left as they are, and so is everything below them."""
    replaced = 0
    inside = {id(m) for layer in module.modules() if hasattr(layer, "get_base_layer") for m in layer.modules()}
    for parent in list(module.modules()):
        if id(parent) in inside:
            continue
        for name, child in parent.named_children():
            if match(child):
                setattr(parent, name, convert(child))
                replaced += 1
    return replaced


def prepack_linears(module: nn.Module) -> int:
    """Replace every float32 CPU ``nn.Linear`` inside ``module`` by a ``PrepackedLinear``, in place
    (nothing where ``prepacking_available()`` is False).

    Returns:
        How many layers were packed.
    """
    if not prepacking_available():
        return 0
    return replace_modules(
        module,
        lambda m: type(m) is nn.Linear and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32,
        PrepackedLinear,
    )


def unprepack_linears(module: nn.Module) -> int:
    """Undo ``prepack_linears``: every ``PrepackedLinear`` back to an ``nn.Linear`` with its values.

    Returns:
        How many layers were unpacked.
    """
    return replace_modules(module, lambda m: isinstance(m, PrepackedLinear), PrepackedLinear.unpacked)
