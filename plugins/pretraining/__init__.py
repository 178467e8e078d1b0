"""Built-in plugin: BERT pre-training from raw text.

Google's data pipeline (``bertkit prepare``: corpus -> sentence-pair instances -> memory-mapped
shards), masking strategies (token, whole-word, n-gram; static or dynamic), the MLM head and the
MLM + NSP/SOP head, and WordPiece vocabulary training (``bertkit vocab``).
"""

from collections.abc import Callable

import bertkit
from bertkit.plugins import lazy_exports

EXPORTS = {
    "MaskedLMHead": "bertkit_plugins.pretraining.head:MaskedLMHead",
    "PreTrainingHead": "bertkit_plugins.pretraining.head:PreTrainingHead",
    "MaskingStrategy": "bertkit_plugins.pretraining.masking:MaskingStrategy",
    "TokenMasking": "bertkit_plugins.pretraining.masking:TokenMasking",
    "WholeWordMasking": "bertkit_plugins.pretraining.masking:WholeWordMasking",
    "NgramMasking": "bertkit_plugins.pretraining.masking:NgramMasking",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@bertkit.hookimpl
def register_heads(register: Callable) -> None:
    register(EXPORTS["MaskedLMHead"])
    register(EXPORTS["PreTrainingHead"])


@bertkit.hookimpl
def register_masking(register: Callable) -> None:
    for strategy in ("TokenMasking", "WholeWordMasking", "NgramMasking"):
        register(EXPORTS[strategy])


@bertkit.hookimpl
def register_commands(register: Callable) -> None:
    register("prepare", "bertkit_plugins.pretraining.prepare:prepare")
    register("vocab", "bertkit_plugins.pretraining.vocab:train_vocab")
