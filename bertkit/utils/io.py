"""File input and output: atomic writes (nothing half-written is ever left under a user's file
name) and UTF-8 text reading whose errors name the file and line."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BOM = "\ufeff"


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target`` in one rename.

    On an exception the temporary file is removed and ``target`` is left as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if tmp.is_file():  # mkstemp makes 0600: give the file the permissions open() would
            tmp.chmod(0o666 & ~_umask())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def decode_line(raw: bytes, path: str | Path, number: int) -> str:
    """One line of ``path`` as text, with every byte-order mark (U+FEFF) removed.

    Raises:
        ValueError: the bytes are not UTF-8; the message names file, line, column and byte.
    """
    try:
        return raw.decode("utf-8").replace(BOM, "")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}:{number}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1}); "
            "re-save the file as UTF-8"
        ) from None


def text_lines(path: str | Path, keep_ends: bool = False) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for each line of a UTF-8 text file, read as it streams.

    A byte-order mark is removed wherever it stands (at the start, as editors on Windows write
    it, or stray inside a file made by concatenation), so it never becomes part of a word.
    Lines end at ``\n``; ``\r\n`` endings are removed too unless ``keep_ends``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: bytes that are not UTF-8 (names file, line, column and byte), or a carriage
            return that does not end a line (a file with old Mac ``\r`` line endings would
            otherwise be read as a few giant lines).
    """
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            line = decode_line(raw, path, number)
            body = line[:-2] if line.endswith("\r\n") else line.rstrip("\n")
            if "\r" in body:
                raise ValueError(
                    f"{path}:{number}: a carriage return (\\r) that does not end a line (old Mac line endings "
                    f"join {body.count(chr(13)) + 1} lines here); convert the file's line endings to \\n"
                )
            yield number, line if keep_ends else body


def read_text(path: str | Path) -> str:
    """The whole of a UTF-8 text file, byte-order marks removed (see ``text_lines``)."""
    return "".join(line for _, line in text_lines(path, keep_ends=True))


def write_jsonl(target: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Write ``records`` as JSON Lines atomically; return how many were written."""
    count = 0
    with atomic_path(target) as tmp, tmp.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def json_lines(path: str | Path) -> Iterator[tuple[str, Any]]:
    """``(file:line, value)`` for each non-blank line of a JSON Lines file, as read.

    Raises:
        FileNotFoundError, ValueError: as ``text_lines``; a line that is not valid JSON (names
            file and line).
    """
    for number, line in text_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not valid JSON ({err.msg})") from None


def read_json(path: str | Path, missing: str) -> Any:
    """The JSON value in ``path``.

    Raises:
        FileNotFoundError: no such file; the message is ``path: missing``.
        ValueError: not valid JSON (names the file and the position).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {missing}")
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from err
