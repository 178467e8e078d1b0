"""Built-in plugin: the RoBERTa and XLM-RoBERTa encoder families (``bertkit_plugins.roberta.encoder``).

``model.encoder: roberta`` (or ``xlm-roberta``) builds the encoder fresh for a byte-level BPE or
SentencePiece ``tokenizer.json``; pretrained directories whose ``config.json`` says
``model_type: roberta`` / ``xlm-roberta`` load as one. Every fine-tuning head works on them and
exports to the family's transformers class (``RobertaForTokenClassification`` …).
"""

from bertkit.api.encoder import PluginExports

exports = PluginExports(
    __name__,
    {
        ".encoder": [
            "RobertaConfig",
            "RobertaModel",
            "RobertaEncoder",
            "RobertaFamily",
            "XLMRobertaConfig",
            "XLMRobertaFamily",
        ]
    },
)
__all__, __getattr__ = exports.names, exports.getattr
register_encoders = exports.encoders(**{"roberta": "RobertaFamily", "xlm-roberta": "XLMRobertaFamily"})
