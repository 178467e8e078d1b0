"""Whether a device computes in bfloat16 natively, which decides whether bf16 is worth running there."""

from __future__ import annotations

import torch


def native_bf16(device: torch.device | str) -> bool:
    """True where bf16 matrix products run on the hardware: a CUDA GPU of compute capability 8.0
    or later (``torch.cuda.is_bf16_supported``), or an x86 CPU with AVX512-BF16 or AMX (Intel
    Cooper Lake / Sapphire Rapids and later, AMD Zen 4 and later), where oneDNN's bf16 products
    outrun fp32 ones (``benchmarks/performance.py`` measures both rates). Elsewhere torch
    emulates bf16 through fp32, which is slower than fp32 itself."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if kind == "cpu":
        probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's x86 probes
        return any(getattr(torch.cpu, name, lambda: False)() for name in probes)
    return False
