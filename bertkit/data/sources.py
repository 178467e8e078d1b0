"""``SplitFiles``: where one task's split files are, found the way ``BertDataModule`` documents.

In order: ``hf_dataset`` (a Hugging Face data set, ``bertkit.data.hf_datasets``), ``data_dir``,
``$BERTKIT_DATA_DIR/<dataset>``, else the small sample the task's plugin ships
(``Task.sample_files``), with a message saying how to use the real data. The data module holds
one for its task, or one per named task of ``data.tasks``; reading the files is the task's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bertkit.data.hf_datasets import HFSplits, load_splits
from bertkit.data.samples import cache_dir
from bertkit.data.streaming import is_remote
from bertkit.tasks.task import Task
from bertkit.utils.io import file_names

log = logging.getLogger(__name__)

DATA_ENV = "BERTKIT_DATA_DIR"

Source = Path | dict[str, Path] | HFSplits
"""A data directory, a sample's files by split, or a Hugging Face data set's splits."""


class SplitFiles:
    """One task's data directory (or data set, or sample) and split file names.

    Args:
        settings: ``data_dir``, ``dataset``, ``hf_dataset``, ``hf_config`` and the split files
            (``train_file`` …), read when needed (a recipe's data settings, or a ``TaskData``'s).
        field: where ``settings`` are, for messages: ``data`` or ``data.tasks.<name>``.
        task: the task that reads the files (called only where no data directory or data set is
            configured, for its bundled sample: ``Task.sample_files``).
    """

    def __init__(self, settings: Mapping[str, Any], field: str, task: Callable[[], Task]) -> None:
        self.settings, self.field, self._task = settings, field, task
        self._source: Source | None = None

    @property
    def found(self) -> Source | None:
        """The source once looked up (``source``), else None."""
        return self._source

    def source(self) -> Source:
        """The data directory, the sample's files by split, or the data set's splits (looked up
        once).

        Raises:
            ValueError: no data directory or data set is configured and the task has no sample.
        """
        if self._source is None:
            self._source = self._find()
        return self._source

    def describe(self) -> str:
        """Where the data was read from: a folder, ``hf:<data set>``, or ``sample``."""
        source = self.source()
        if isinstance(source, dict):
            return "sample"
        return f"hf:{source.spec}" if isinstance(source, HFSplits) else str(source)

    def _find(self) -> Source:
        files, field = self.settings, self.field
        if files.get("hf_dataset"):
            return load_splits(files["hf_dataset"], files.get("hf_config"))
        if files["data_dir"]:
            return Path(files["data_dir"]).expanduser()
        root = os.environ.get(DATA_ENV)
        if root and files["dataset"]:
            return Path(root).expanduser() / files["dataset"]
        sample = self._task().sample_files()
        if sample is None:
            wanted = [n for split in ("train", "validation", "test") for n in file_names(files[f"{split}_file"])]
            where = (
                f"{DATA_ENV}=ROOT (reads ROOT/{files['dataset']})"
                if files["dataset"]
                else f"{DATA_ENV} with {field}.dataset"
            )
            raise ValueError(
                f"no data: set {field}.data_dir DIR (a folder holding {', '.join(wanted) or 'the split files'}) or "
                f"{where}; {type(self._task()).__name__} has no bundled sample for these settings"
            )
        dataset = files["dataset"]
        where = f"set {DATA_ENV}=ROOT (reads ROOT/{dataset})" if dataset else f"give {field}.dataset"
        generated = Path(sample["train"]).resolve().is_relative_to(cache_dir().resolve())
        log.warning(
            "No data directory given: using %s %s (it shows the loop runs; its scores say nothing of the task). "
            "For the real data pass --%s DIR or %s.",
            "a sample generated from made-up texts," if generated else "the bundled sample",
            Path(sample["train"]).parent,
            f"{field}.data_dir",
            where,
        )
        return sample

    def path(self, split: str, name: str) -> Path:
        """An absolute path, a path that exists from the working directory, else the split's file in
        the source. The bundled sample stands in for the recipe's split files only: a predict file
        other than the test file must exist.

        Raises:
            FileNotFoundError: the file does not exist (named as given and where it was looked for).
        """
        if is_remote(name):  # an object store's folder of litdata chunks: its reader checks it
            return name  # type: ignore[return-value]
        given = Path(name).expanduser()
        source = None if given.is_absolute() or given.is_file() else self.source()
        if source is None:
            path = given
        elif isinstance(source, HFSplits):
            path = source.path(split, name, self.field)
        elif not isinstance(source, dict):
            path = source / given
        elif split == "predict" and name != self.settings["test_file"]:
            raise FileNotFoundError(
                f"{given}: {self.field}.predict_file not found (looked in {Path.cwd()}; no data directory is set)"
            )
        else:
            path = source["test" if split == "predict" else split]
        if not path.exists():  # a file, or a folder for tasks that read folders (a corpus, shards)
            raise FileNotFoundError(f"{path}: {self.field}.{split}_file not found")
        return path

    def check(self, split: str) -> None:
        """Check that the split's files exist where a data directory (``data_dir``, or
        ``$BERTKIT_DATA_DIR/<dataset>``) says they are; the sample and a data set are checked
        when read.

        Raises:
            FileNotFoundError: a split file is missing (named as ``path`` names it).
        """
        files = self.settings
        if files.get("hf_dataset") or not (files["data_dir"] or (os.environ.get(DATA_ENV) and files["dataset"])):
            return
        for name in file_names(files[f"{split}_file"]):
            self.path(split, name)

    def shown(self, path: Path) -> str | None:
        """How a data set's cached split file is named to the user (``SPEC[split]``, its lines
        then the data set's records in order); None for a file of the user's."""
        source = self.source()
        return source.where(path) if isinstance(source, HFSplits) else None
