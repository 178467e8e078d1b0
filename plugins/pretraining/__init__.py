"""Built-in plugin: BERT pre-training from raw text.

Google's data pipeline (``bertkit prepare``: corpus -> sentence-pair instances -> memory-mapped
shards), masking strategies (token, whole-word, n-gram; static or dynamic), the masked-LM task and
the MLM + NSP/SOP task, and WordPiece vocabulary training (``bertkit vocab``). Other objectives on
raw text (ELECTRA's) build on ``CorpusTask`` and the masking strategies, exported here.
"""

from collections.abc import Callable

from bertkit.api.task import PluginExports, hookimpl

exports = PluginExports(
    __name__,
    {
        ".task": [
            "CorpusTask",
            "CorpusPreparation",
            "MaskedText",
            "MaskedLM",
            "PreTraining",
            "flat_preparation",
            "nest_preparation",
            "MaskedLMHead",
            "PreTrainingHead",
        ],
        ".head": ["MaskedLMPredictionHead", "PreTrainingHeads"],
        ".masking": ["MaskingStrategy", "TokenMasking", "WholeWordMasking", "NgramMasking"],
    },
)
__all__, __getattr__ = exports.names, exports.getattr
# deprecated: release 0.1's names of the tasks
register_tasks = exports.tasks("MaskedLM", "PreTraining", deprecated=("MaskedLMHead", "PreTrainingHead"))
register_masking = exports.masking("TokenMasking", "WholeWordMasking", "NgramMasking")


@hookimpl
def register_commands(register: Callable) -> None:
    register("prepare", "bertkit_plugins.pretraining.prepare:prepare")
    register("vocab", "bertkit_plugins.pretraining.vocab:train_vocab")
