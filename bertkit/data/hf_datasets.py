"""Hugging Face ``datasets`` as a data source (``data.hf_dataset``; the ``datasets`` extra).

A data set — a name ``datasets.load_dataset`` knows, a folder written by ``save_to_disk``, a folder
of data files, or one Parquet/Arrow/JSON/CSV file — is loaded with ``datasets``, and each of its
splits is written once as JSON Lines into the cache (``<cache>/hf/<fingerprint>/<split>.jsonl``),
class-label ids as their names (``ner_tags`` 3 -> ``B-ORG``, ``label`` 1 -> ``positive``). The
head then reads the split with its own JSON Lines reader, with the checks and ``file:line``
messages it gives any file: token tagging reads ``tokens``/``ner_tags``, classification the
recipe's column names, question answering SQuAD's fields (``answers`` as
``{"text": [...], "answer_start": [...]}``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.samples import cache_dir
from bertkit.utils.io import atomic_path
from bertkit.utils.optional import require_module

log = logging.getLogger(__name__)

FILE_BUILDERS = {".parquet": "parquet", ".arrow": "arrow", ".json": "json", ".jsonl": "json", ".csv": "csv"}
DEFAULT_SPLITS = {"train": "train", "validation": "validation", "test": "test", "predict": "test"}


@dataclass(frozen=True)
class HFSplits:
    """The JSON Lines files of a data set's splits, by split name, and what was loaded."""

    spec: str
    files: dict[str, Path]

    def path(self, split: str, name: str, field: str) -> Path:
        """The file for bertkit's ``split`` whose recipe setting is ``name``: the data set's split of
        that name; for a file name (a recipe's ``eng.testa``, with a suffix or a folder), the split
        named like bertkit's (``validation`` for any validation file), with a warning.

        Raises:
            FileNotFoundError: no such split (a misspelt one is never replaced by another); the
                message lists the data set's splits.
        """
        if name in self.files:
            return self.files[name]
        default = DEFAULT_SPLITS[split]
        if ("." in name or "/" in name) and default in self.files:
            log.warning("%s.%s_file=%r is a file name: %s's split %r is read", field, split, name, self.spec, default)
            return self.files[default]
        raise FileNotFoundError(
            f"{field}.{split}_file={name!r}: {self.spec} has no split {name!r} (its splits: "
            f"{', '.join(self.files)}); name one of them, or null for none"
        )

    def where(self, path: Path) -> str | None:
        """How errors name the cached file ``path``: ``SPEC[SPLIT]``; None for another file."""
        split = next((s for s, p in self.files.items() if p == path), None)
        return None if split is None else f"{self.spec}[{split}]"


def load_splits(spec: str, config: str | None = None) -> HFSplits:
    """Load ``spec`` with ``datasets`` and write every split as JSON Lines (once per content).

    Args:
        spec: a data set name (``conll2003``), a ``save_to_disk`` folder, a folder of data files,
            or a ``.parquet``/``.arrow``/``.json``/``.jsonl``/``.csv`` file (its one split is ``train``).
        config: the data set's configuration name (``datasets.load_dataset``'s ``name``).

    Raises:
        ImportError: ``datasets`` is not installed (names the extra).
        ValueError: ``datasets`` cannot load it (its message, with ``spec``).
    """
    datasets = require_module("datasets", "data.hf_dataset", "pip install 'bertkit[datasets]'")
    loaded = _load(datasets, spec, config)
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    key = hashlib.sha256(json.dumps([spec, config, {k: v._fingerprint for k, v in loaded.items()}]).encode())
    folder = cache_dir() / "hf" / key.hexdigest()[:16]
    files = {}
    for split, dataset in loaded.items():
        files[split] = folder / f"{split}.jsonl"
        if not files[split].is_file():
            _write_jsonl(dataset, files[split])
    return HFSplits(spec, files)


def _load(datasets: Any, spec: str, config: str | None) -> Any:
    path = Path(spec).expanduser()
    try:
        if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
            return datasets.load_from_disk(str(path))
        if path.is_file():
            builder = FILE_BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise ValueError(f"expected one of {', '.join(FILE_BUILDERS)}")
            return datasets.load_dataset(builder, data_files=str(path))
        return datasets.load_dataset(spec, config)
    except (ValueError, FileNotFoundError, OSError, datasets.exceptions.DatasetNotFoundError) as err:
        raise ValueError(f"data.hf_dataset={spec!r}: datasets cannot load it: {err}") from None


def _label_names(feature: Any) -> list[str] | None:
    """The names of a ``ClassLabel`` feature, or of the ``ClassLabel`` items of a sequence."""
    names = getattr(feature, "names", None)
    if names is None and hasattr(feature, "feature"):
        names = getattr(feature.feature, "names", None)
    return names


def _write_jsonl(dataset: Any, path: Path) -> None:
    labels = {column: names for column, f in dataset.features.items() if (names := _label_names(f))}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as out:
        for row in dataset:
            for column, names in labels.items():  # -1: no label (GLUE's test splits)
                value = row[column]
                row[column] = [_name(names, v) for v in value] if isinstance(value, list) else _name(names, value)
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def _name(names: list[str], value: int) -> str | None:
    return names[value] if value >= 0 else None
