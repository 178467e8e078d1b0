"""bertkit: a plugin-based, notebook-friendly BERT framework on PyTorch Lightning.

The public names below are imported on first use (PEP 562), so ``import bertkit`` (which every
plugin does for ``bertkit.hookimpl``) and ``bertkit --help`` do not pay for torch and Lightning.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from bertkit.hookspecs import hookimpl
from bertkit.utils.moved import install

install()  # release 0.1's module paths (bertkit.heads …) import, with a DeprecationWarning

if TYPE_CHECKING:
    from bertkit.cli.recipe import Composed, compose
    from bertkit.data.datamodule import BertDataModule, TaskData
    from bertkit.model.bert import BertEncoder, EncoderOutput, token_features
    from bertkit.model.config import BertConfig
    from bertkit.model.tokenizer import BertTokenizer
    from bertkit.tasks.legacy import Head
    from bertkit.tasks.task import Batch, Feature, Task, by_example
    from bertkit.training.callbacks import ExportPretrained, PredictionWriter
    from bertkit.training.module import BertModule

__version__ = "0.1.0"

# public name -> the module that defines it
_HOME = {
    "Batch": "tasks.task",
    "BertConfig": "model.config",
    "BertDataModule": "data.datamodule",
    "BertEncoder": "model.bert",
    "BertModule": "training.module",
    "BertTokenizer": "model.tokenizer",
    "Composed": "cli.recipe",
    "EncoderOutput": "model.bert",
    "ExportPretrained": "training.callbacks",
    "Feature": "tasks.task",
    "Head": "tasks.legacy",
    "PredictionWriter": "training.callbacks",
    "Task": "tasks.task",
    "TaskData": "data.datamodule",
    "by_example": "tasks.task",
    "compose": "cli.recipe",
    "token_features": "model.bert",
}
__all__ = [
    "Batch",
    "BertConfig",
    "BertDataModule",
    "BertEncoder",
    "BertModule",
    "BertTokenizer",
    "Composed",
    "EncoderOutput",
    "ExportPretrained",
    "Feature",
    "Head",
    "PredictionWriter",
    "Task",
    "TaskData",
    "by_example",
    "compose",
    "hookimpl",
    "token_features",
]


# Release 0.1's names here of classes a plugin registers now (by their registered name).
_REGISTERED = {"MultiTaskHead"}


def __getattr__(name: str) -> Any:
    if name in _REGISTERED:
        import warnings

        from bertkit.plugins import registered_tasks

        warnings.warn(f"bertkit.{name} is deprecated: name it in a recipe, or import it from its plugin",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
        return registered_tasks()[name]
    if name not in _HOME:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    value = getattr(import_module(f"bertkit.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
