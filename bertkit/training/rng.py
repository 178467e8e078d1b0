"""The states of every random number generator a training step draws from (Python's ``random``,
NumPy's global generator, torch on the CPU and on CUDA), as values ``torch.load(weights_only=True)``
reads: tensors, ints, floats, strings and lists of them."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def rng_states() -> dict[str, Any]:
    """The current states (see the module docstring)."""
    version, state, gauss = random.getstate()
    name, keys, position, has_gauss, cached = np.random.get_state()
    states: dict[str, Any] = {
        "python": [version, list(state), gauss],
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what ``rng_states`` returned (a CUDA state only where CUDA is in use)."""
    version, state, gauss = states["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, position, has_gauss, cached = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
