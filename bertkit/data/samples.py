"""Bundled samples: small generated data sets that heads offer when a recipe names no data
(``Head.sample_files``), so every recipe runs on a fresh clone. They are written, from a seeded
generator, into the cache folder (``$BERTKIT_CACHE``, else ``~/.cache/bertkit``) the first time
they are asked for. Samples are for seeing a recipe run, not for measuring anything: the texts
are made up and the tasks easy.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from bertkit.utils.io import atomic_path

CACHE_ENV = "BERTKIT_CACHE"


def cache_dir() -> Path:
    """``$BERTKIT_CACHE``, else ``~/.cache/bertkit``."""
    return Path(os.environ.get(CACHE_ENV, "~/.cache/bertkit")).expanduser()


def sample_files(name: str, contents: dict[str, tuple[str, str]]) -> dict[str, Path]:
    """Write a sample's files (once per content) and return them by split.

    Args:
        name: the sample's name (a folder under ``<cache>/samples``).
        contents: split -> (file name, text).

    Returns:
        split -> path, for ``Head.sample_files``.
    """
    digest = hashlib.sha256(repr(sorted(contents.items())).encode()).hexdigest()[:12]
    folder = cache_dir() / "samples" / f"{name}-{digest}"
    paths = {}
    for split, (file_name, text) in contents.items():
        path = folder / file_name
        if not path.is_file():
            with atomic_path(path) as tmp:
                tmp.write_text(text, encoding="utf-8")
        paths[split] = path
    return paths
