"""Optional dependencies (the extras): imported when a feature needs them, with an error that
names the module that really failed, not only the one asked for."""

from __future__ import annotations

import importlib
from importlib.util import find_spec
from types import ModuleType


def require_module(name: str, needed_for: str, install: str) -> ModuleType:
    """Import ``name`` for ``needed_for``.

    Raises:
        ImportError: one line naming what failed: ``name`` is not installed (``install`` says how
            to add it); it is installed but a module it imports is not (that module named: an
            extra installed with ``--no-deps`` lacks one); or its import raised (a
            ``RuntimeError`` of a torchvision built for another torch, say: its first line).
    """
    try:
        return importlib.import_module(name)
    except ImportError as err:
        missing = err.name or ""
        top = name.partition(".")[0]
        if missing in ("", name, top) or name.startswith(missing + ".") or find_spec(top) is None:
            raise ImportError(f"{needed_for} needs {name}, which is not installed: {install}") from None
        raise ImportError(
            f"{needed_for} needs {name}, which is installed, but the module {missing!r} it imports is not "
            f"(pip install {missing.partition('.')[0]}, or reinstall with its dependencies: {install})"
        ) from None
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0]
        raise ImportError(
            f"{needed_for} needs {name}, which is installed but fails to import ({type(err).__name__}: {first})"
            f"{broken_torchvision_hint(err)}"
        ) from None


def broken_torchvision_hint(err: BaseException) -> str:
    """What to do when an import failed inside torchvision (PyPI's build for CUDA torch beside a
    CPU torch: ``operator torchvision::nms does not exist``): empty for other errors."""
    if "torchvision" not in str(err):
        return ""
    return (
        "; the installed torchvision does not match this torch build (PyPI's is built for CUDA torch): bertkit "
        "does not need it, so `pip uninstall -y torchvision`, or install the torchvision built for your torch"
    )
