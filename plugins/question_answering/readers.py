"""Readers for extractive question answering: SQuAD JSON (v1.1, v2.0) and JSON Lines.

SQuAD JSON (Rajpurkar et al. 2016, 2018): ``{"data": [{"title", "paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"?}]}]}]}``;
``answer_start`` is a character offset into ``context``. JSON Lines: one object per line with
``question`` and ``context``, optional ``id`` and ``answers`` (a list of ``{text, answer_start}``
or the Hugging Face ``datasets`` form ``{"text": [...], "answer_start": [...]}``).

An answer whose text is not at ``answer_start`` is moved to the nearest occurrence of its text in
the context, or, if the context lacks it, marked unusable for training; the reader counts both
(``QAExample.answer_status``) and never raises for them.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.api import json_lines, read_text

EXACT, RELOCATED, NOT_FOUND = "exact", "relocated", "not found"


@dataclass
class Answer:
    """A gold answer: its text and character span ``[start, end)`` in the context (None if the
    text does not occur in the context)."""

    text: str
    start: int | None
    end: int | None


@dataclass
class QAExample:
    """One question about one passage.

    Attributes:
        id: the question id (SQuAD ``id``; for JSON Lines without one, ``file:line``).
        question: the question text.
        context: the passage.
        answers: gold answers (several on SQuAD dev; empty for an unanswerable or unlabelled one).
        is_impossible: SQuAD v2.0's flag: the passage does not answer the question.
        source: where it came from: ``file:line`` or ``file: data[i].paragraphs[j].qas[k]``.
        answer_status: per answer, ``exact``, ``relocated`` or ``not found`` (see module docstring).
        labelled: read with its answers (train/validation/test), not for prediction.
    """

    id: str
    question: str
    context: str
    answers: list[Answer]
    is_impossible: bool
    source: str
    answer_status: list[str] = field(default_factory=list)
    labelled: bool = True


def locate(context: str, text: str, start: int) -> tuple[int | None, str]:
    """Character start of ``text`` in ``context``: ``start`` if it is there, else the nearest
    occurrence (ties: the earlier), else None; with the status ``exact``/``relocated``/``not found``."""
    if context[start : start + len(text)] == text:
        return start, EXACT
    found, at = [], context.find(text)
    while text and at >= 0:
        found.append(at)
        at = context.find(text, at + 1)
    if not found:
        return None, NOT_FOUND
    return min(found, key=lambda i: (abs(i - start), i)), RELOCATED


def _answers(raw: Any, context: str, where: str) -> tuple[list[Answer], list[str]]:
    if isinstance(raw, dict):  # datasets layout: {"text": [...], "answer_start": [...]}
        texts, starts = raw.get("text", []), raw.get("answer_start", [])
        if len(texts) != len(starts):
            raise ValueError(f"{where}: answers has {len(texts)} texts but {len(starts)} answer_start values")
        raw = [{"text": t, "answer_start": s} for t, s in zip(texts, starts, strict=True)]
    if not isinstance(raw, list):
        raise ValueError(f"{where}: answers must be a list of {{text, answer_start}}")
    answers, status = [], []
    for k, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or "answer_start" not in item:
            raise ValueError(f"{where}: answers[{k}] must be an object with text and answer_start")
        try:
            start = int(item["answer_start"])
        except (TypeError, ValueError):
            raise ValueError(f"{where}: answers[{k}].answer_start {item['answer_start']!r} is not an integer") from None
        if not 0 <= start <= len(context):
            raise ValueError(
                f"{where}: answers[{k}].answer_start {start} is outside the context (0 … {len(context)} characters)"
            )
        at, state = locate(context, item["text"], start)
        answers.append(Answer(item["text"], at, None if at is None else at + len(item["text"])))
        status.append(state)
    return answers, status


def _example(record: dict, context: str, where: str, default_id: str | None, labelled: bool) -> QAExample:
    """An example from one question object; ``default_id`` None means ``id`` is required (SQuAD)."""
    for name in ("question",) if default_id is not None else ("question", "id"):
        if not isinstance(record.get(name), str):
            raise ValueError(f"{where}: no {name!r} string; the object has {sorted(record)}")
    if labelled and "answers" not in record:
        raise ValueError(f"{where}: no 'answers' (a labelled split needs them; predict reads files without)")
    answers, status = _answers(record.get("answers", []), context, where) if labelled else ([], [])
    qid = str(record.get("id", default_id))
    impossible = bool(record.get("is_impossible"))
    return QAExample(qid, record["question"], context, answers, impossible, where, status, labelled)


def read_squad_json(path: Path, labelled: bool = True) -> list[QAExample]:
    """Read a SQuAD JSON file.

    Raises:
        ValueError: not JSON, or a missing/mistyped field; the message names the file and the
            JSON path (``data[3].paragraphs[0].qas[2]``).
    """
    try:
        document = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise ValueError(f"{path}: expected SQuAD JSON, an object with a 'data' list of articles")
    examples = []
    for i, article in enumerate(document["data"]):
        _fields(article, f"{path}: data[{i}]", ARTICLE_KEYS, {"paragraphs": list})
        for j, paragraph in enumerate(article["paragraphs"]):
            where = f"{path}: data[{i}].paragraphs[{j}]"
            _fields(paragraph, where, PARAGRAPH_KEYS, {"context": str, "qas": list})
            for k, record in enumerate(paragraph["qas"]):
                _fields(record, f"{where}.qas[{k}]", QUESTION_KEYS, {})
                examples.append(_example(record, paragraph["context"], f"{where}.qas[{k}]", None, labelled))
    return examples


# The keys of SQuAD v1.1/v2.0 objects; others are kept out of the way unless they look like a
# misspelling of one of these (then the data under them would be lost).
ARTICLE_KEYS = ("title", "paragraphs")
PARAGRAPH_KEYS = ("context", "qas")
QUESTION_KEYS = ("id", "question", "answers", "is_impossible", "plausible_answers")


def _fields(value: Any, where: str, known: tuple[str, ...], required: dict[str, type]) -> None:
    """Check one SQuAD object: an object, with each ``required`` key of its type, and no key that
    is a misspelling of a known one (``Paragraphs``, ``qa``), which would drop its data unseen.

    Raises:
        ValueError: names ``where``, the key and what was expected.
    """
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
    for key in value:
        if key in known:
            continue
        close = difflib.get_close_matches(key.lower(), known, n=1, cutoff=0.75)
        if close:
            raise ValueError(
                f"{where}: unknown key {key!r} (did you mean {close[0]!r}?); the object has {sorted(value)}"
            )
    for key, kind in required.items():
        if not isinstance(value.get(key), kind):
            raise ValueError(f"{where}: no {key!r} {kind.__name__}; the object has {sorted(value)}")


def read_qa_jsonl(path: Path, labelled: bool = True) -> list[QAExample]:
    """Read JSON Lines of ``{question, context, id?, answers?, is_impossible?}``.

    Raises:
        ValueError: a line that is not a JSON object, or lacks ``question``/``context``
            (names the file and line).
    """
    examples = []
    for where, record in json_lines(path):
        if not isinstance(record, dict) or not isinstance(record.get("context"), str):
            raise ValueError(f"{where}: expected a JSON object with 'question' and 'context' strings")
        examples.append(_example(record, record["context"], where, where, labelled))
    return examples


def read_qa(path: Path, labelled: bool = True) -> list[QAExample]:
    """``read_qa_jsonl`` for ``.jsonl`` files, else ``read_squad_json``."""
    reader = read_qa_jsonl if Path(path).suffix.lower() == ".jsonl" else read_squad_json
    return reader(path, labelled)
