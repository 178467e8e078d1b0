"""Hugging Face Hub model ids (``org/name`` or ``org/name@revision``) as ``pretrained:`` values.

An id is resolved by ``huggingface_hub.snapshot_download`` into its standard cache, so the
Hub's own settings apply as they do in transformers: ``HF_HOME`` / ``HF_HUB_CACHE`` (where the
cache is), ``HF_HUB_OFFLINE=1`` (use the cache only, never the network) and ``HF_TOKEN`` (private
and gated models). Only the files bertkit reads are fetched: ``config.json``, the tokenizer's
files and ``model.safetensors``; ``pytorch_model.bin`` only where a model has no safetensors file
(read with ``torch.load(weights_only=True)``, which runs no pickled code).

A resolved snapshot is the folder ``<cache>/models--org--name/snapshots/<commit>``: its commit
hash pins the weights, and ``pinned`` writes it into the value a checkpoint records.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*(?:/[A-Za-z0-9][\w.-]*)?)(?:@(?P<revision>[\w./-]+))?")
COMMIT = re.compile(r"[0-9a-f]{40}")
TOKENIZER_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]


def hub_id(value: str) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` of a value written as a Hub id (``org/name``, ``name``, either with
    ``@revision``: a branch, tag or commit hash), or None for anything else (a path with more
    than one ``/``, a ``.txt`` file, a name starting with ``.``)."""
    match = HUB_ID.fullmatch(value)
    if match is None or value.endswith(".txt") or ".." in value or "--" in match["repo"]:
        return None
    return match["repo"], match["revision"]


def hub_commit(directory: str | Path) -> tuple[str, str] | None:
    """``(repo_id, commit)`` of a folder that is a snapshot in a Hub cache
    (``…/models--org--name/snapshots/<commit>``), or None."""
    path = Path(directory)
    repo = path.parent.parent.name
    if path.parent.name != "snapshots" or not repo.startswith("models--") or not COMMIT.fullmatch(path.name):
        return None
    return repo.removeprefix("models--").replace("--", "/"), path.name


def pinned(value: str, directory: str | Path) -> str:
    """``value`` with its revision replaced by the commit ``directory`` holds, when ``directory``
    is a Hub snapshot (``org/name`` → ``org/name@<commit>``); otherwise ``value`` unchanged."""
    resolved = hub_commit(directory)
    return value if resolved is None else f"{resolved[0]}@{resolved[1]}"


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def _cache() -> str:
    from huggingface_hub import constants

    home = os.environ.get("HF_HOME")  # read now, not when huggingface_hub was imported
    return os.environ.get("HF_HUB_CACHE") or (str(Path(home, "hub")) if home else str(constants.HF_HUB_CACHE))


def hub_snapshot(repo_id: str, revision: str | None, field: str, weights: bool = True) -> Path:
    """The snapshot folder of a Hub model, downloaded into the cache unless it is there (or,
    offline, only from the cache).

    Args:
        repo_id: ``org/name``.
        revision: a branch, tag or commit hash; None: ``main``.
        field: the setting that named it, for messages (``model.pretrained``).
        weights: also fetch the weights (False: the config and tokenizer files only).

    Raises:
        FileNotFoundError: not in the cache while offline (the message names the id, the cache and
            ``HF_HUB_OFFLINE``), no such model or revision on the Hub, a gated or private model
            without access (``HF_TOKEN``), the Hub unreachable, or a model without weights bertkit
            reads.
    """
    from huggingface_hub import snapshot_download

    named = repo_id + (f"@{revision}" if revision else "")
    offline, cache = _offline(), _cache()

    def fetch(patterns: list[str]) -> Path:
        try:
            return Path(
                snapshot_download(
                    repo_id, revision=revision, allow_patterns=patterns, cache_dir=cache, local_files_only=offline
                )
            )
        except OSError as err:  # huggingface_hub's errors are all OSErrors
            raise FileNotFoundError(_why(field, named, cache, offline, err)) from None

    folder = fetch(TOKENIZER_FILES + ["model.safetensors"] if weights else TOKENIZER_FILES)
    if weights and not (folder / "model.safetensors").is_file():
        folder = fetch(["pytorch_model.bin"])
        if not (folder / "pytorch_model.bin").is_file():
            raise FileNotFoundError(
                f"{field}={named!r}: the snapshot {folder} has no model.safetensors nor pytorch_model.bin "
                "(sharded weights are not read)"
            )
    return folder


def _why(field: str, named: str, cache: str, offline: bool, err: OSError) -> str:
    kind = type(err).__name__
    if offline:
        return (
            f"{field}={named!r}: not in the Hugging Face cache {cache} and HF_HUB_OFFLINE=1 forbids downloading it; "
            "download it once with the network on, or point HF_HUB_CACHE (or HF_HOME) at a cache that has it"
        )
    if kind in ("RepositoryNotFoundError", "GatedRepoError") or "401" in str(err):
        return (
            f"{field}={named!r}: no such model on the Hugging Face Hub, or it is private or gated and HF_TOKEN "
            "gives no access to it"
        )
    if kind == "RevisionNotFoundError":
        return f"{field}={named!r}: the model has no such revision (a branch, tag or commit hash)"
    reason = (str(err).strip().splitlines() or [kind])[0][:200]
    return f"{field}={named!r}: could not be fetched into the Hugging Face cache {cache} ({reason})"
