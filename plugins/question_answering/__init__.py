"""Built-in plugin: extractive question answering (SQuAD v1.1 and v2.0)."""

from bertkit.api.task import PluginExports

exports = PluginExports(
    __name__, {".task": ["QuestionAnswering", "QuestionAnsweringHead"], ".head": ["AnswerSpanHead"]}
)
__all__, __getattr__ = exports.names, exports.getattr
# deprecated: release 0.1's names of the tasks
register_tasks = exports.tasks("QuestionAnswering", deprecated=("QuestionAnsweringHead",))
