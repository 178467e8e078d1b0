"""Readers for extractive question answering: SQuAD JSON (v1.1, v2.0) and JSON Lines.

SQuAD JSON (Rajpurkar et al. 2016, 2018): ``{"data": [{"title", "paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"?}]}]}]}``;
``answer_start`` is a character offset into ``context``. JSON Lines: one object per line with
``question`` and ``context``, optional ``id`` and ``answers`` (a list of ``{text, answer_start}``
or the Hugging Face ``datasets`` form ``{"text": [...], "answer_start": [...]}``).

An answer whose text is not at ``answer_start`` is moved to the nearest occurrence of its text in
the context, or, if the context lacks it, marked unusable for training; the reader counts both
(``QAExample.answer_status``) and never raises for them. Every record is checked against its
declared schema (``Squad``, ``QuestionLine``) in strict mode: ``"is_impossible": "false"``,
``"answer_start": "12"``, a blank answer or a misspelt key (``Answers``) is an error naming the
file and the JSON path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field

from bertkit.api.task import NonBlank, Schema, Text, json_lines, parse, read_json

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


Offset = Annotated[int, Field(ge=0)]


class AnswerRecord(Schema):
    """``{"text", "answer_start"}``: a non-blank answer at a character offset."""

    text: NonBlank
    answer_start: Offset


class AnswerColumns(Schema):
    """The Hugging Face ``datasets`` layout: ``{"text": [...], "answer_start": [...]}``."""

    text: list[NonBlank]
    answer_start: list[Offset]


class Question(Schema):
    """A SQuAD question object (``qas[k]``); ``answers`` is needed in a labelled split."""

    id: Text | int
    question: NonBlank
    answers: list[AnswerRecord] | AnswerColumns | None = None
    is_impossible: bool = False
    plausible_answers: list[AnswerRecord] | None = None


class QuestionLine(Question):
    """A JSON Lines record: a question object with its ``context``; ``id`` optional (the line)."""

    id: Text | int | None = None
    context: Text


class Paragraph(Schema):
    context: Text
    qas: list[Question]


class Article(Schema):
    title: Text = ""
    paragraphs: list[Paragraph]


class Squad(Schema):
    """SQuAD JSON (v1.1, v2.0)."""

    data: list[Article]


def _answers(raw: list[AnswerRecord] | AnswerColumns, context: str, where: str) -> tuple[list[Answer], list[str]]:
    if isinstance(raw, AnswerColumns):
        if len(raw.text) != len(raw.answer_start):
            raise ValueError(
                f"{where}: answers has {len(raw.text)} texts but {len(raw.answer_start)} answer_start values"
            )
        raw = [AnswerRecord(text=t, answer_start=s) for t, s in zip(raw.text, raw.answer_start, strict=True)]
    answers, status = [], []
    for k, item in enumerate(raw):
        if item.answer_start > len(context):
            raise ValueError(
                f"{where}: answers[{k}].answer_start {item.answer_start} is outside the context "
                f"(0 … {len(context)} characters)"
            )
        at, state = locate(context, item.text, item.answer_start)
        answers.append(Answer(item.text, at, None if at is None else at + len(item.text)))
        status.append(state)
    return answers, status


def _example(question: Question, context: str, where: str, labelled: bool) -> QAExample:
    if labelled and question.answers is None:
        raise ValueError(f"{where}: no 'answers' (a labelled split needs them; predict reads files without)")
    answers, status = _answers(question.answers, context, where) if labelled else ([], [])
    qid = str(question.id) if question.id is not None else where
    return QAExample(qid, question.question, context, answers, question.is_impossible, where, status, labelled)


def read_squad_json(path: Path, labelled: bool = True) -> list[QAExample]:
    """Read a SQuAD JSON file (``Squad``: strict types, no key misspelt).

    Raises:
        ValueError: not JSON, or a missing, mistyped or blank field; the message names the file
            and the JSON path (``data[3].paragraphs[0].qas[2].answers[0].text``).
    """
    document = parse(Squad, read_json(path, "no such file"), str(path))
    examples = []
    for i, article in enumerate(document.data):
        for j, paragraph in enumerate(article.paragraphs):
            for k, question in enumerate(paragraph.qas):
                where = f"{path}: data[{i}].paragraphs[{j}].qas[{k}]"
                examples.append(_example(question, paragraph.context, where, labelled))
    return examples


def read_qa_jsonl(path: Path, labelled: bool = True) -> list[QAExample]:
    """Read JSON Lines of ``QuestionLine`` records (``{question, context, id?, answers?,
    is_impossible?}``).

    Raises:
        ValueError: a line that is not such a record (names the file, line and field).
    """
    examples = []
    for where, record in json_lines(path):
        line = parse(QuestionLine, record, where)
        examples.append(_example(line, line.context, where, labelled))
    return examples


def read_qa(path: Path, labelled: bool = True) -> list[QAExample]:
    """``read_qa_jsonl`` for ``.jsonl`` files, else ``read_squad_json``."""
    reader = read_qa_jsonl if Path(path).suffix.lower() == ".jsonl" else read_squad_json
    return reader(path, labelled)
