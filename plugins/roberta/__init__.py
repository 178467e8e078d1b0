"""Built-in plugin: the RoBERTa and XLM-RoBERTa encoder families (``bertkit_plugins.roberta.encoder``).

``model.encoder: roberta`` (or ``xlm-roberta``) builds the encoder fresh for a byte-level BPE or
SentencePiece ``tokenizer.json``; pretrained directories whose ``config.json`` says
``model_type: roberta`` / ``xlm-roberta`` load as one. Every fine-tuning head works on them and
exports to the family's transformers class (``RobertaForTokenClassification`` …).
"""

from collections.abc import Callable

import bertkit
from bertkit.plugins import lazy_exports

EXPORTS = {
    "RobertaConfig": "bertkit_plugins.roberta.encoder:RobertaConfig",
    "RobertaEncoder": "bertkit_plugins.roberta.encoder:RobertaEncoder",
    "RobertaFamily": "bertkit_plugins.roberta.encoder:RobertaFamily",
    "XLMRobertaConfig": "bertkit_plugins.roberta.encoder:XLMRobertaConfig",
    "XLMRobertaFamily": "bertkit_plugins.roberta.encoder:XLMRobertaFamily",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@bertkit.hookimpl
def register_encoders(register: Callable) -> None:
    register("roberta", EXPORTS["RobertaFamily"])
    register("xlm-roberta", EXPORTS["XLMRobertaFamily"])
