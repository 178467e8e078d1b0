"""bertkit: a plugin-based, notebook-friendly BERT framework on PyTorch Lightning.

The public names below are imported on first use (PEP 562), so ``import bertkit`` (which every
plugin does for ``bertkit.hookimpl``) and ``bertkit --help`` do not pay for torch and Lightning.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from bertkit.hookspecs import hookimpl

if TYPE_CHECKING:
    from bertkit.callbacks import ExportPretrained, PredictionWriter
    from bertkit.config import BertConfig
    from bertkit.data import BertDataModule
    from bertkit.heads import Batch, Feature, Head, by_example
    from bertkit.model import BertEncoder, EncoderOutput, token_features
    from bertkit.module import BertModule
    from bertkit.multitask import MultiTaskHead, TaskData
    from bertkit.recipe import Composed, compose
    from bertkit.tokenizer import BertTokenizer

__version__ = "0.1.0"

# public name -> the module that defines it
_HOME = {
    "Batch": "heads",
    "BertConfig": "config",
    "BertDataModule": "data",
    "BertEncoder": "model",
    "BertModule": "module",
    "BertTokenizer": "tokenizer",
    "Composed": "recipe",
    "EncoderOutput": "model",
    "ExportPretrained": "callbacks",
    "Feature": "heads",
    "Head": "heads",
    "MultiTaskHead": "multitask",
    "PredictionWriter": "callbacks",
    "TaskData": "multitask",
    "by_example": "heads",
    "compose": "recipe",
    "token_features": "model",
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
    "MultiTaskHead",
    "PredictionWriter",
    "TaskData",
    "by_example",
    "compose",
    "hookimpl",
    "token_features",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    value = getattr(import_module(f"bertkit.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
