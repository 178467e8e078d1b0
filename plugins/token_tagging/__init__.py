"""Built-in plugin: named-entity recognition, as token classification (with an optional CRF) or
as span classification (nested entities)."""

from collections.abc import Callable

from bertkit.api.task import PluginExports, hookimpl

exports = PluginExports(
    __name__,
    {
        ".task": ["TokenClassification", "TokenTaggingHead"],
        ".head": ["TokenClassificationHead"],
        ".span": ["SpanClassification", "SpanHead"],
        ".span_head": ["SpanClassificationHead"],
    },
)
__all__, __getattr__ = exports.names, exports.getattr
# deprecated: release 0.1's names of the tasks
register_tasks = exports.tasks("TokenClassification", "SpanClassification", deprecated=("TokenTaggingHead", "SpanHead"))


@hookimpl
def register_commands(register: Callable) -> None:
    register("augment", "bertkit_plugins.token_tagging.augment:augment")
