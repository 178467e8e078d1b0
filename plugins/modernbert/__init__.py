"""Built-in plugin: the ModernBERT encoder family (``bertkit_plugins.modernbert.encoder``).

``model.encoder: modernbert`` builds it fresh for a ``tokenizer.json``; pretrained directories
whose ``config.json`` says ``model_type: modernbert`` load as one. Token tagging, question
answering and sequence classification export to ``ModernBertFor…``.
"""

from collections.abc import Callable

from bertkit.api import hookimpl, lazy_exports

EXPORTS = {
    "ModernBertConfig": "bertkit_plugins.modernbert.encoder:ModernBertConfig",
    "ModernBertModel": "bertkit_plugins.modernbert.encoder:ModernBertModel",
    "ModernBertEncoder": "bertkit_plugins.modernbert.encoder:ModernBertEncoder",  # release 0.1's name
    "ModernBertFamily": "bertkit_plugins.modernbert.encoder:ModernBertFamily",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@hookimpl
def register_encoders(register: Callable) -> None:
    register("modernbert", EXPORTS["ModernBertFamily"])
