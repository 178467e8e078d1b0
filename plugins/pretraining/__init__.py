"""Built-in plugin: BERT pre-training from raw text.

Google's data pipeline (``bertkit prepare``: corpus -> sentence-pair instances -> memory-mapped
shards), masking strategies (token, whole-word, n-gram; static or dynamic), the masked-LM task and
the MLM + NSP/SOP task, and WordPiece vocabulary training (``bertkit vocab``). Other objectives on
raw text (ELECTRA's) build on ``CorpusTask`` and the masking strategies, exported here.
"""

from collections.abc import Callable

from bertkit.api import hookimpl, lazy_exports

EXPORTS = {
    "CorpusTask": "bertkit_plugins.pretraining.task:CorpusTask",
    "CorpusPreparation": "bertkit_plugins.pretraining.task:CorpusPreparation",
    "MaskedText": "bertkit_plugins.pretraining.task:MaskedText",
    "MaskedLM": "bertkit_plugins.pretraining.task:MaskedLM",
    "PreTraining": "bertkit_plugins.pretraining.task:PreTraining",
    "MaskedLMPredictionHead": "bertkit_plugins.pretraining.head:MaskedLMPredictionHead",
    "PreTrainingHeads": "bertkit_plugins.pretraining.head:PreTrainingHeads",
    "MaskingStrategy": "bertkit_plugins.pretraining.masking:MaskingStrategy",
    "TokenMasking": "bertkit_plugins.pretraining.masking:TokenMasking",
    "WholeWordMasking": "bertkit_plugins.pretraining.masking:WholeWordMasking",
    "NgramMasking": "bertkit_plugins.pretraining.masking:NgramMasking",
    "flat_preparation": "bertkit_plugins.pretraining.task:flat_preparation",
    "nest_preparation": "bertkit_plugins.pretraining.task:nest_preparation",
    "MaskedLMHead": "bertkit_plugins.pretraining.task:MaskedLMHead",
    "PreTrainingHead": "bertkit_plugins.pretraining.task:PreTrainingHead",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@hookimpl
def register_tasks(register: Callable) -> None:
    register(EXPORTS["MaskedLM"])
    register(EXPORTS["PreTraining"])
    register(EXPORTS["MaskedLMHead"], deprecated=True)  # release 0.1's name
    register(EXPORTS["PreTrainingHead"], deprecated=True)


@hookimpl
def register_masking(register: Callable) -> None:
    for strategy in ("TokenMasking", "WholeWordMasking", "NgramMasking"):
        register(EXPORTS[strategy])


@hookimpl
def register_commands(register: Callable) -> None:
    register("prepare", "bertkit_plugins.pretraining.prepare:prepare")
    register("vocab", "bertkit_plugins.pretraining.vocab:train_vocab")
