"""Readers for sequence-classification data: delimited tables (TSV/CSV) and JSON Lines.

Every example remembers its ``file:line`` so that a bad label or value found later is reported
where it is. Blank lines are skipped; a row without a needed column is an error, never dropped.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bertkit.api.task import Text, check_choice, json_lines, parse, text_lines

Quoting = Literal["minimal", "multiline", "none"]
QUOTING = {"minimal": csv.QUOTE_MINIMAL, "multiline": csv.QUOTE_MINIMAL, "none": csv.QUOTE_NONE}
Column = str | int


@dataclass
class Example:
    """One text (or text pair) and its raw label.

    Attributes:
        text: the text (segment A).
        text_pair: the second text (segment B) of a pair task, else None.
        label: the label as read: a string, a list (multi-label JSON), a number (JSON), or None
            when unlabelled.
        source: ``file:line`` it came from.
    """

    text: str
    text_pair: str | None
    label: Any
    source: str


def file_format(path: Path, given: str) -> str:
    """``tsv``, ``csv`` or ``jsonl``: ``given`` unless ``auto``, then by suffix (.csv, .jsonl/.json, else tsv)."""
    if given != "auto":
        return given
    return {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}.get(path.suffix.lower(), "tsv")


def _column_index(path: Path, header: list[str] | None, column: Column, role: str) -> int:
    if isinstance(column, int):
        return column
    if header is None:
        raise ValueError(f"{path}: {role} column {column!r} is a name, but the file has no header; give an index")
    if column not in header:
        raise ValueError(f"{path}:1: no {role} column {column!r}; the header has {header}")
    return header.index(column)


def read_table(
    path: Path,
    text_column: Column,
    text_pair_column: Column | None,
    label_column: Column | None,
    delimiter: str = "\t",
    header: bool = True,
    quoting: Quoting = "minimal",
) -> list[Example]:
    """Read a delimited file (a UTF-8 byte-order mark is removed).

    Args:
        path: the file.
        text_column: column of the text: a header name or a 0-based index.
        text_pair_column: column of the second text, or None for single texts.
        label_column: column of the label, or None (unlabelled).
        delimiter: field separator (``\\t`` for TSV, ``,`` for CSV).
        header: the first non-blank line names the columns.
        quoting: ``minimal`` (double quotes enclose fields, each on one line), ``multiline``
            (quoted fields may hold line breaks, as spreadsheets write them) or ``none`` (quotes
            are text; MRPC).

    Raises:
        ValueError: unknown quoting; a named column missing from the header; a row with too few
            fields; with ``minimal``, a quoted field that runs over several lines (a stray quote
            swallows the rows after it): the message names file, lines and how many were joined.
    """
    check_choice("quoting", quoting, Quoting)
    examples = []
    reader = csv.reader(
        (line for _, line in text_lines(path, keep_ends=True)), delimiter=delimiter, quoting=QUOTING[quoting]
    )
    names, columns, ended = None, None, 0
    for row in _rows(reader, path):
        first, ended = ended + 1, reader.line_num
        if ended > first and quoting == "minimal":
            raise ValueError(
                f"{path}:{first}: a quoted field runs over lines {first}-{ended} ({ended - first + 1} lines joined into "
                "one row): a stray double quote? Use quoting: none if quotes are text, or quoting: multiline if "
                "fields really hold line breaks"
            )
        if not row or all(not field.strip() for field in row):
            continue
        if header and names is None:
            names = [n.strip() for n in row]
            continue
        if columns is None:
            wanted = {"text": text_column, "text pair": text_pair_column, "label": label_column}
            columns = {r: _column_index(path, names, c, r) for r, c in wanted.items() if c is not None}
        line = first
        for role, index in columns.items():
            if index >= len(row) or index < -len(row):
                raise ValueError(
                    f"{path}:{line}: no {role} column (index {index}); the row has {len(row)} fields"
                    f"{'' if quoting == 'none' else ' (a stray quote? try quoting: none)'}"
                )
        examples.append(
            Example(
                row[columns["text"]],
                row[columns["text pair"]] if "text pair" in columns else None,
                row[columns["label"]] if "label" in columns else None,
                f"{path}:{line}",
            )
        )
    return examples


def _rows(reader: Any, path: Path) -> Any:
    """The reader's rows; a ``csv.Error`` becomes a ValueError naming the file and line."""
    try:
        yield from reader
    except csv.Error as err:
        raise ValueError(f"{path}:{reader.line_num}: {err}") from None


def read_jsonl(path: Path, text_field: str, text_pair_field: str | None, label_field: str | None) -> list[Example]:
    """Read JSON Lines: one object per line with the given field names; the texts must be JSON
    strings (a number is not converted), the label is kept as read (``SequenceClassification``
    checks its type).

    Raises:
        ValueError: a line that is not a JSON object, lacks a field or holds a text that is not a
            string (names file, line and field).
    """
    examples = []
    for where, record in json_lines(path):
        record = parse(dict[str, Any], record, where)
        for role, field in (("text", text_field), ("text pair", text_pair_field), ("label", label_field)):
            if field is not None and field not in record:
                raise ValueError(f"{where}: no {role} field {field!r}; the object has {sorted(record)}")
        examples.append(
            Example(
                parse(Text, record[text_field], f"{where}: {text_field}"),
                None
                if text_pair_field is None
                else parse(Text, record[text_pair_field], f"{where}: {text_pair_field}"),
                None if label_field is None else record[label_field],
                where,
            )
        )
    return examples


def read_lines(path: Path, lines: Iterable[tuple[int, str]], pairs: bool) -> list[Example]:
    """Plain text for prediction: one example per non-blank line of ``lines`` (``(number, line)``
    of ``path``); for pairs, a tab separates them.

    Raises:
        ValueError: a pair task's line without a tab (names file and line).
    """
    examples = []
    for number, line in lines:
        if not line.strip():
            continue
        if pairs:
            if "\t" not in line:
                raise ValueError(f"{path}:{number}: expected two texts separated by a tab")
            text, pair = line.split("\t", 1)
            examples.append(Example(text, pair, None, f"{path}:{number}"))
        else:
            examples.append(Example(line, None, None, f"{path}:{number}"))
    return examples
