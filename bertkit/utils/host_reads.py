"""Which code reads tensor values on the host: a debugging aid for host-bound GPU steps, usable
on any device. Each read (``Tensor.item``, ``tolist``, ``cpu``, ``numpy``, ``bool``/``float``/
``int`` of a tensor) makes the host wait for the device to finish the queued kernels, so a
training step that reads once stalls the GPU once. ``torch.cuda.set_sync_debug_mode`` reports
such reads on CUDA only; ``counted_reads`` counts them on the CPU as well, by the function that
made them, so that a test or a benchmark can find them without a GPU.

    with counted_reads() as reads:
        trainer.fit(model, datamodule=data)
    print(reads.most_common())   # {"head.py:compacted_positions (__int__)": 8, …}
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__")
"""The ``torch.Tensor`` methods that read a value on the host."""
LOADER = " [loader]"
"""Marks a read made while a data loader collates (host tensors: no device to wait for)."""


def read_site(depth: int = 2) -> str:
    """``file:function`` of the first caller outside torch (and outside this module) ``depth``
    frames up, with ``LOADER`` after it when a data loader's fetch made the call."""
    frame = sys._getframe(depth)
    while frame is not None and ("/torch/" in frame.f_code.co_filename or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    site = "?" if frame is None else f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"
    while frame is not None and "/torch/utils/data/" not in frame.f_code.co_filename:
        frame = frame.f_back
    return site if frame is None else site + LOADER


@contextmanager
def counted_reads(active: Callable[[], bool] = lambda: True) -> Iterator[Counter]:
    """Count the host reads of tensors made while the block runs and ``active()`` says so, by
    ``"<file>:<function> (<method>)"`` (``read_site``); ``Tensor`` methods are patched for the
    block's duration (one process; not thread-safe)."""
    counts: Counter = Counter()
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def wrap(name: str, method: Callable) -> Callable:
        def counting(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if active():
                counts[f"{read_site()} ({name})"] += 1
            return method(self, *args, **kwargs)

        return counting

    for name, method in originals.items():
        setattr(torch.Tensor, name, wrap(name, method))
    try:
        yield counts
    finally:
        for name, method in originals.items():
            setattr(torch.Tensor, name, method)


def device_reads(counts: Counter) -> int:
    """The reads in ``counts`` that wait for a device: those not made in a loader's collation."""
    return sum(n for site, n in counts.items() if LOADER not in site)
