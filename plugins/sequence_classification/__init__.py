"""Built-in plugin: sequence classification and regression on single texts and text pairs."""

from collections.abc import Callable

import bertkit
from bertkit.plugins import lazy_exports

EXPORTS = {
    "SequenceClassificationHead": "bertkit_plugins.sequence_classification.head:SequenceClassificationHead",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@bertkit.hookimpl
def register_heads(register: Callable) -> None:
    register(EXPORTS["SequenceClassificationHead"])
