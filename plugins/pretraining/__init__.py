"""Built-in plugin: BERT pre-training from raw text.

Google's data pipeline (``bertkit prepare``: corpus -> sentence-pair instances -> memory-mapped
shards), masking strategies (token, whole-word, n-gram; static or dynamic), the MLM head and the
MLM + NSP/SOP head, and WordPiece vocabulary training (``bertkit vocab``).
"""

from collections.abc import Callable

from bertkit_plugins.pretraining.head import MaskedLMHead, PreTrainingHead
from bertkit_plugins.pretraining.masking import (
    MaskingStrategy,
    NgramMasking,
    TokenMasking,
    WholeWordMasking,
)
from bertkit_plugins.pretraining.prepare import prepare
from bertkit_plugins.pretraining.vocab import train_vocab

import bertkit

__all__ = ["MaskedLMHead", "MaskingStrategy", "NgramMasking", "PreTrainingHead", "TokenMasking", "WholeWordMasking"]


@bertkit.hookimpl
def register_heads(register: Callable) -> None:
    register(MaskedLMHead)
    register(PreTrainingHead)


@bertkit.hookimpl
def register_masking(register: Callable) -> None:
    for strategy in (TokenMasking, WholeWordMasking, NgramMasking):
        register(strategy)


@bertkit.hookimpl
def register_commands(register: Callable) -> None:
    register("prepare", prepare)
    register("vocab", train_vocab)
