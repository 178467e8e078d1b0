"""Resolving ``pretrained:`` values: a directory path, or a name some plugin registered."""

from __future__ import annotations

from pathlib import Path

from bertkit.model.tokenizer import BertTokenizer
from bertkit.plugins import registered


def resolve_pretrained(name_or_path: str, field: str = "model.pretrained") -> Path:
    """Directory of a pretrained model given as a path or a registered name; ``field`` names the
    setting in errors.

    Raises:
        FileNotFoundError: neither an existing directory nor a registered name (the message lists
            the names), or the named model is not installed (its plugin says how to install it).
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    known = registered("register_pretrained")
    if name_or_path in known:
        return Path(known[name_or_path]())
    names = ", ".join(sorted(known)) or "none"
    raise FileNotFoundError(
        f"{field}={name_or_path!r} is not a directory nor a registered model name (registered: {names})"
    )


def load_tokenizer(
    vocab: str | Path, lowercase: bool = True, cls: type[BertTokenizer] = BertTokenizer
) -> BertTokenizer:
    """A tokenizer (of class ``cls``, an encoder family's) from a ``vocab.txt`` file
    (``lowercase`` applies), a model or tokenizer directory, or a registered model name (their
    own settings apply).

    Raises:
        FileNotFoundError: none of these; see ``resolve_pretrained``.
    """
    path = Path(vocab).expanduser()
    if path.is_file():
        return cls.from_vocab(path, lowercase)
    if path.suffix == ".txt":
        raise FileNotFoundError(f"model.vocab_file={str(vocab)!r}: vocabulary file not found")
    return cls.from_pretrained(resolve_pretrained(str(vocab), "model.vocab_file"))
