"""Module paths and names of release 0.1, importable for one more release with a
``BertkitDeprecationWarning`` naming the new ones (``bertkit.utils.deprecation``): ``from bertkit.heads import Head`` still works.
``install`` adds the finder (``bertkit/__init__.py`` does); a package that took the name of a
former module (``bertkit.model``, ``bertkit.data``, ``bertkit.inference``) forwards that module's
names with ``forwarding``; a module whose classes were renamed gives their old names with
``renamed``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

from bertkit.utils.deprecation import warn_deprecated

MOVED = {
    f"bertkit.{old}": f"bertkit.{new}"
    for old, new in {
        "callbacks": "training.callbacks",
        "checkpoints": "training.checkpoints",
        "choices": "utils.choices",
        "config": "model.config",
        "console": "cli.console",
        "dropout": "model.dropout",
        "embed": "inference.embeddings",
        "encoders": "model.families",
        "export": "inference.onnx",
        "guide": "cli.guide",
        "heads": "tasks.head",
        "hf_datasets": "data.hf_datasets",
        "io": "utils.io",
        "lightning_cli": "cli.lightning",
        "module": "training.module",
        "packed": "model.prepacked",
        "plots": "training.plots",
        "precision": "utils.precision",
        "pretrained": "model.pretrained",
        "progress": "training.progress",
        "quantize": "model.quantize",
        "recipe": "cli.recipe",
        "rng": "training.rng",
        "run_folder": "training.run_folder",
        "samplers": "data.samplers",
        "samples": "data.samples",
        "serve": "commands.serving",
        "summary": "training.summary",
        "tokenizer": "model.tokenizer",
        "tune": "commands.tuning",
        "unpad": "model.unpadded",
        "weights": "model.weights",
        "windows": "data.windows",
    }.items()
}
"""Release 0.1's module path -> the module that holds its names now."""


def _warn(message: str) -> None:
    warn_deprecated(f"{message}: release 0.1's name", stacklevel=3)


class _Forward(Loader):
    """Makes the old module a stand-in whose every attribute is the new module's."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        _warn(f"{module.__name__}: its names moved to {self.target}")
        target = importlib.import_module(self.target)
        module.__getattr__ = lambda name: getattr(target, name)  # type: ignore[method-assign]
        module.__dir__ = lambda: dir(target)  # type: ignore[method-assign]


class _Finder(MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        new = MOVED.get(fullname)
        return None if new is None else ModuleSpec(fullname, _Forward(new))


def install() -> None:
    """Let release 0.1's module paths be imported (once per process)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())


def forwarding(package: str, *modules: str) -> Callable[[str], Any]:
    """A package ``__getattr__`` (PEP 562) giving the names of ``modules`` (the first that has
    one), with a warning: the names the former module ``package`` had, now that ``package`` is a
    package."""

    def __getattr__(name: str) -> Any:
        for module in modules:
            target = importlib.import_module(module)
            if not name.startswith("__") and hasattr(target, name):
                _warn(f"{package}.{name}: it moved to {module}.{name}")
                return getattr(target, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def renamed(module: str, names: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) giving release 0.1's ``names`` (old -> new name in
    ``namespace``, the module's globals) with a warning: ``from bertkit.model.bert import
    BertEncoder`` gives ``BertModel``."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        _warn(f"{module}.{name}: it is {module}.{names[name]} now")
        return namespace[names[name]]

    return __getattr__
