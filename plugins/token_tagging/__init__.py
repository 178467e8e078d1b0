"""Built-in plugin: named-entity recognition, as token tagging (with an optional CRF) or as
spans (nested entities)."""

from collections.abc import Callable

import bertkit
from bertkit.plugins import lazy_exports

EXPORTS = {
    "TokenTaggingHead": "bertkit_plugins.token_tagging.head:TokenTaggingHead",
    "SpanHead": "bertkit_plugins.token_tagging.span:SpanHead",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@bertkit.hookimpl
def register_heads(register: Callable) -> None:
    register(EXPORTS["TokenTaggingHead"])
    register(EXPORTS["SpanHead"])
