"""Built-in plugin: the RoBERTa and XLM-RoBERTa encoder families (``bertkit_plugins.roberta.encoder``).

``model.encoder: roberta`` (or ``xlm-roberta``) builds the encoder fresh for a byte-level BPE or
SentencePiece ``tokenizer.json``; pretrained directories whose ``config.json`` says
``model_type: roberta`` / ``xlm-roberta`` load as one. Every fine-tuning head works on them and
exports to the family's transformers class (``RobertaForTokenClassification`` …).
"""

from collections.abc import Callable

from bertkit.api import hookimpl, lazy_exports

EXPORTS = {
    "RobertaConfig": "bertkit_plugins.roberta.encoder:RobertaConfig",
    "RobertaModel": "bertkit_plugins.roberta.encoder:RobertaModel",
    "RobertaEncoder": "bertkit_plugins.roberta.encoder:RobertaEncoder",  # release 0.1's name
    "RobertaFamily": "bertkit_plugins.roberta.encoder:RobertaFamily",
    "XLMRobertaConfig": "bertkit_plugins.roberta.encoder:XLMRobertaConfig",
    "XLMRobertaFamily": "bertkit_plugins.roberta.encoder:XLMRobertaFamily",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@hookimpl
def register_encoders(register: Callable) -> None:
    register("roberta", EXPORTS["RobertaFamily"])
    register("xlm-roberta", EXPORTS["XLMRobertaFamily"])
