"""Precision: whether a device computes in bfloat16 natively (which decides whether bf16 is worth
running there), and settings and tensors checked in the precision they are used in."""

from __future__ import annotations

import math

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


FLOAT32 = torch.finfo(torch.float32)
SMALLEST_FLOAT32 = 2.0**-149
"""The smallest positive float32 (a subnormal): a smaller magnitude rounds to 0 in float32."""


def check_float32(
    value: float,
    where: str,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as float32 arithmetic will use it (a setting multiplied into float32 tensors: a
    learning rate, a loss weight, a temperature), checked in that precision: Python reads it as a
    float64, in which ``1e-320`` is not 0 and ``1e308`` is finite, but in float32 the first rounds
    to 0 and the second to infinity.

    Args:
        value: the setting as given.
        where: the setting's name in messages (``model.task.class_weights[2]``).
        low, high: the range it must lie in (None: unbounded on that side); ``low_open`` and
            ``high_open`` leave the bound itself out.

    Returns:
        ``value`` as a Python float (unchanged).

    Raises:
        ValueError: it is not a number, not finite in float32 (NaN, infinite, or beyond
            ±3.4e38), not 0 but rounds to 0 in float32 (magnitude below 1.4e-45), or outside the
            range; the message names ``where``, the value and what is expected.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}={value!r}: expected a number")
    number = float(value)
    span = _span(low, high, low_open, high_open)
    if not math.isfinite(number) or abs(number) > FLOAT32.max:
        raise ValueError(f"{where}={value!r}: not a finite float32 number (|x| <= {FLOAT32.max:.3g}); expected {span}")
    if number != 0.0 and abs(number) < SMALLEST_FLOAT32 / 2:  # rounds to 0 (round half to even at the limit)
        raise ValueError(
            f"{where}={value!r}: rounds to 0 in float32, in which bertkit computes (the smallest positive float32 "
            f"is {SMALLEST_FLOAT32:.3g}); expected {span}"
        )
    below = low is not None and (number <= low if low_open else number < low)
    above = high is not None and (number >= high if high_open else number > high)
    if below or above:
        raise ValueError(f"{where}={value!r}: expected {span}")
    return number


def _span(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is None and high is None:
        return "a finite number"
    if high is None:
        return f"a number {'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"a number {'<' if high_open else '<='} {high:g}"
    return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def check_finite_tensors(tensors: dict[str, torch.Tensor], dtype: torch.dtype, where: str) -> None:
    """Check that each floating-point tensor stays finite once cast to ``dtype`` (what a model
    computes in): a float64 file holding ``1e300`` becomes infinity in float32.

    Raises:
        ValueError: names ``where``, the first tensors that are not finite in ``dtype`` and their
            largest magnitude.
    """
    bad = []
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor.to(dtype)).all()):
            finite = tensor[torch.isfinite(tensor)]
            largest = f"{float(finite.abs().max()):.3g}" if finite.numel() else "none finite"
            bad.append(f"{name} (largest finite magnitude {largest})")
    if bad:
        raise ValueError(
            f"{where}: tensors that are not finite in {str(dtype).removeprefix('torch.')} (NaN, infinite, or beyond "
            f"±{torch.finfo(dtype).max:.3g}): {', '.join(bad[:4])}{' …' if len(bad) > 4 else ''}"
        )
