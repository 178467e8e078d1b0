"""Built-in plugin: sequence classification and regression on single texts and text pairs."""

from collections.abc import Callable

from bertkit_plugins.sequence_classification.head import SequenceClassificationHead

import bertkit

__all__ = ["SequenceClassificationHead"]


@bertkit.hookimpl
def register_heads(register: Callable) -> None:
    register(SequenceClassificationHead)
