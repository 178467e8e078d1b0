"""Dynamic int8 quantization of an encoder's linear layers for CPU inference.

Weights are quantized once, symmetrically per output channel (scale = max |w| / 127); each call
quantizes its input to uint8 over the input's own range (one scale and zero point per call) and
multiplies in int8 with int32 accumulation, then rescales to float32 and adds the bias: dynamic
quantization (Jacob et al. 2018, "Quantization and Training of Neural Networks for Efficient
Integer-Arithmetic-Only Inference"; the scheme of torch's and ONNX Runtime's dynamic
quantization). The products run in torch's ``quantized::linear_dynamic`` (FBGEMM or oneDNN), which
exists on the CPU only; torch has announced that its quantized tensor types will go in a release
after those bertkit supports (``torch<2.14``). Embeddings, LayerNorm, attention and the head stay in float32.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from bertkit.model.prepacked import replace_modules


def _needs_reduced_range() -> bool:
    """True on an x86 CPU without VNNI: FBGEMM then sums pairs of uint8 x int8 products in 16
    bits, which can saturate with full 8-bit inputs, so inputs use 7 bits (torch's own default
    for dynamic quantization). With VNNI the products accumulate in 32 bits."""
    return not torch.cpu._is_vnni_supported()


class Int8Linear(nn.Module):
    """``nn.Linear``'s forward with int8 weights and per-call int8 inputs (see the module
    docstring). Inference only: it has no parameters and no gradient.

    Args:
        linear: the float layer to quantize (its weight (out_features, in_features), its bias).
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float().cpu()
        scales = (weight.abs().amax(dim=1).clamp_min(1e-12) / 127).double()
        zero_points = torch.zeros(len(scales), dtype=torch.long)
        with warnings.catch_warnings():  # torch announces the quantized dtypes' removal after the torch bertkit pins
            warnings.filterwarnings("ignore", message=".*quantized tensor creation functions", category=UserWarning)
            qweight = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
        bias = linear.bias.detach().float().cpu() if linear.bias is not None else None
        self._packed = torch.ops.quantized.linear_prepack(qweight, bias)
        self._reduce_range = _needs_reduced_range()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in_features) float32 -> (..., out_features) float32."""
        return torch.ops.quantized.linear_dynamic(x, self._packed, reduce_range=self._reduce_range)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize_linears(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` inside ``module`` by an ``Int8Linear``, in place.

    Returns:
        How many layers were replaced.

    Raises:
        ValueError: a parameter of ``module`` is not on the CPU (the int8 kernels are CPU-only).
    """
    devices = {p.device.type for p in module.parameters()}
    if devices - {"cpu"}:
        raise ValueError(f"int8 runs on the CPU (torch's quantized kernels); the model is on {', '.join(devices)}")
    return replace_modules(module, lambda m: type(m) is nn.Linear, Int8Linear)
