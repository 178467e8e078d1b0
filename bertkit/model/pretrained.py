"""Resolving ``pretrained:`` values: a directory path, a name some plugin registered, or a
Hugging Face Hub id (``org/name[@revision]``, ``bertkit.model.hub``)."""

from __future__ import annotations

from pathlib import Path

from bertkit.model.hub import COMMIT, hub_id, hub_snapshot
from bertkit.model.tokenizer import BertTokenizer
from bertkit.plugins import registered
from bertkit.utils.choices import check_int
from bertkit.utils.io import read_json

SENTENCE_CONFIG = "sentence_bert_config.json"
"""sentence-transformers' settings file in a model directory (``max_seq_length``, ``do_lower_case``)."""


def resolve_pretrained(name_or_path: str, field: str = "model.pretrained", weights: bool = True) -> Path:
    """Directory of a pretrained model given as a path, a registered name or a Hub id (its
    snapshot in the Hugging Face cache, fetched unless it is there; ``weights`` False fetches the
    config and tokenizer only); ``field`` names the setting in errors.

    Raises:
        FileNotFoundError: none of these (the message lists the registered names), the named
            model is not installed (its plugin says how to install it), or the Hub id cannot be
            resolved (``bertkit.model.hub.hub_snapshot``: offline and not cached, no such model …).
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    known = registered("register_pretrained")
    if name_or_path in known:
        return Path(known[name_or_path]())
    names = ", ".join(sorted(known)) or "none"
    repo = hub_id(name_or_path)
    if repo is None:
        raise FileNotFoundError(
            f"{field}={name_or_path!r} is not a directory, a registered model name (registered: {names}) nor a "
            "Hugging Face Hub id (org/name or org/name@revision)"
        )
    try:
        return hub_snapshot(*repo, field, weights)
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{err}; nor is it a directory or a registered model name (registered: {names})"
        ) from None


def load_tokenizer(
    vocab: str | Path, lowercase: bool = True, cls: type[BertTokenizer] = BertTokenizer
) -> BertTokenizer:
    """A tokenizer (of class ``cls``, an encoder family's) from a ``vocab.txt`` file
    (``lowercase`` applies), a model or tokenizer directory, a registered model name or a Hub id
    (their own settings apply).

    Raises:
        FileNotFoundError: none of these; see ``resolve_pretrained``.
    """
    path = Path(vocab).expanduser()
    if path.is_file():
        return cls.from_vocab(path, lowercase)
    if path.suffix == ".txt":
        raise FileNotFoundError(f"model.vocab_file={str(vocab)!r}: vocabulary file not found")
    return cls.from_pretrained(resolve_pretrained(str(vocab), "model.vocab_file", weights=False))


def declared_max_length(directory: str | Path) -> int | None:
    """The tokens per text (specials included) a pretrained directory says its model reads: the
    ``max_seq_length`` of sentence-transformers' ``sentence_bert_config.json`` (256 for
    all-MiniLM-L6-v2, which sentence-transformers truncates at), or None where the directory
    says none.

    Raises:
        ValueError: the file is not a JSON object, or its ``max_seq_length`` is not a positive
            integer (names the file).
    """
    path = Path(directory) / SENTENCE_CONFIG
    if not path.is_file():
        return None
    settings = read_json(path, "not found")
    if not isinstance(settings, dict):
        raise ValueError(
            f"{path}: expected a JSON object (sentence-transformers' settings), not {type(settings).__name__}"
        )
    if "max_seq_length" not in settings:
        return None
    return check_int(settings["max_seq_length"], f"{path}: max_seq_length", 1)


def base_model(pretrained: str) -> tuple[str, str | None] | None:
    """The Hub repository a ``pretrained:`` value's weights come from, as a model card names its
    base model: ``(repo_id, commit)`` for a Hub id resolved in training (``org/name@<commit>``,
    ``bertkit.model.hub.pinned``), ``(repo_id, None)`` for a registered name whose ``locate``
    declares the repository it is a copy of (``locate.hub_id``; its revision unknown), else None
    (a local folder, an unpinned id)."""
    repo = hub_id(pretrained)
    if repo is not None and repo[1] and COMMIT.fullmatch(repo[1]):
        return repo
    if "/" in pretrained or Path(pretrained).expanduser().is_dir():
        return None
    copied = getattr(registered("register_pretrained").get(pretrained), "hub_id", None)
    return (copied, None) if copied else None
