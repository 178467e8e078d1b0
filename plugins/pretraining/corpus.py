"""Reading a pre-training corpus as a stream of documents (lists of sentences).

Two layouts (google-research/bert ``create_pretraining_data.py`` reads the first):

- a **file**: one sentence per line, a blank line between documents;
- a **folder**: every file in it (sorted, recursively) is one document of plain text; paragraphs
  (blocks of lines) are split into sentences by ``split_sentences``.

Documents stream one at a time, so reading memory does not grow with the corpus. The default
corpus, which every Python installation has, is the Python reference documentation shipped in
the standard library (``pydoc_data.topics``: 79 topics, 0.46 MB of English prose and code).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from bertkit.api.task import atomic_path, text_lines

Document = list[str]

# A sentence ends at . ! or ? (and closing quotes/brackets) followed by space and an upper-case
# letter, digit or opening quote: a simple, language-agnostic rule; it errs on abbreviations
# ("Mr. Smith"), which only moves a segment boundary.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of a paragraph (whitespace normalised); see ``_SENTENCE_END`` for the rule."""
    text = " ".join(paragraph.split())
    if not text:
        return []
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _lines(path: Path) -> Iterator[str]:
    if not path.is_file():
        raise ValueError(f"{path}: expected a file")
    for _, line in text_lines(path):
        yield line


def _sentence_file(path: Path) -> Iterator[Document]:
    document: Document = []
    for line in _lines(path):
        line = line.strip()
        if line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def paragraph_document(lines: Iterable[str]) -> Document:
    """One document from plain text lines: blank-line separated paragraphs, split into sentences."""
    sentences: Document = []
    paragraph: list[str] = []
    for line in [*lines, ""]:
        if line.strip():
            paragraph.append(line)
        elif paragraph:
            sentences += split_sentences(" ".join(paragraph))
            paragraph = []
    return sentences


def read_documents(paths: Iterable[str | Path]) -> Iterator[Document]:
    """Documents of every path in turn (files: sentence per line; folders: a document per file).

    Empty documents are skipped (as Google's reader does).

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: a file is not UTF-8 (names the file and line).
    """
    for path in map(Path, paths):
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")):
                document = paragraph_document(_lines(file))
                if document:
                    yield document
        elif path.is_file():
            yield from _sentence_file(path)
        else:
            raise FileNotFoundError(f"{path}: corpus not found (expected a file or a folder)")


def python_docs_corpus(directory: Path, validation_every: int = 10) -> dict[str, Path]:
    """Write the Python documentation topics as a corpus (sentence per line, blank line between
    documents) into ``directory``: every ``validation_every``-th topic (sorted by name) goes to
    ``validation.txt``, the rest to ``train.txt``. Returns the two paths by split."""
    from pydoc_data.topics import topics

    splits: dict[str, list[str]] = {"train": [], "validation": []}
    for i, name in enumerate(sorted(topics)):
        document = paragraph_document(topics[name].splitlines())
        split = "validation" if i % validation_every == validation_every - 1 else "train"
        splits[split].append("\n".join(document))
    paths = {}
    for split, documents in splits.items():
        paths[split] = directory / f"{split}.txt"
        if not paths[split].is_file():
            with atomic_path(paths[split]) as tmp:
                tmp.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return paths
