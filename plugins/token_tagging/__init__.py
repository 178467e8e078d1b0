"""Built-in plugin: token tagging (named-entity recognition) on CoNLL column files."""

from collections.abc import Callable

from bertkit_plugins.token_tagging.head import TokenTaggingHead

import bertkit

__all__ = ["TokenTaggingHead"]


@bertkit.hookimpl
def register_heads(register: Callable) -> None:
    register(TokenTaggingHead)
