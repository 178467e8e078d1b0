"""A trained model answering requests in memory: ``Predictor`` turns texts (or JSON records) into
the records ``bertkit predict`` writes, and texts into sentence embeddings. ``bertkit serve``
puts it behind HTTP; a notebook can call it directly."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from bertkit.data import pad_batch
from bertkit.embed import embed_texts
from bertkit.module import BertModule
from bertkit.samplers import cut_by_tokens

Request = str | dict[str, Any]
"""One input: a line of the head's plain-text format (``bertkit predict`` on a ``.txt`` file), or
one JSON record of its native format (``{"question", "context"}`` for question answering)."""


class Predictor:
    """A ``BertModule`` in evaluation mode, with its head's readers and the data settings it was
    trained with.

    Args:
        model: a model whose head is built (a loaded checkpoint).
        max_length: tokens per window, specials included (the checkpoint's ``data.max_length``);
            longer inputs are windowed as ``bertkit predict`` windows them (NER, QA) or
            truncated where the head reads one window.
        max_tokens: tokens per forward pass, padding included (rows x longest row): windows are
            sorted by length and cut into batches within this budget, so a batch holds little
            padding; outputs keep the inputs' order.

    Raises:
        ValueError: ``max_tokens`` below ``max_length``.
    """

    def __init__(self, model: BertModule, max_length: int = 128, max_tokens: int = 8192) -> None:
        if max_tokens < max_length:
            raise ValueError(f"max_tokens={max_tokens}: expected at least max_length ({max_length}), one window")
        self.model, self.max_length, self.max_tokens = model.eval(), max_length, max_tokens

    @classmethod
    def from_checkpoint(cls, path: str | Path, max_tokens: int = 8192, device: str = "cpu") -> Predictor:
        """Load a ``bertkit fit`` checkpoint (read as ``BertModule.load_from_checkpoint`` reads it:
        nothing it names is imported) onto ``device`` with its ``data.max_length``.

        Raises:
            FileNotFoundError, ValueError: see ``bertkit.checkpoints.check_checkpoint``.
        """
        model = BertModule.load_from_checkpoint(path, map_location=device)
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        max_length = (checkpoint.get("datamodule_hyper_parameters") or {}).get("max_length", 128)
        return cls(model, int(max_length), max_tokens)

    def info(self) -> dict[str, Any]:
        """What a client needs to know: family, head and its settings, max length, hidden size."""
        head = self.model.head
        return {
            "family": self.model.family.name,
            "head": type(head).__name__,
            "head_settings": dict(head.hparams),
            "max_length": self.max_length,
            "hidden_size": self.model.encoder.config.hidden_size,
        }

    def examples(self, inputs: list[Request]) -> list[Any]:
        """The head's examples of ``inputs``, one each, in order.

        Raises:
            ValueError: an input the head cannot read (the message names ``inputs[i]``), or a
                mix of texts and records.
        """
        head = self.model.head
        if all(isinstance(x, str) for x in inputs):
            check_texts(inputs)
            for i, text in enumerate(inputs):
                if "\n" in text or "\r" in text:
                    raise ValueError(f"inputs[{i}]: one line per input (the text has a line break)")
            examples = head.read_text_lines(Path("inputs"), enumerate(inputs, 1))  # sources inputs:1 …
        elif all(isinstance(x, dict) for x in inputs):
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "inputs.jsonl"
                path.write_text("".join(json.dumps(x) + "\n" for x in inputs), encoding="utf-8")
                try:
                    examples = [_renamed(e, str(path)) for e in head.read(path, labelled=False)]
                except ValueError as err:
                    raise ValueError(str(err).replace(str(path), "inputs")) from None
        else:
            raise ValueError("inputs: all texts (strings) or all records (JSON objects), not a mix")
        if len(examples) != len(inputs):
            raise ValueError(f"inputs: {type(head).__name__} read {len(examples)} examples from {len(inputs)} inputs")
        return examples

    def predict(self, inputs: list[Request]) -> list[dict[str, Any]]:
        """One record per input, as ``bertkit predict`` writes them (entities with character
        offsets, labels with probabilities, answers …).

        Raises:
            ValueError: see ``examples``.
        """
        return self.predict_examples(self.examples(inputs))

    @torch.inference_mode()
    def predict_examples(self, examples: list[Any]) -> list[dict[str, Any]]:
        """``predict`` of the head's examples (from ``examples``)."""
        head, tokenizer, device = self.model.head, self.model.tokenizer, self.model.device
        features = list(head.featurize(examples, tokenizer, self.max_length))
        lengths = [len(f["input_ids"]) for f in features]
        longest_first = sorted(range(len(features)), key=lambda i: -lengths[i])
        records: list[dict[str, Any]] = []  # they name their example: format_predictions joins them
        for b, rows in enumerate(cut_by_tokens(longest_first, lengths, self.max_tokens, padded=True)):
            batch = pad_batch([features[i] for i in rows], tokenizer.pad_token_id, head.pad_values)
            batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            records += self.model.predict_step(batch, b)
        return head.format_predictions(examples, records)

    @torch.inference_mode()
    def embed(self, texts: list[str], normalize: bool = True) -> list[list[float]]:
        """Mean-pooled last-layer vectors (sentence-transformers' pooling), L2-normalised unless
        ``normalize`` is False; texts longer than ``max_length`` tokens are truncated.

        Raises:
            ValueError: an empty text (names ``inputs[i]``).
        """
        check_texts(texts)
        batch_size = self.max_tokens // self.max_length
        vectors, _, _ = embed_texts(
            self.model.encoder, self.model.tokenizer, texts, max_length=self.max_length, batch_size=batch_size
        )
        stacked = torch.stack(vectors)  # (N, H)
        if normalize:
            stacked = torch.nn.functional.normalize(stacked, dim=-1)
        return stacked.tolist()


def check_texts(texts: list[str]) -> None:
    """Raises ValueError naming ``inputs[i]``, the first empty (or whitespace-only) text."""
    empty = next((i for i, text in enumerate(texts) if not text.strip()), None)
    if empty is not None:
        raise ValueError(f"inputs[{empty}]: empty text")


def _renamed(example: Any, path: str) -> Any:
    """``example`` with the temporary file's name in its text fields (a source, a default id)
    replaced by ``inputs`` (``inputs:2`` is the second input)."""
    if not dataclasses.is_dataclass(example):
        return example
    fields = {f.name: getattr(example, f.name) for f in dataclasses.fields(example)}
    changed = {k: v.replace(path, "inputs") for k, v in fields.items() if isinstance(v, str) and path in v}
    return dataclasses.replace(example, **changed) if changed else example
