"""Data streamed from litdata chunks (the ``stream`` extra): data sets larger than memory or than
the local disk, read from a local folder or an object store while training.

A streamed split is a folder that ``litdata.optimize`` wrote (``index.json`` and ``chunk-*.bin``),
or the URL of one: ``s3://bucket/prefix``, ``gs://``, ``azure://``, ``hf://`` or litdata's
``local:/path`` (a local folder read as if it were remote, through the cache). Training reads it
with litdata's ``StreamingDataset`` and ``StreamingDataLoader``:

- each process reads its own chunks (litdata's assignment by ``torch.distributed`` rank), and
  under DDP every process gets the same number of items, so the gradient sync never waits on a
  process that ran out (``drop_last``; the items left out are reported);
- the order is shuffled by chunk and within chunks from ``data.seed`` and the epoch;
- the loader's ``state_dict`` is its place inside the epoch, saved in checkpoints, so a run
  resumed with ``--ckpt_path last`` goes on with the batch after the checkpoint's.

Evaluation reads a streamed split in its stored order, by index. Reference: litdata
(Lightning-AI/litData), ``optimize`` and ``StreamingDataset``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from bertkit.data.samples import cache_dir
from bertkit.utils.io import atomic_path
from bertkit.utils.optional import require_module

if TYPE_CHECKING:  # annotations only: the CLI checks its extras with this module before importing torch
    from bertkit.model.tokenizer import BertTokenizer
    from bertkit.tasks.task import Feature, Task

log = logging.getLogger(__name__)

STREAM_INSTALL = "pip install 'bertkit[stream]'"
INDEX = "index.json"
REMOTE_PREFIXES = ("s3://", "gs://", "azure://", "hf://", "r2://", "local:")


def require_litdata() -> ModuleType:
    """The ``litdata`` module.

    Raises:
        ImportError: it is not installed; the message names the extra that adds it.
    """
    return require_module("litdata", "streamed data (litdata chunks)", STREAM_INSTALL)


def is_remote(location: str | Path) -> bool:
    """Whether ``location`` is an object-store URL litdata reads (``s3://``, ``local:`` …)."""
    return str(location).startswith(REMOTE_PREFIXES)


def is_streamed(location: str | Path) -> bool:
    """Whether ``location`` is a streamed split: a URL, or a folder holding litdata's ``index.json``."""
    return is_remote(location) or (Path(location) / INDEX).is_file()


def joined(location: str | Path, name: str) -> str | Path:
    """``location/name`` for a folder or a URL (``Path`` would fold a URL's ``//``)."""
    return f"{str(location).rstrip('/')}/{name}" if is_remote(location) else Path(location) / name


def digest(location: str | Path) -> str:
    """A short name for ``location`` in the cache."""
    return hashlib.sha256(str(location).encode("utf-8")).hexdigest()[:16]


def fetch_file(location: str | Path, name: str) -> Path:
    """The file ``name`` of a streamed folder, as a local path: itself for a folder, a copy in
    the cache (``cache_dir()/litdata``) for a URL, downloaded with litdata's downloader.

    Raises:
        FileNotFoundError: a local folder has no such file.
    """
    if not is_remote(location):
        path = Path(location) / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found")
        return path
    require_litdata()
    from litdata.streaming.downloader import get_downloader

    folder = cache_dir() / "litdata" / "files" / digest(location)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    target.unlink(missing_ok=True)  # a file of an earlier read: the store's may have changed
    get_downloader(str(location), str(folder), []).download_file(str(joined(location, name)), str(target))
    return target


def write_chunks(
    items: Callable[[Any], Iterable[dict[str, Any]]],
    inputs: Sequence[Any],
    output: str | Path,
    chunk_bytes: str | int = "64MB",
    chunk_size: int | None = None,
    workers: int = 1,
    expected: int | None = None,
) -> int:
    """Write the items ``items(input)`` yields for every input as litdata chunks in ``output``
    (``litdata.optimize``; its ``index.json``, written last, marks a finished folder); return
    how many were written.

    Args:
        items: a picklable function (worker processes call it) from one input to its items,
            each a dict of numbers and numpy arrays.
        inputs: what the workers share out (shard folders, ranges of examples).
        output: the folder to write (replaced).
        chunk_bytes: the size of a chunk (litdata's ``chunk_bytes``; 64 MB: a few chunks per
            process even for small corpora, large enough for object stores).
        chunk_size: items per chunk instead of ``chunk_bytes``.
        workers: writer processes (started with ``spawn``: a script calling this from its top
            level needs ``if __name__ == "__main__":``).
        expected: the number of items the inputs hold, if known.

    Raises:
        ImportError: litdata is not installed.
        RuntimeError: fewer or more items were written than ``expected`` (a writer process
            failed: litdata reports it only in its log).
    """
    litdata = require_litdata()
    sizes = {"chunk_size": chunk_size} if chunk_size else {"chunk_bytes": chunk_bytes}
    with start_method_kept():  # litdata.optimize sets the process's start method to spawn for good
        litdata.optimize(
            fn=items,
            inputs=list(inputs),
            output_dir=str(output),
            num_workers=workers,
            mode="overwrite",
            verbose=False,
            **sizes,
        )
    written = sum(c["chunk_size"] for c in json.loads((Path(output) / INDEX).read_text("utf-8"))["chunks"])
    if expected is not None and written != expected:
        raise RuntimeError(
            f"{output}: {written} items written of {expected} (a writer process failed; see its log above)"
        )
    return written


@contextmanager
def start_method_kept() -> Iterator[None]:
    """Give the process back the ``multiprocessing`` start method it had (None: the platform's
    default, still unchosen) whatever the body sets: ``litdata.optimize`` sets ``spawn`` with
    ``force=True`` and leaves it, so every DataLoader worker the process starts afterwards
    (a fit after ``bertkit stream`` in one script or notebook) would import everything again."""
    before = multiprocessing.get_start_method(allow_none=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(before, force=True)


def stored_feature(item: dict[str, Any], epoch: int | None, seed: int) -> Feature:
    """A stored feature as the collator takes it (numpy arrays as lists)."""
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in item.items()}


class StreamedFeatures(Sequence[dict[str, Any]]):
    """Features in litdata chunks: a task's ``featurize`` returns these for a streamed split
    (``BertDataModule`` then trains with litdata's loader), and ``bertkit.data.streaming``'s
    writers make them.

    Args:
        location: the chunks' folder or URL (see the module docstring).
        to_feature: an item's feature: ``to_feature(item, epoch, seed)``, ``epoch`` counted from
            0 in training, None in evaluation, ``seed`` the data module's (random choices, such as
            masks, may depend on them; it must be picklable for DataLoader workers). Default: the
            item is the feature.
        cache: where chunks of a URL are cached (default ``cache_dir()/litdata``; litdata's
            ``max_cache_size`` bounds it).
    """

    def __init__(
        self,
        location: str | Path,
        to_feature: Callable[[dict[str, Any], int | None, int], Feature] = stored_feature,
        cache: str | Path | None = None,
    ) -> None:
        self.location, self.to_feature = location, to_feature
        self.cache = Path(cache) if cache is not None else cache_dir() / "litdata"
        self.training, self.seed = False, 0
        self._by_index: Any = None
        self.total = sum(c["chunk_size"] for c in json.loads(fetch_file(location, INDEX).read_text("utf-8"))["chunks"])

    def for_training(self, training: bool, seed: int = 0) -> None:
        """As ``LazyFeatures.for_training``: shuffled training order from ``seed`` and the epoch,
        or the stored order for evaluation."""
        self.training, self.seed = training, seed

    def _dataset(self, shuffle: bool) -> Any:
        require_litdata()
        from bertkit.data.litdata_stream import FeatureStream

        return FeatureStream(
            self.location, self.to_feature, training=shuffle, shuffle=shuffle, seed=self.seed, cache=self.cache
        )

    def __len__(self) -> int:
        """Every item of the split (a process reads fewer in training: ``training_loader``)."""
        return self.total

    def __getitem__(self, index: int) -> Feature:  # type: ignore[override]
        if not 0 <= index < self.total:
            raise IndexError(f"feature {index} of {self.total}")
        if self._by_index is None:
            self._by_index = self._dataset(shuffle=False)
            # A slice read makes litdata cache whole chunks: its byte-range reads of a URL came back empty.
            self._by_index[0:0]
        return self._by_index[int(index)]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_by_index": None}

    def training_loader(self, batch_size: int, **loader: Any) -> Any:
        """litdata's ``StreamingDataLoader`` over this process's share, shuffled from
        ``for_training``'s seed: its ``state_dict`` is its place in the epoch.

        Args:
            batch_size: features per batch.
            **loader: ``DataLoader`` arguments (``collate_fn``, ``num_workers`` …).
        """
        from litdata import StreamingDataLoader

        dataset = self._dataset(shuffle=True)
        return StreamingDataLoader(dataset, batch_size=batch_size, **loader)


MANIFEST = "manifest.json"
FORMAT = 1


def read_stream_manifest(location: str | Path) -> dict[str, Any]:
    """bertkit's ``manifest.json`` beside a streamed folder's chunks (what wrote them, with which
    vocabulary and settings).

    Raises:
        FileNotFoundError: there is none (chunks written by something else).
        ValueError: not JSON, or another format version.
    """
    path = fetch_file(location, MANIFEST)
    try:
        manifest = json.loads(path.read_text("utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{joined(location, MANIFEST)}: not JSON ({err})") from None
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{joined(location, MANIFEST)}: format {manifest.get('format')!r}, this bertkit reads {FORMAT}"
        )
    return manifest


def write_manifest(output: str | Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` into a folder of chunks, atomically (the folder's completion mark)."""
    with atomic_path(Path(output) / MANIFEST) as tmp:
        tmp.write_text(json.dumps({"format": FORMAT, **manifest}, indent=2) + "\n", encoding="utf-8")


@dataclass
class StreamedSplit:
    """A split of ready features in litdata chunks (``BertDataModule.write_stream``, ``bertkit
    stream``): the data module reads it in place of the task's file, as one stand-in example.

    Args:
        location: the folder or URL.
        manifest: its ``manifest.json``: ``task`` (the spec that wrote it), ``learned`` (what the
            task learned from its training examples), ``vocab_sha256``, ``max_length``.
    """

    location: str | Path
    manifest: dict[str, Any]

    def teach(self, task: Task, field: str) -> None:
        """Give ``task`` what the writing task learned from the training examples (labels …).

        Raises:
            ValueError: the chunks hold another task's features, or ``task`` already knows
                another label set (``field`` names the setting).
        """
        written = self.manifest["task"]["class_path"]
        if written != task.spec()["class_path"]:
            raise ValueError(
                f"{joined(self.location, MANIFEST)}: features of {written}, but {field} is {task.spec()['class_path']}"
            )
        task.restore_learned(self.manifest.get("learned", {}), built=task.ready, field=field)
        made, now = self.manifest["task"].get("init_args", {}), task.spec()["init_args"]
        changed = sorted(k for k in made.keys() & now.keys() if made[k] != now[k] and k not in task.learned)
        if changed:
            log.warning(
                "%s: the features were made with other %s (%s); they are used as made",
                joined(self.location, MANIFEST),
                ", ".join(f"{field}.init_args.{k}" for k in changed),
                "; ".join(f"{k}: {made[k]!r}, this run {now[k]!r}" for k in changed),
            )

    def features(self, tokenizer: BertTokenizer, max_length: int) -> StreamedFeatures:
        """The features, after checking they were made with this vocabulary and length.

        Raises:
            ValueError: another vocabulary, or features longer than ``max_length``.
        """
        where = joined(self.location, MANIFEST)
        if self.manifest["vocab_sha256"] != tokenizer.vocab_sha256():
            raise ValueError(
                f"{where}: features made with another vocabulary than the model's tokenizer (vocab_sha256)"
            )
        if self.manifest["max_length"] > max_length:
            raise ValueError(f"{where}: max_length {self.manifest['max_length']} > model.max_length {max_length}")
        return StreamedFeatures(self.location)


def _featurized(task: Task, tokenizer: BertTokenizer, max_length: int, part: tuple[int, list[Any]]) -> Iterator[dict]:
    start, examples = part
    for feature in task.featurize(examples, tokenizer, max_length):
        yield {**feature, "example_index": start + feature["example_index"]}


def write_split(
    task: Task,
    tokenizer: BertTokenizer,
    examples: list[Any],
    output: str | Path,
    max_length: int,
    part_size: int = 4096,
    chunk_bytes: str | int = "64MB",
    workers: int = 1,
) -> dict[str, Any]:
    """Featurize ``examples`` a part at a time (in ``workers`` processes) into litdata chunks
    with a ``manifest.json`` (``StreamedSplit``); return the manifest.

    Raises:
        ImportError: litdata is not installed.
    """
    parts = [(i, examples[i : i + part_size]) for i in range(0, len(examples), part_size)]
    written = write_chunks(
        partial(_featurized, task, tokenizer, max_length), parts, output, chunk_bytes, workers=workers
    )
    manifest = {
        "kind": "features",
        "task": task.spec(),
        "learned": {name: task.hparams.get(name) for name in task.learned},
        "vocab_sha256": tokenizer.vocab_sha256(),
        "max_length": max_length,
        "examples": len(examples),
        "features": written,
    }
    write_manifest(output, manifest)
    return manifest
