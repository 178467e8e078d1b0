"""Built-in plugin: extractive question answering (SQuAD v1.1 and v2.0 span start/end)."""

from collections.abc import Callable

import bertkit
from bertkit.plugins import lazy_exports

EXPORTS = {
    "QuestionAnsweringHead": "bertkit_plugins.question_answering.head:QuestionAnsweringHead",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@bertkit.hookimpl
def register_heads(register: Callable) -> None:
    register(EXPORTS["QuestionAnsweringHead"])
