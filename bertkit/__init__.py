"""bertkit: a plugin-based, notebook-friendly BERT framework on PyTorch Lightning."""

from bertkit.hookspecs import hookimpl
from bertkit.config import BertConfig
from bertkit.model import BertEncoder, EncoderOutput, token_features
from bertkit.tokenizer import BertTokenizer
from bertkit.heads import Head
from bertkit.module import BertModule
from bertkit.data import BertDataModule
from bertkit.callbacks import PredictionWriter
from bertkit.recipe import Composed, compose


__version__ = "0.1.0"
__all__ = [
    "BertConfig",
    "BertDataModule",
    "BertEncoder",
    "BertModule",
    "BertTokenizer",
    "Composed",
    "EncoderOutput",
    "Head",
    "PredictionWriter",
    "compose",
    "hookimpl",
    "token_features",
]
