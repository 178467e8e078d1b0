"""What every result file states about where it came from: the benchmark, the command that wrote
it, the commit measured (taken before the run), the date and the machine."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The commit measured: ``$BERTKIT_BENCH_COMMIT`` where whoever sent a copy of the tree set it
    (``benchmarks/gpu_check.sh`` on a GPU machine, whose copy may carry a stale history), else
    ``git describe --always --dirty`` of the repository, else "not a git checkout". Call it before
    measuring."""
    if sent := os.environ.get("BERTKIT_BENCH_COMMIT"):
        return sent
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    return out.stdout.strip()


REQUIRED = ("command", "commit", "date", "machine", "repeats")
"""What every result file states (``docs/gen_results.py --check`` refuses a file without one)."""


def missing(result: dict[str, Any]) -> list[str]:
    """The ``REQUIRED`` keys a result does not state."""
    return [key for key in REQUIRED if result.get(key) in (None, "", {})]


def completed(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with what it leaves out of ``REQUIRED`` filled in at writing: the command as run,
    the commit checked out now (a benchmark that measures takes it before its run and states it),
    today's date, this machine, and ``repeats``: the number of ``seeds`` when it lists them, else 1
    (one run; repetitions inside a timing are in its settings)."""
    filled = dict(result)
    filled.setdefault("command", " ".join(["python", *sys.argv]))
    filled.setdefault("commit", commit())
    filled.setdefault("date", time.strftime("%Y-%m-%d"))
    filled.setdefault("machine", header("", "", "")["machine"])
    seeds = result.get("seeds") or (result.get("settings") or {}).get("seeds")
    filled.setdefault("repeats", len(seeds) if isinstance(seeds, list) else 1)
    return filled


def started(script: str) -> dict[str, str]:
    """``command`` (the script and its arguments as given), ``commit`` and ``date`` of a run,
    taken when it starts."""
    return {
        "command": " ".join([f"python benchmarks/{script}", *sys.argv[1:]]),
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
    }


def gpu_name() -> str | None:
    """The first CUDA device's name where torch is imported and sees one, else None (a CPU run)."""
    torch = sys.modules.get("torch")
    return torch.cuda.get_device_name() if torch is not None and torch.cuda.is_available() else None


def header(benchmark: str, command: str, measured: str, repeats: int = 1, **machine: Any) -> dict[str, Any]:
    """The first keys of a result file; ``repeats``: runs of the whole measurement (seeds);
    ``machine`` adds to (or replaces) the CPU threads, GPU, torch and Python versions."""
    return {
        "benchmark": benchmark,
        "command": command,
        "commit": measured,
        "date": time.strftime("%Y-%m-%d"),
        "repeats": repeats,
        "machine": {
            "cpu_threads": os.cpu_count(),
            "gpu": gpu_name(),
            "torch": version("torch"),
            "python": platform.python_version(),
            **machine,
        },
    }
