"""Built-in plugin: named-entity recognition, as token classification (with an optional CRF) or
as span classification (nested entities)."""

from collections.abc import Callable

from bertkit.api import hookimpl, lazy_exports

EXPORTS = {
    "TokenClassification": "bertkit_plugins.token_tagging.task:TokenClassification",
    "TokenClassificationHead": "bertkit_plugins.token_tagging.head:TokenClassificationHead",
    "SpanClassification": "bertkit_plugins.token_tagging.span:SpanClassification",
    "SpanClassificationHead": "bertkit_plugins.token_tagging.span_head:SpanClassificationHead",
    "TokenTaggingHead": "bertkit_plugins.token_tagging.task:TokenTaggingHead",
    "SpanHead": "bertkit_plugins.token_tagging.span:SpanHead",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@hookimpl
def register_tasks(register: Callable) -> None:
    register(EXPORTS["TokenClassification"])
    register(EXPORTS["SpanClassification"])
    register(EXPORTS["TokenTaggingHead"], deprecated=True)  # release 0.1's name
    register(EXPORTS["SpanHead"], deprecated=True)
