"""Built-in plugin: the ModernBERT encoder family (``bertkit_plugins.modernbert.encoder``).

``model.encoder: modernbert`` builds it fresh for a ``tokenizer.json``; pretrained directories
whose ``config.json`` says ``model_type: modernbert`` load as one. Token tagging, question
answering and sequence classification export to ``ModernBertFor…``.
"""

from bertkit.api.encoder import PluginExports

exports = PluginExports(
    __name__, {".encoder": ["ModernBertConfig", "ModernBertModel", "ModernBertEncoder", "ModernBertFamily"]}
)
__all__, __getattr__ = exports.names, exports.getattr
register_encoders = exports.encoders(modernbert="ModernBertFamily")
