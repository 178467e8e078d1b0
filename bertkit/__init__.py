"""bertkit: a plugin-based, notebook-friendly BERT framework on PyTorch Lightning."""

from bertkit.callbacks import ExportPretrained, PredictionWriter
from bertkit.config import BertConfig
from bertkit.data import BertDataModule
from bertkit.heads import Batch, Feature, Head, by_example
from bertkit.hookspecs import hookimpl
from bertkit.model import BertEncoder, EncoderOutput, token_features
from bertkit.module import BertModule
from bertkit.multitask import MultiTaskHead, TaskData
from bertkit.recipe import Composed, compose
from bertkit.tokenizer import BertTokenizer

__version__ = "0.1.0"
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
