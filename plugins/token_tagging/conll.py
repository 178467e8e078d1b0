"""CoNLL column files and tagging schemes (Tjong Kim Sang & De Meulder 2003).

One token a line, whitespace-separated columns (``token POS chunk NER`` in CoNLL-2003), a blank
line between sentences, ``-DOCSTART-`` lines between documents. Tags are read in IOB1, IOB2 or
BIOES and always converted to IOB2 (B- begins every entity), the scheme the model predicts.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bertkit.api.task import NonBlank, Text, check_choice, json_lines, parse, text_lines

log = logging.getLogger(__name__)

COLUMNS = re.compile(r"[ \t]+")
"""Column separators: ASCII spaces and tabs only; a no-break space (U+00A0) or other Unicode
space inside a token is part of the token (``New\xa0York``), never a column break."""

TagScheme = Literal["IOB1", "IOB2", "BIOES"]
_TAG = {"IOB1": re.compile(r"^[BI]-\S+$"), "IOB2": re.compile(r"^[BI]-\S+$"), "BIOES": re.compile(r"^[BIES]-\S+$")}


@dataclass
class Sentence:
    """A sentence: words, IOB2 tags (None when unlabelled), and where it came from.

    Attributes:
        words: the tokens of the sentence.
        tags: IOB2 tags, one per word, or None.
        source: ``file:line`` of the first word.
        lines: the line number of every word (for error messages).
        text: the sentence as text; words joined by single spaces unless read from plain text.
        offsets: (start, end) character offsets of each word in ``text``.
        document: the document the sentence belongs to (sentences of one document are next to
            each other in a file), or None for a sentence that stands alone; the context of
            ``TokenTaggingHead(context=K)`` comes from its neighbours of the same document.
        spans: entities as ``(first word, end word (exclusive), type)``, possibly nested (read by
            ``SpanHead``), or None.
    """

    words: list[str]
    tags: list[str] | None
    source: str
    lines: list[int] = field(default_factory=list)
    text: str = ""
    offsets: list[tuple[int, int]] = field(default_factory=list)
    document: int | None = None
    spans: list[tuple[int, int, str]] | None = None

    def __post_init__(self) -> None:
        if not self.text:
            self.text = " ".join(self.words)
            starts = []
            pos = 0
            for word in self.words:
                starts.append((pos, pos + len(word)))
                pos += len(word) + 1
            self.offsets = starts


def to_iob2(tags: list[str], scheme: TagScheme) -> list[str]:
    """Convert one sentence's tags to IOB2.

    IOB1 (and IOB2, on which this is the identity): an ``I-X`` that does not continue an ``X``
    entity begins one (``B-X``). BIOES: ``S-X`` -> ``B-X``, ``E-X`` -> ``I-X``.

    Raises:
        ValueError: unknown scheme.
    """
    check_choice("tag scheme", scheme, TagScheme)
    out: list[str] = []
    for tag in tags:
        if scheme == "BIOES" and tag[:2] in ("S-", "E-"):
            tag = ("B-" if tag[0] == "S" else "I-") + tag[2:]
        if tag.startswith("I-") and (not out or out[-1] == "O" or out[-1][2:] != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
    return out


def read_conll(
    path: str | Path, scheme: TagScheme = "IOB1", tag_column: int = -1, labelled: bool = True
) -> list[Sentence]:
    """Read a CoNLL column file.

    Args:
        path: the file.
        scheme: the file's tagging scheme: IOB1 (CoNLL-2003), IOB2 or BIOES.
        tag_column: index of the tag column (-1 = last).
        labelled: read tags; False reads the first column only (for prediction).

    Returns:
        Sentences with IOB2 tags; ``-DOCSTART-`` lines and blank lines only separate. Each
        ``-DOCSTART-`` line begins a new ``document`` (a file without one is one document).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line without the tag column, or a tag that is not ``O`` or valid in
            ``scheme``; the message gives ``file:line`` and the line.
    """
    path = Path(path)
    check_choice("tag scheme", scheme, TagScheme)
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    lines: list[int] = []
    document = 0

    def flush() -> None:
        if words:
            iob2 = to_iob2(tags, scheme) if labelled else None
            sentences.append(Sentence(list(words), iob2, f"{path}:{lines[0]}", list(lines), document=document))
        words.clear(), tags.clear(), lines.clear()

    for number, raw in text_lines(path):
        cols = COLUMNS.split(raw.strip(" \t")) if raw.strip(" \t") else []  # not str.split: NBSP is text
        if not cols or cols[0] == "-DOCSTART-":
            flush()
            document += bool(cols)  # -DOCSTART-
            continue
        if labelled:
            try:
                tag = cols[tag_column]
            except IndexError:
                raise ValueError(
                    f"{path}:{number}: expected a tag in column {tag_column} of {len(cols)}, got {raw.rstrip()!r}"
                ) from None
            if len(cols) < 2:
                raise ValueError(f"{path}:{number}: expected 'token ... tag' columns, got {raw.rstrip()!r}")
            if tag != "O" and not _TAG[scheme].match(tag):
                raise ValueError(f"{path}:{number}: tag {tag!r} is not O or a valid {scheme} tag")
            tags.append(tag)
        words.append(cols[0])
        lines.append(number)
    flush()
    return sentences


def read_tagged_jsonl(
    path: str | Path,
    scheme: TagScheme = "IOB1",
    tokens_field: str = "tokens",
    tags_field: str = "ner_tags",
    labelled: bool = True,
) -> list[Sentence]:
    """Read JSON Lines of tokenized sentences, ``{"tokens": [...], "ner_tags": [...]}``: the layout
    of Hugging Face token-classification data sets (``bertkit.data.hf_datasets`` writes their tag ids
    as names). A file ``bertkit predict`` wrote (its first record has ``words`` and ``tags`` and no
    ``tokens_field``) is read by those two fields, its tags as IOB2 whatever ``scheme`` says: text
    a trained model tagged, to train on (a teacher's transfer set, docs/distillation.md). An empty
    token list has nothing to tag and is skipped. The file is one document (its records in order
    are each other's context).

    Raises:
        ValueError: a line that is not a JSON object, a missing or non-list field, tags and tokens
            of different lengths, or a tag that is not ``O`` or valid in ``scheme`` (names file
            and line).
    """
    path = Path(path)
    check_choice("tag scheme", scheme, TagScheme)
    if _predicted(path, tokens_field):
        log.warning("%s: records bertkit predict wrote: read by their words and tags, as IOB2", path)
        tokens_field, tags_field, scheme = "words", "tags", "IOB2"
    sentences: list[Sentence] = []
    for where, record, words in tokenized_records(path, tokens_field, tags_field if labelled else None):
        tags = None
        if labelled:
            tags = parse(list[NonBlank], record[tags_field], f"{where}: {tags_field}")
            if len(tags) != len(words):
                raise ValueError(f"{where}: {len(words)} tokens but {len(tags)} tags")
            bad = next((t for t in tags if t != "O" and not _TAG[scheme].match(t)), None)
            if bad is not None:
                raise ValueError(f"{where}: tag {bad!r} is not O or a valid {scheme} tag")
            tags = to_iob2(tags, scheme)
        number = int(where.rpartition(":")[2])
        sentences.append(Sentence(words, tags, where, [number] * len(words), document=0))
    return sentences


def _predicted(path: Path, tokens_field: str) -> bool:
    """Whether the first record of a JSON Lines file is one ``bertkit predict`` wrote for a
    token-classification model (``words`` and ``tags``, no ``tokens_field``)."""
    records = json_lines(path)
    first = next(records, None)
    records.close()  # the file, read no further
    record = first[1] if first is not None else None
    return isinstance(record, dict) and tokens_field not in record and {"words", "tags"} <= record.keys()


def tokenized_records(
    path: str | Path, tokens_field: str, other_field: str | None
) -> Iterator[tuple[str, dict, list[str]]]:
    """``(file:line, record, words)`` for each JSON Lines record with a list of token strings (and
    a list in ``other_field`` when given); a record with no tokens has nothing to tag and is skipped.

    Raises:
        ValueError: a line that is not such a JSON object, or a token that is not a string (names
            file, line and field).
    """
    for where, record in json_lines(path):
        record = parse(dict[str, Any], record, where)
        missing = [f for f in (tokens_field, other_field) if f is not None and f not in record]
        if missing:
            raise ValueError(f"{where}: no field {missing[0]!r}; the object has {sorted(record)}")
        words = parse(list[Text], record[tokens_field], f"{where}: {tokens_field}")
        if other_field is not None:
            parse(list[Any], record[other_field], f"{where}: {other_field}")
        if words:
            yield where, record, words


def entities(tags: list[str]) -> list[tuple[str, int, int]]:
    """Entity chunks of an IOB2 (or IOB1/BIOES) tag sequence, conlleval semantics.

    Follows conlleval.pl / seqeval's default (non-strict) mode: a chunk starts at B-, S-, or a
    type change, and at I-/E- after O, E- or S-; ill-formed sequences are read, not rejected.

    Returns:
        (type, first word, last word + 1) for every chunk, in order.
    """
    found = []
    start, kind = None, None
    prev_tag, prev_type = "O", ""
    for i, tag in enumerate([*tags, "O"]):
        flag, typ = (tag[0], tag[2:]) if tag != "O" else ("O", "")
        ends = (
            prev_tag in ("E", "S")
            or (prev_tag in ("B", "I") and flag in ("B", "S", "O"))
            or (prev_tag != "O" and prev_type != typ)
        )
        begins = (
            flag in ("B", "S")
            or (prev_tag in ("E", "S", "O") and flag in ("E", "I"))
            or (flag != "O" and prev_type != typ)
        )
        if ends and start is not None:
            found.append((kind, start, i))
            start = None
        if begins:
            start, kind = i, typ
        prev_tag, prev_type = flag, typ
    return found


def read_tagged(
    path: str | Path,
    scheme: TagScheme = "IOB1",
    tag_column: int = -1,
    tokens_field: str = "tokens",
    tags_field: str = "ner_tags",
    labelled: bool = True,
) -> list[Sentence]:
    """A tagged file by its suffix: JSON Lines (``.jsonl``, ``read_tagged_jsonl``) or a CoNLL column
    file (``read_conll``); arguments as theirs."""
    if Path(path).suffix.lower() == ".jsonl":
        return read_tagged_jsonl(path, scheme, tokens_field, tags_field, labelled)
    return read_conll(path, scheme, tag_column, labelled)
