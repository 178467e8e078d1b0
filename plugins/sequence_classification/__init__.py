"""Built-in plugin: sequence classification and regression on single texts and text pairs."""

from collections.abc import Callable

from bertkit.api import hookimpl, lazy_exports

EXPORTS = {
    "SequenceClassification": "bertkit_plugins.sequence_classification.task:SequenceClassification",
    "PooledClassificationHead": "bertkit_plugins.sequence_classification.head:PooledClassificationHead",
    "SequenceClassificationHead": "bertkit_plugins.sequence_classification.task:SequenceClassificationHead",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@hookimpl
def register_tasks(register: Callable) -> None:
    register(EXPORTS["SequenceClassification"])
    register(EXPORTS["SequenceClassificationHead"], deprecated=True)  # release 0.1's name
