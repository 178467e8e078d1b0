"""Built-in plugin: the ModernBERT encoder family (``bertkit_plugins.modernbert.encoder``).

``model.encoder: modernbert`` builds it fresh for a ``tokenizer.json``; pretrained directories
whose ``config.json`` says ``model_type: modernbert`` load as one. Token tagging, question
answering and sequence classification export to ``ModernBertFor…``.
"""

from collections.abc import Callable

import bertkit
from bertkit.plugins import lazy_exports

EXPORTS = {
    "ModernBertConfig": "bertkit_plugins.modernbert.encoder:ModernBertConfig",
    "ModernBertEncoder": "bertkit_plugins.modernbert.encoder:ModernBertEncoder",
    "ModernBertFamily": "bertkit_plugins.modernbert.encoder:ModernBertFamily",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@bertkit.hookimpl
def register_encoders(register: Callable) -> None:
    register("modernbert", EXPORTS["ModernBertFamily"])
