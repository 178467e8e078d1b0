"""Built-in plugin: extractive question answering (SQuAD v1.1 and v2.0 span start/end)."""

from collections.abc import Callable

from bertkit_plugins.question_answering.head import QuestionAnsweringHead

import bertkit

__all__ = ["QuestionAnsweringHead"]


@bertkit.hookimpl
def register_heads(register: Callable) -> None:
    register(QuestionAnsweringHead)
