"""The network: ``BertConfig``, the BERT encoder, unpadded (varlen) attention, encoder families,
Hugging Face weights, the tokenizer, and module transforms for inference (pre-packed, int8)."""

from bertkit.utils.moved import forwarding

__getattr__ = forwarding(__name__, "bertkit.model.bert")  # release 0.1's bertkit.model
