"""File input and output: atomic writes (nothing half-written is ever left under a user's file
name) and UTF-8 text reading whose errors name the file and line."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bertkit.utils.schema import parse_json

BOM = "\ufeff"


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target`` in one rename.

    On an exception the temporary file is removed and ``target`` is left as it was; a full disk
    is an ``OSError`` naming ``target``.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        with _full_disk(target):
            yield tmp
        if tmp.is_file():  # mkstemp makes 0600
            replace_output(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def replace_output(source: str | Path, target: str | Path) -> None:
    """Move a finished file or folder ``source`` onto ``target`` in one rename, with ``target``'s
    permission bits if it exists (a replaced output keeps them, never wider), else those a new
    file (0666) or folder (0777) gets under the umask. Every output bertkit writes reaches its
    name through here (``atomic_path``, ``atomic_dir``, the parts of ``predict`` and ``embed``).
    """
    source, target = Path(source), Path(target)
    source.chmod(_mode(target, 0o777 if source.is_dir() else 0o666))
    os.replace(source, target)


@contextmanager
def _full_disk(target: Path) -> Iterator[None]:
    """A write that fails for want of space (``ENOSPC``, ``EDQUOT``, or ``torch.save``'s
    ``RuntimeError: ... file write failed``) raised again as one ``OSError`` naming ``target``."""
    try:
        yield
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise OSError(err.errno, f"{target}: not written ({os.strerror(err.errno)}); it was left as it was") from None
    except RuntimeError as err:
        if "write failed" not in str(err):
            raise
        raise OSError(
            errno.ENOSPC,
            f"{target}: not written ({str(err).splitlines()[0]}: is the disk full?); it was left as it was",
        ) from None


@contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield a new empty folder beside ``target``; on success it takes ``target``'s place (an
    existing ``target`` is moved aside, then removed), so that ``target`` never mixes files of two
    writes (an old ``model.onnx`` beside new weights). On an exception the new folder is removed
    and ``target`` is left as it was.

    Raises:
        ValueError: ``target`` is a file, or a folder that is neither empty nor a model folder
            (no ``config.json``): it is not replaced (nothing of the user's is deleted).
    """
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise ValueError(f"{target}: a file, not a folder; choose another output")
    if target.is_dir() and any(target.iterdir()) and not (target / "config.json").is_file():
        held = sorted(p.name for p in target.iterdir())[:5]
        raise ValueError(f"{target}: a folder that is not a model folder (it holds {held}); choose a new folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        with _full_disk(target):
            yield tmp
        mode = _mode(target, 0o777)
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, old / target.name)
        tmp.chmod(mode)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _mode(target: Path, default: int) -> int:
    """The permission bits of ``target`` if it exists (a replaced output keeps them, never wider),
    else ``default`` less the umask."""
    try:
        return target.stat().st_mode & 0o777
    except FileNotFoundError:
        return default & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def decode_line(raw: bytes, path: str | Path, number: int) -> str:
    """One line of ``path`` as text, with every byte-order mark (U+FEFF) removed.

    Raises:
        ValueError: the bytes are not UTF-8, or hold a NUL (``check_no_nul``); the message
            names file, line, column and byte.
    """
    try:
        text = raw.decode("utf-8").replace(BOM, "")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}:{number}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1}); "
            "re-save the file as UTF-8"
        ) from None
    check_no_nul(text, f"{path}:{number}")
    return text


def check_no_nul(text: str, where: str) -> None:
    """Refuse text with a NUL character: valid UTF-8, but what a UTF-16 file without a byte-order
    mark reads as (``a`` is ``61 00``), never part of a recipe or a data set's text.

    Raises:
        ValueError: names ``where``, the column and the likely encoding.
    """
    at = text.find("\x00")
    if at >= 0:
        raise ValueError(
            f"{where}: a NUL character (byte 0x00) at column {at + 1}: the file looks like UTF-16 (or another "
            "encoding with NUL bytes) without a byte-order mark, not UTF-8; re-save it as UTF-8"
        )


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
        FileNotFoundError, ValueError: as ``text_lines``; a line that is not JSON as
            ``parse_json`` reads it (names file and line).
    """
    for number, line in text_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        yield where, parse_json(line, where)


def read_json(path: str | Path, missing: str) -> Any:
    """The JSON value in ``path``.

    Raises:
        FileNotFoundError: no such file; the message is ``path: missing``.
        ValueError: not JSON as ``parse_json`` reads it (names the file and the position).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {missing}")
    return parse_json(read_text(path), str(path), whole_file=True)


def file_names(given: str | list[str] | None) -> list[str]:
    """A split setting's file names: none, the one given, or each of a list (``data.train_file``)."""
    return [] if given is None else [given] if isinstance(given, str) else list(given)
