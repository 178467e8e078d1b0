"""Release 0.1's head contract, kept for one release: a ``Head`` that was a task and a module at
once (it read files, learned labels, featurized, held the layers and wrote records). Such a head
is a ``Task`` whose ``build_head`` builds and returns itself, so heads written against 0.1 keep
working unchanged; subclassing it warns. Write a ``Task`` and a ``bertkit.tasks.head.Head``
instead (the plugin guide shows both)."""

from __future__ import annotations

import tempfile
from abc import abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from bertkit.model.bert import EncoderOutput
from bertkit.model.config import BertConfig
from bertkit.model.tokenizer import BertTokenizer
from bertkit.tasks.head import Head as HeadModule
from bertkit.tasks.head import feature_rows
from bertkit.tasks.task import Batch, Feature, Task, by_example
from bertkit.utils.deprecation import warn_deprecated
from bertkit.utils.io import text_lines

__all__ = ["Batch", "Feature", "Head", "by_example"]


class Head(HeadModule, Task):
    """A release-0.1 head: ``read``/``read_text``/``read_text_lines``, ``prepare``, ``featurize``,
    ``build``, ``forward``, ``predict``, ``format_predictions``/``format_record`` on one object.
    Deprecated: subclassing it warns."""

    _release_01 = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        warn_deprecated(
            f"{cls.__module__}.{cls.__qualname__} subclasses release 0.1's bertkit.Head: "
            "write a bertkit.api.Task (reading, labels, features, records) and a bertkit.api.Head (layers, loss)"
        )

    # ----- the task's part, by its release-0.1 names -----
    def prepare(self, examples: list[Any]) -> None:
        """See the training examples; fill ``learned`` settings (``Task.learn``)."""

    def learn(self, examples: list[Any]) -> None:
        self.prepare(examples)

    def read_text(self, path: Path) -> list[Any]:
        """Read a plain text file for prediction: ``read_text_lines`` of all its lines."""
        return self.read_text_lines(path, text_lines(path))

    def read_text_lines(self, path: Path, lines: Iterable[tuple[int, str]]) -> list[Any]:
        """A head that overrides ``read_text`` alone reads the lines as a file of their own."""
        if type(self).read_text is Head.read_text:
            return super().read_text_lines(path, lines)
        with tempfile.TemporaryDirectory() as tmp:
            part = Path(tmp) / Path(path).name
            part.write_text("".join(line + "\n" for _, line in lines), encoding="utf-8")
            return self.read_text(part)

    @abstractmethod
    def build(self, config: BertConfig) -> None:
        """Create the layers on top of an encoder of this config."""

    def build_head(self, config: BertConfig, tokenizer: BertTokenizer) -> Head:
        self.build(config)
        return self

    @abstractmethod
    def featurize(self, examples: list[Any], tokenizer: BertTokenizer, max_length: int) -> list[Feature]:
        """Turn examples into model features."""

    @abstractmethod
    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        """Head outputs for a batch; includes ``loss`` when the batch has labels."""

    def predict(self, outputs: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:  # type: ignore[override]
        """Per-feature predictions from one batch's decoded tensors, release 0.1's contract (a
        ``Task`` reads ``Head.feature_predictions``' plain values instead): each feature's row of every
        output but the losses, as lists."""
        return feature_rows(outputs, batch, (), type(self).__name__)
