"""Memory-mapped instance shards: write once, read any instance without loading the rest.

A prepared directory holds ``manifest.json`` (settings, vocabulary fingerprint, shard list) and
one folder per shard of flat ``.npy`` arrays; instance i of a shard spans
``offsets[i]:offsets[i + 1]`` of the token arrays:

    input_ids (int32), word_starts (bool)            one entry per token
    offsets (int64, N + 1), segment_a_length (int32), sentence_label (int8)
    mask_offsets (int64, N + 1), masked_positions (int32), masked_input_ids (int32)   static masks only

``input_ids`` are never masked on disk; a static mask stores the chosen positions and what they
are replaced with, so the same shards also serve dynamic masking. Shard folders and the manifest
are written to temporary names and renamed, so a crash never leaves a half-written shard under a
final name. Readers open the arrays with ``numpy.load(mmap_mode="r")`` lazily in each process
(DataLoader workers included), so memory does not grow with the corpus.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from bertkit_plugins.pretraining.instances import Instance
from bertkit_plugins.pretraining.masking import Masked

from bertkit.api.task import atomic_path, fetch_file, is_remote, read_json, replace_output, write_chunks

MANIFEST = "manifest.json"
PREPARE_AGAIN = "run `bertkit prepare` again with overwrite=true"
FORMAT = 1
TOKEN_ARRAYS = ("input_ids", "word_starts")
INSTANCE_ARRAYS = ("offsets", "segment_a_length", "sentence_label")
MASK_ARRAYS = ("mask_offsets", "masked_positions", "masked_input_ids")


def write_shard(directory: Path, instances: list[Instance], masks: list[Masked] | None) -> dict[str, Any]:
    """Write one shard folder atomically (rename of a temporary folder); return its manifest entry."""
    lengths = np.array([len(x.input_ids) for x in instances], dtype=np.int64)
    arrays = {
        "input_ids": np.array([t for x in instances for t in x.input_ids], dtype=np.int32),
        "word_starts": np.array([s for x in instances for s in x.word_starts], dtype=bool),
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "segment_a_length": np.array([x.segment_a_length for x in instances], dtype=np.int32),
        "sentence_label": np.array([x.sentence_label for x in instances], dtype=np.int8),
    }
    if masks is not None:
        counts = np.array([len(m.positions) for m in masks], dtype=np.int64)
        arrays["mask_offsets"] = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        arrays["masked_positions"] = np.array([p for m in masks for p in m.positions], dtype=np.int32)
        arrays["masked_input_ids"] = np.array([m.input_ids[p] for m in masks for p in m.positions], dtype=np.int32)
    tmp = directory.with_name(f".{directory.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, array in arrays.items():
        np.save(tmp / f"{name}.npy", array)
    shutil.rmtree(directory, ignore_errors=True)
    replace_output(tmp, directory)
    return {"name": directory.name, "instances": len(instances), "tokens": int(lengths.sum())}


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    with atomic_path(directory / MANIFEST) as tmp:
        tmp.write_text(json.dumps({"format": FORMAT, **manifest}, indent=2) + "\n", encoding="utf-8")


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The manifest of a prepared directory, or of an object store's (``s3://…``: fetched into
    the cache).

    Raises:
        FileNotFoundError: no ``manifest.json`` (not prepared, or preparation did not finish).
        ValueError: not valid JSON, or another format version.
    """
    path = fetch_file(directory, MANIFEST) if is_remote(directory) else Path(directory) / MANIFEST
    manifest = read_json(path, "no manifest; run `bertkit prepare` on the corpus first")
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: shard format {manifest.get('format')!r}, this bertkit reads {FORMAT}")
    return manifest


class Shards:
    """All instances of a prepared directory, by global index, read from memory-mapped arrays.

    ``shards[i]`` is a dict: ``input_ids``, ``word_starts``, ``segment_a_length``,
    ``sentence_label`` and, for static masks, ``masked_positions`` and ``masked_input_ids``
    (numpy arrays / ints). ``lengths`` gives every instance's token count without reading tokens.
    Pickling (to DataLoader workers) sends the path only; each process maps the files itself.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        counts = [s["instances"] for s in self.manifest["shards"]]
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64).tolist()
        self.static = bool(self.manifest.get("static_masking"))
        self._arrays: list[dict[str, np.ndarray]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arrays": None}

    def _open(self) -> list[dict[str, np.ndarray]]:
        if self._arrays is None:
            names = TOKEN_ARRAYS + INSTANCE_ARRAYS + (MASK_ARRAYS if self.static else ())
            arrays = []
            for shard in self.manifest["shards"]:
                folder = self.directory / shard["name"]
                try:
                    loaded = {n: np.load(folder / f"{n}.npy", mmap_mode="r") for n in names}
                except (OSError, ValueError) as err:
                    raise ValueError(f"{folder}: unreadable shard ({err}); {PREPARE_AGAIN}") from None
                if len(loaded["offsets"]) != shard["instances"] + 1:
                    raise ValueError(
                        f"{folder}: {len(loaded['offsets']) - 1} instances, the manifest says {shard['instances']} "
                        f"(shards of another preparation); {PREPARE_AGAIN}"
                    )
                arrays.append(loaded)
            self._arrays = arrays
        return self._arrays

    def __len__(self) -> int:
        return self.starts[-1]

    @property
    def lengths(self) -> np.ndarray:
        """(N,) tokens per instance."""
        return np.concatenate([np.diff(a["offsets"]) for a in self._open()]) if len(self) else np.zeros(0, np.int64)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self):
            raise IndexError(f"instance {index} of {len(self)}")
        s = bisect.bisect_right(self.starts, index) - 1
        a, i = self._open()[s], index - self.starts[s]
        lo, hi = a["offsets"][i], a["offsets"][i + 1]
        item = {
            "input_ids": np.asarray(a["input_ids"][lo:hi]),
            "word_starts": np.asarray(a["word_starts"][lo:hi]),
            "segment_a_length": int(a["segment_a_length"][i]),
            "sentence_label": int(a["sentence_label"][i]),
        }
        if self.static:
            mlo, mhi = a["mask_offsets"][i], a["mask_offsets"][i + 1]
            item["masked_positions"] = np.asarray(a["masked_positions"][mlo:mhi])
            item["masked_input_ids"] = np.asarray(a["masked_input_ids"][mlo:mhi])
        return item


def instance_items(directory: Path, span: tuple[int, int]) -> Iterator[dict[str, Any]]:
    """The instances ``span[0]:span[1]`` of a prepared directory, each with its ``index``."""
    shards = Shards(directory)
    for index in range(*span):
        yield {"index": index, **shards[index]}


def stream_shards(directory: Path, chunk_bytes: str | int = "64MB", workers: int = 1) -> None:
    """Rewrite a prepared directory's shards as litdata chunks (``write_chunks``), each shard's
    instances in order, the manifest kept with ``"storage": "litdata"``: the same instances,
    streamed (``bertkit prepare storage=litdata``)."""
    shards = Shards(directory)
    spans = list(zip(shards.starts[:-1], shards.starts[1:], strict=True))
    tmp = directory.with_name(f".{directory.name}.litdata{os.getpid()}")
    write_chunks(partial(instance_items, directory), spans, tmp, chunk_bytes, workers=workers, expected=len(shards))
    with atomic_path(tmp / MANIFEST) as path:
        path.write_text(json.dumps({**shards.manifest, "storage": "litdata"}, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(directory)
    replace_output(tmp, directory)
