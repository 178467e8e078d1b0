"""Data: ``BertDataModule`` (files -> features -> batches), samplers, Hugging Face datasets,
generated samples and windowing helpers."""

from bertkit.utils.moved import forwarding

__getattr__ = forwarding(__name__, "bertkit.data.datamodule", "bertkit.data.collate")  # release 0.1's bertkit.data
