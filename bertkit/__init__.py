"""bertkit: a plugin-based, notebook-friendly BERT framework on PyTorch Lightning.

The public names below are imported on first use (PEP 562), so ``import bertkit`` (which every
plugin does for ``bertkit.hookimpl``) and ``bertkit --help`` do not pay for torch and Lightning.
"""

from __future__ import annotations

import warnings
from importlib import import_module
from typing import TYPE_CHECKING, Any

from bertkit.hookspecs import hookimpl
from bertkit.utils.moved import install

install()  # release 0.1's module paths (bertkit.heads …) import, with a BertkitDeprecationWarning
# torchmetrics' text metrics import transformers, which imports tqdm.auto: in a notebook kernel
# without ipywidgets that warns once, about a progress bar bertkit never draws.
warnings.filterwarnings("ignore", message="IProgress not found")

if TYPE_CHECKING:
    from bertkit.cli.recipe import Composed, compose
    from bertkit.data.datamodule import BertDataModule, TaskData
    from bertkit.inference.layers import Int8, Prepacked
    from bertkit.inference.predictor import Predictor
    from bertkit.model.bert import BertModel, EncoderOutput, token_features
    from bertkit.model.config import BertConfig
    from bertkit.model.tokenizer import BertTokenizer
    from bertkit.tasks.legacy import Head
    from bertkit.tasks.task import Batch, Feature, Task, by_example
    from bertkit.training.callbacks import ExportPretrained, PredictionWriter
    from bertkit.training.distillation import Distillation
    from bertkit.training.module import BertModule

__version__ = "0.2.0.dev0"

# public name -> the module that defines it
_HOME = {
    "Batch": "tasks.task",
    "BertConfig": "model.config",
    "BertDataModule": "data.datamodule",
    "BertModel": "model.bert",
    "BertModule": "training.module",
    "BertTokenizer": "model.tokenizer",
    "Composed": "cli.recipe",
    "Distillation": "training.distillation",
    "EncoderOutput": "model.bert",
    "ExportPretrained": "training.callbacks",
    "Feature": "tasks.task",
    "Head": "tasks.legacy",
    "Int8": "inference.layers",
    "PredictionWriter": "training.callbacks",
    "Prepacked": "inference.layers",
    "Predictor": "inference.predictor",
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
    "BertModel",
    "BertModule",
    "BertTokenizer",
    "Composed",
    "Distillation",
    "EncoderOutput",
    "ExportPretrained",
    "Feature",
    "Head",
    "Int8",
    "PredictionWriter",
    "Predictor",
    "Prepacked",
    "Task",
    "TaskData",
    "by_example",
    "compose",
    "hookimpl",
    "token_features",
]


# Release 0.1's names here of renamed classes (old -> new name here); a task class that a plugin
# registers now under a deprecated name (release 0.1 exported one here) resolves by that name.
_RENAMED = {"BertEncoder": "BertModel"}


def __getattr__(name: str) -> Any:
    if name[:1].isupper() and name not in _HOME and name not in _RENAMED:
        from bertkit.plugins import deprecated_names, registered_tasks

        if name in deprecated_names("register_tasks"):
            from bertkit.utils.deprecation import warn_deprecated

            warn_deprecated(f"bertkit.{name}: name the task in a recipe, or import it from its plugin")
            return registered_tasks()[name]
    if name in _RENAMED:
        from bertkit.utils.deprecation import warn_deprecated

        warn_deprecated(f"bertkit.{name} is release 0.1's name of bertkit.{_RENAMED[name]}")
        return __getattr__(_RENAMED[name])
    if name not in _HOME:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    value = getattr(import_module(f"bertkit.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
