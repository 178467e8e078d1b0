"""Built-in plugin: extractive question answering (SQuAD v1.1 and v2.0)."""

from collections.abc import Callable

from bertkit.api import hookimpl, lazy_exports

EXPORTS = {
    "QuestionAnswering": "bertkit_plugins.question_answering.task:QuestionAnswering",
    "AnswerSpanHead": "bertkit_plugins.question_answering.head:AnswerSpanHead",
    "QuestionAnsweringHead": "bertkit_plugins.question_answering.task:QuestionAnsweringHead",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@hookimpl
def register_tasks(register: Callable) -> None:
    register(EXPORTS["QuestionAnswering"])
    register(EXPORTS["QuestionAnsweringHead"], deprecated=True)  # release 0.1's name
