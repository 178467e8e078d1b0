"""``BertDataModule``: files -> a task's features -> dynamically padded, length-grouped batches.

The data module is generic: its ``Task`` reads the files and builds the features with a
tokenizer, so one data module serves every task, and it needs no model: give it a task and a
tokenizer and it reads, featurizes and batches on its own. ``setup`` reads the examples (and lets
the task ``learn`` from the training examples); features are built when a loader is first asked
for, after a checkpoint has restored what the task learned, and kept in memory.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from bertkit.data.collate import collate, padded_length
from bertkit.data.resumable import TrainingLoader, fingerprint
from bertkit.data.samplers import (
    BatchShardSampler,
    EvalShardSampler,
    IndexedByBatch,
    TokenBudgetBatchSampler,
    TrainShardSampler,
)
from bertkit.data.sources import Source, SplitFiles
from bertkit.data.streaming import (
    StreamedFeatures,
    StreamedSplit,
    is_streamed,
    read_stream_manifest,
    write_split,
)
from bertkit.model.config import MAX_LENGTH, MIN_LENGTH
from bertkit.model.tokenizer import BertTokenizer
from bertkit.tasks.task import BatchOrder, BatchSettings, Feature, LazyFeatures, Task, TaskExample, renamed_source
from bertkit.utils.choices import check_choice, check_int
from bertkit.utils.deprecation import warn_deprecated
from bertkit.utils.io import file_names, text_lines
from bertkit.utils.precision import check_float32

log = logging.getLogger(__name__)

MAX_TOKENS = 1 << 20
"""The most tokens a sequence setting may ask for (a bound checked before anything is allocated;
the model's ``max_position_embeddings`` bounds it further)."""
PredictFormat = Literal["auto", "text", "native"]
OPTIONAL_SIZES = {"max_length": (MIN_LENGTH, MAX_TOKENS), "eval_batch_size": (1, None)}
OPTIONAL_SIZES.update(pad_to_multiple_of=(1, MAX_TOKENS), max_tokens=(1, None))
"""The range of each size setting that None leaves unset."""
SINGLE_TASK = ("train_file", "validation_file", "test_file", "predict_file", "validation_split", "max_tokens")
"""The settings of a single task's data, which ``data.tasks`` replaces."""


@dataclass
class TaskData:
    """One task's data: where its split files are, as ``BertDataModule``'s arguments of the same
    names say (``hf_dataset``, else ``data_dir``, else ``$BERTKIT_DATA_DIR/<dataset>``, else the
    task's bundled sample). A split file left out means the task has no such split (no
    validation, no test …)."""

    data_dir: str | None = None
    dataset: str | None = None
    hf_dataset: str | None = None
    hf_config: str | None = None
    train_file: str | list[str] | None = None
    validation_file: str | None = None
    test_file: str | None = None
    predict_file: str | None = None


class BertDataModule(pl.LightningDataModule):
    """Data for any task: split files in a data directory, read and featurized by a ``Task``.

    Split files are read from, in order: ``data_dir``; ``$BERTKIT_DATA_DIR/<dataset>``; else the
    small sample the task's plugin ships (``Task.sample_files``; its test split also serves
    ``predict``), with a message saying how to use the real data (``split_files``: a
    ``bertkit.data.sources.SplitFiles`` per task).

    Args:
        task: the task that reads and featurizes the files. ``bertkit fit`` and ``compose`` give
            the model's (``model.task``); None takes the task of the ``BertModule`` a trainer runs
            with this data module (``trainer.fit(model, datamodule)``).
        tokenizer: the tokenizer features are made with; None: the model's, as for ``task``.
        unpadded: whether the encoder runs on the real tokens only (``model.unpad``; linked from
            the model by ``bertkit fit``): ``max_tokens`` then counts real tokens, else padded ones.
        data_dir: directory holding the split files.
        dataset: the data set's path under ``$BERTKIT_DATA_DIR`` (e.g. ``ner/conll2003``).
        hf_dataset: read the splits with Hugging Face ``datasets`` instead (the ``datasets``
            extra): a data set name, a ``save_to_disk`` folder, a folder of data files, or a
            Parquet/Arrow/JSON/CSV file (``bertkit.data.hf_datasets``). Each ``*_file`` then names a
            split of it; a name it does not have means the split named like bertkit's
            (``train``, ``validation``, ``test``; ``test`` for predict).
        hf_config: the data set's configuration (``datasets.load_dataset``'s ``name``).
        train_file: training split: absolute, relative to the working directory if it exists
            there, else relative to the data directory (the same for every ``*_file``). A list of
            files trains on their examples together, file after file, each read as the task reads
            it: the gold set and text a trained model labelled (``bertkit predict``'s output, a
            distillation transfer set: docs/distillation.md). A streamed folder is read alone.
        validation_file: validation split; None to skip validation (or see ``validation_split``).
        test_file: test split.
        predict_file: file to predict on.
        predict_format: ``auto`` (``.txt`` = plain text, one example per line; else the task's
            format), ``text``, or ``native``.
        validation_split: without a ``validation_file``, hold out this fraction of the training
            examples as the validation split: a random subset drawn with ``seed``, so the same
            seed gives the same split (for data sets without a dev file, such as MRPC).
        max_length: tokens per feature, specials included (≤ max_position_embeddings). None: the
            model's (``model.max_length``, which ``bertkit fit`` and ``attach`` give it, or that
            of the ``BertModule`` a trainer runs with it), or ``MAX_LENGTH`` without a model. A
            length given here that differs from the model's is release 0.1's way (the data module
            owned it): the model then records this one, with a deprecation warning.
        pad_to_multiple_of: pad every batch to its longest feature rounded up to a multiple of
            this (at most ``max_length``; ``bertkit.data.collate.padded_length``), so that the
            batches take a few lengths only (``m, 2m, …, max_length``): what lets a compiled
            padded encoder (``model.compile reduce-overhead``, ``model.unpad false``) replay one
            CUDA graph per length instead of recording each new one. The task says which keys run
            over the tokens (``Task.token_keys``). With ``max_tokens`` and the padded encoder,
            the budget counts the padded length. None: pad to the longest feature.
        batch_size: training batch size (features) of each process; with N processes each step
            trains on the N x ``batch_size`` features one process would take with that batch size
            (``TrainShardSampler``), and a run resumed inside an epoch goes on with the batch after
            the checkpoint's (``TrainingLoader``). See ``max_tokens``.
        max_tokens: define training batches by a token budget instead: at most this many real
            tokens per batch with the unpadded encoder (``model.unpad``), at most batch size x
            longest feature with the padded one (``TokenBudgetBatchSampler``). Random order each
            epoch (length-grouped with ``group_by_length``); the number of batches per epoch
            (and so the learning-rate schedule) follows from the budget. With N processes the
            budget is each process's (fairseq's ``--max-tokens``): the epoch's batches are dealt
            among them in turn (``BatchShardSampler``), so a step trains on about N x
            ``max_tokens`` tokens and an epoch has 1/N of the steps.
        eval_batch_size: batch size for validation/test/predict; None = ``2 * batch_size``.
        group_by_length: length-grouped training batches (less padding, faster on the padded
            path) instead of a uniformly random order (transformers' ``Trainer`` and Google BERT's
            default). Off by default: on CoNLL-2003 NER (4,000 sentences, 1 epoch, 5 seeds) it
            cost 4.1 ± 0.8 F1 (``benchmarks/results/seeds/ner/random-order.json``); on RTE it
            made no difference. Eval batches are always sorted by length.
        num_workers: DataLoader worker processes.
        seed: seed of the training order and of ``validation_split``.
        tasks: multi-task data, for a task with the same named ``Task.tasks``: each one's
            ``data_dir``/``dataset`` and split files (``TaskData``), read by that named task;
            the top-level files are then unused. How their features are batched is the
            task's (``Task.batch_order``; the multitask plugin: each batch holds one task's
            features, with N processes every process trains the same task at each step, its
            part of the global batch of N x ``batch_size``); ``validation_split`` and
            ``max_tokens`` are not available with tasks.
        predict_chunk_size: examples per ``bertkit predict`` pass: features are built, predicted
            and written this many examples at a time (a plain text file is also read that many
            lines at a time), so memory does not grow with the file and an interrupted run keeps
            what it wrote (``PredictionWriter``); 0 = the whole file in one pass.
        task_temperature: release 0.1's place of the multi-task task's mixing temperature
            (deprecated: give the task's own setting, ``model.task.init_args.temperature``);
            given, it overrides the task's (``BatchSettings.task_temperature``).
    """

    def __init__(
        self,
        task: Task | None = None,
        tokenizer: BertTokenizer | None = None,
        unpadded: bool = True,
        data_dir: str | None = None,
        dataset: str | None = None,
        hf_dataset: str | None = None,
        hf_config: str | None = None,
        train_file: str | list[str] | None = None,
        validation_file: str | None = None,
        test_file: str | None = None,
        predict_file: str | None = None,
        predict_format: PredictFormat = "auto",
        validation_split: float = 0.0,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        batch_size: int = 32,
        max_tokens: int | None = None,
        eval_batch_size: int | None = None,
        group_by_length: bool = False,
        num_workers: int = 0,
        seed: int = 0,
        tasks: dict[str, TaskData] | None = None,
        task_temperature: float | None = None,
        predict_chunk_size: int = 4096,
    ) -> None:
        super().__init__()
        check_choice("data.predict_format", predict_format, PredictFormat)
        check_float32(validation_split, "data.validation_split", low=0.0, high=1.0, high_open=True)
        check_int(batch_size, "data.batch_size", 1)
        check_int(num_workers, "data.num_workers", 0)
        check_int(predict_chunk_size, "data.predict_chunk_size", 0)  # 0: all at once
        optional = {"max_length": max_length, "eval_batch_size": eval_batch_size}
        optional.update(pad_to_multiple_of=pad_to_multiple_of, max_tokens=max_tokens)
        for name, value in optional.items():  # None: unset
            if value is not None:
                check_int(value, f"data.{name}", *OPTIONAL_SIZES[name])
        if isinstance(train_file, list) and (not train_file or not all(isinstance(f, str) and f for f in train_file)):
            raise ValueError(f"data.train_file={train_file!r}: expected a file name or a non-empty list of file names")
        if tasks:
            single = (train_file, validation_file, test_file, predict_file, validation_split, max_tokens)
            _check_task_settings(dict(zip(SINGLE_TASK, single, strict=True)))
        if task_temperature is not None:
            _deprecated_temperature(task_temperature, bool(tasks))
        self.save_hyperparameters(ignore=["task", "tokenizer", "unpadded", "max_length"])
        # saved, not logged: the logged settings are the model's and the data module's together,
        # and Lightning refuses a name in both with two values (None here: the model's)
        self.hparams["max_length"] = max_length
        self.task, self.tokenizer, self.unpadded = task, tokenizer, unpadded
        self._model: Any = None  # the attached model (``attach``), else the trainer's
        # Plain values only in hyper-parameters (checkpoints load with weights_only=True).
        self.hparams["tasks"] = {n: asdict(t) if isinstance(t, TaskData) else dict(t) for n, t in (tasks or {}).items()}
        self._sources: dict[str | None, SplitFiles] = {}
        self.examples: dict[str, list[Any]] = {}
        self.features: dict[str, list[Feature]] = {}
        self.predict_part: tuple[int, bool] | None = None
        """(index, whether it is the last) of the predict part now held; None: not predicting in parts."""
        self._train_loader: TrainingLoader | None = None
        self._train_place: dict[str, Any] | None = None

    def attach(self, model: Any) -> None:
        """Read and featurize with ``model``'s task and tokenizer, at its ``max_length``, budgeting
        tokens as its encoder runs (``unpad``), as ``bertkit fit`` does: ``datamodule.attach(model)``
        before ``datamodule.setup`` in a notebook.

        Raises:
            ValueError: a ``data.max_length`` given here is longer than the model's encoder reads.
        """
        self.task, self.tokenizer, self.unpadded = model.task, model.tokenizer, bool(model.hparams.unpad)
        self._model = model
        self._agree_on_length()

    @property
    def max_length(self) -> int:
        """Tokens per feature, specials included: ``data.max_length`` where given, else the
        model's (``model.max_length``), else ``MAX_LENGTH``."""
        own = self.hparams.max_length
        if own is not None:
            return own
        model = self._running_model()
        return model.hparams.max_length if model is not None else MAX_LENGTH

    def _running_model(self) -> Any:
        """The attached model, else the trainer's, where it records its input length (a
        ``BertModule``); None without one."""
        model = self._model
        if model is None and self.trainer is not None:
            model = self.trainer.lightning_module
        hparams = getattr(model, "hparams", {})
        return model if isinstance(hparams.get("max_length"), int) else None

    def _agree_on_length(self) -> None:
        """A ``data.max_length`` given beside a model of another ``model.max_length`` (release
        0.1's place of the setting): the model records the data's, with a deprecation warning, so
        that what it saves is the length its input was read with."""
        own, model = self.hparams.max_length, self._running_model()
        if own is not None and model is not None and model.hparams.max_length != own:
            check_int(own, "data.max_length", MIN_LENGTH, model.encoder.config.max_length)
            warn_deprecated(
                f"data.max_length={own} beside model.max_length={model.hparams.max_length}: the model owns its "
                f"input length; give model.max_length {own} (BertModule(max_length={own})) and leave data.max_length out"
            )
            model.hparams.max_length = own

    def _model_part(self, name: str) -> Any:
        """``self.task`` or ``self.tokenizer``, else that of the ``BertModule`` the trainer runs.

        Raises:
            RuntimeError: neither is there.
        """
        value = getattr(self, name)
        if value is None and self.trainer is not None and self.trainer.lightning_module is not None:
            value = getattr(self.trainer.lightning_module, name)
        if value is None:
            raise RuntimeError(
                f"BertDataModule has no {name}: give BertDataModule({name}=…), call datamodule.attach(model), or run "
                "it with a model (trainer.fit(model, datamodule))"
            )
        return value

    def _task(self, name: str | None = None) -> Task:
        """The task, or its named task ``name`` (``data.tasks``)."""
        task = self._model_part("task")
        return task if name is None else task.tasks[name]

    def split_files(self, task: str | None = None) -> SplitFiles:
        """Where the single task's split files are, or those of ``task`` in ``data.tasks``
        (``SplitFiles``: its data directory, data set or sample)."""
        if task not in self._sources:
            settings = self.hparams if task is None else self.hparams.tasks[task]
            field = "data" if task is None else f"data.tasks.{task}"
            self._sources[task] = SplitFiles(settings, field, partial(self._task, task))
        return self._sources[task]

    def data_source(self, task: str | None = None) -> Source:
        """The data directory, or the task's sample files by split (see the class docstring), of
        the single task or of ``task`` in ``data.tasks``."""
        return self.split_files(task).source()

    @property
    def on_sample(self) -> bool:
        """Whether a sample stands in for the data (no data directory, data set or
        ``hf_dataset`` configured): its scores show that the loop runs, not the task's accuracy."""
        return any(isinstance(files.found, dict) for files in self._sources.values())

    def check_files(self, stage: str) -> None:
        """Check, before any model is built, that the first split file ``stage`` reads (``fit``:
        the training file) exists where a data directory (``data_dir``, or
        ``$BERTKIT_DATA_DIR/<dataset>``) says it is: a wrong folder is named at once. Other files
        are checked in the order they are read (a malformed training file is reported before a
        missing validation file); the task's sample and ``hf_dataset`` are checked when read.

        Raises:
            FileNotFoundError: a split file is missing (named as ``SplitFiles.path`` names it).
        """
        split = {"fit": "train", "validate": "validation", "test": "test", "predict": "predict"}.get(stage)
        if split is None:
            return
        for task in list(self.hparams.tasks) or [None]:
            self.split_files(task).check(split)

    def _read(self, split: str) -> list[Any]:
        """The split's examples: from the single task's file, or from the file of every task that
        has one (as ``TaskExample``s, task after task).

        Raises:
            ValueError: no file is set for the split, or a file holds no examples.
        """
        tasks = list(self.hparams.tasks) or [None]
        named = [(task, self.split_files(task).settings[f"{split}_file"]) for task in tasks]
        named = [(task, name) for task, name in named if name is not None]
        if not named:
            raise ValueError(
                f"data.{split}_file is not set" if tasks == [None] else f"no task in data.tasks has a {split}_file"
            )
        read = [(task, self._read_file(split, name, task)) for task, names in named for name in file_names(names)]
        streamed = [task for task, examples in read if isinstance(examples[0], StreamedSplit)]
        if streamed and len(read) > 1:
            raise ValueError(
                f"{self.split_files(streamed[0]).field}.{split}_file: a streamed folder is read alone, not with other files"
            )
        return [e for _, examples in read for e in examples]

    def _read_file(self, split: str, name: str, task: str | None) -> list[Any]:
        reader, files = self._task(task), self.split_files(task)
        path = files.path(split, name)
        if split != "predict" and is_streamed(path):
            streamed = self._streamed(path, task)
            if streamed is not None:
                return [streamed]
        try:
            if split == "predict" and self._as_text(path):
                examples = reader.read_text_lines(path, text_lines(path))
            else:
                examples = reader.read(path, labelled=split != "predict")
        except ValueError as err:
            shown = files.shown(path)
            if shown is None:
                raise
            raise ValueError(str(err).replace(str(path), shown)) from None
        shown = files.shown(path)
        if shown is not None:  # later errors (featurizing, metrics) name the data set too
            examples = [renamed_source(e, str(path), shown) for e in examples]
        if task is not None:
            examples = [TaskExample(task, e) for e in examples]
        if not examples:
            raise ValueError(f"{path}: no examples in {files.field}.{split}_file (is it empty, or in another format?)")
        log.info("%s: %d examples from %s", split, len(examples), path)
        return examples

    def _streamed(self, path: Path | str, task: str | None) -> StreamedSplit | None:
        """The streamed split of features at ``path`` (``write_stream``); None for chunks the task
        reads itself (such as pre-training instances)."""
        manifest = read_stream_manifest(path)
        if manifest.get("kind") != "features":
            return None
        if task is not None or self._held_out():
            raise ValueError(f"{path}: streamed features are not read with data.tasks or data.validation_split")
        return StreamedSplit(path, manifest)

    def write_stream(
        self, split: str, output: str, part_size: int = 4096, chunk_bytes: str = "64MB", workers: int = 1
    ) -> dict[str, Any]:
        """Featurize the split's file into litdata chunks at ``output`` (``bertkit stream``): a
        recipe whose ``{split}_file`` names that folder (or its object-store URL) then streams the
        features instead of reading the file (``bertkit.data.streaming``). The examples are read
        whole (and the task learns its labels from the training split, stored with the chunks);
        features are made and written ``part_size`` examples at a time in ``workers`` processes.

        Returns:
            The folder's ``manifest.json``.

        Raises:
            ImportError: litdata (the ``stream`` extra) is not installed.
            ValueError, FileNotFoundError: as reading the split's file does.
        """
        if self.hparams.tasks:
            raise ValueError("data.tasks: write each task's split with a recipe of that task alone")
        if split == "train" and self._held_out():  # it would write the training file less the held-out part
            raise ValueError(
                "data.validation_split: bertkit stream writes a split file whole; give the validation split its own file"
            )
        self._load(split)
        tokenizer, examples = self._model_part("tokenizer"), self.examples[split]
        return write_split(self._task(), tokenizer, examples, output, self.max_length, part_size, chunk_bytes, workers)

    def _as_text(self, path: Path) -> bool:
        """Whether a predict file is read as plain text (``predict_format``)."""
        fmt = self.hparams.predict_format
        return fmt == "text" or (fmt == "auto" and path.suffix == ".txt")

    def _load_train(self) -> None:
        """Read train, let the task ``learn`` from all of it, then hold out ``validation_split``."""
        hp = self.hparams
        examples = self._read("train")
        if examples and isinstance(examples[0], StreamedSplit):
            examples[0].teach(self._task(), "model.task")
        else:
            self._task().learn(examples)
        if not self._held_out():
            self.examples["train"] = examples
            return
        order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(hp.seed)).tolist()
        held = set(order[: round(hp.validation_split * len(examples))])
        self.examples["validation"] = [e for i, e in enumerate(examples) if i in held]
        self.examples["train"] = [e for i, e in enumerate(examples) if i not in held]
        log.warning(
            "validation: %d of %d training examples held out (validation_split=%s, seed=%d)",
            len(held),
            len(examples),
            hp.validation_split,
            hp.seed,
        )

    def _load(self, split: str) -> None:
        if split in self.examples:
            return
        if split == "train" or (split == "validation" and self._held_out()):
            self._load_train()  # the validation split, if any, is held out of train
        else:
            self.examples[split] = self._read(split)

    def _held_out(self) -> bool:
        """Whether the validation split is held out of the training file (``validation_split``)."""
        return bool(self.hparams.validation_split) and not self.hparams.validation_file

    def _has_validation(self) -> bool:
        files = [self.split_files(task).settings["validation_file"] for task in list(self.hparams.tasks) or [None]]
        return self._held_out() or any(files)

    def setup(self, stage: str) -> None:
        self._agree_on_length()
        if stage == "fit":
            self._load("train")
            if self._has_validation():
                self._load("validation")
        elif stage == "validate":
            self._load("validation")
        elif stage in ("test", "predict"):
            self._load("test" if stage == "test" else "predict")

    def predict_in_parts(self) -> Iterator[tuple[int, bool]]:
        """Hold the predict examples one part of ``predict_chunk_size`` at a time (yields the
        part's index and whether it is the last); features are built for the part held. A plain
        text file is read part by part too (``Task.read_text_lines``), so memory does not grow with
        it; other files are read whole, then split.

        Raises:
            ValueError, FileNotFoundError: as reading the predict file does.
        """
        parts = self._predict_parts()
        part, index = next(parts, None), 0
        if part is None:
            raise ValueError(f"data.predict_file: no examples in {self.hparams.predict_file}")
        for following in _ahead(parts):
            self.examples["predict"], self.predict_part = part, (index, following is None)
            self.features.pop("predict", None)
            yield index, following is None
            if following is None:
                break
            part, index = following, index + 1
        self.predict_part = None

    def _predict_parts(self) -> Iterator[list[Any]]:
        hp, task = self.hparams, self._task()
        size = hp.predict_chunk_size
        streamable = not hp.tasks and hp.predict_file is not None and size > 0
        path = self.split_files().path("predict", hp.predict_file) if streamable else None
        if path is None or not self._as_text(path):
            examples = self._read("predict")
            step = size or len(examples)
            yield from (examples[i : i + step] for i in range(0, len(examples), step))
            return
        lines: list[tuple[int, str]] = []
        for number, line in text_lines(path):
            lines.append((number, line))
            if len(lines) == size:
                yield from filter(None, [task.read_text_lines(path, lines)])  # a part of blank lines has none
                lines = []
        yield from filter(None, [task.read_text_lines(path, lines)] if lines else [])

    def forget(self, split: str) -> None:
        """Drop a split's examples and features, so the next ``setup`` reads its file again."""
        self.examples.pop(split, None)
        self.features.pop(split, None)

    def _features(self, split: str) -> list[Feature]:
        if split not in self.features:
            examples, tokenizer, max_length = (
                self.examples[split],
                self._model_part("tokenizer"),
                self.max_length,
            )
            if examples and isinstance(examples[0], StreamedSplit):
                self.features[split] = examples[0].features(tokenizer, max_length)
            else:
                self.features[split] = self._task().featurize(examples, tokenizer, max_length)
            log.info("%s: %d features", split, len(self.features[split]))
        return self.features[split]

    def _loader(self, split: str, train: bool) -> DataLoader:
        features = self._features(split)
        hp = self.hparams
        world = self.trainer.world_size if self.trainer is not None else 1
        rank = self.trainer.global_rank if self.trainer is not None else 0
        common = self._loader_arguments()
        if isinstance(features, StreamedFeatures):
            features.for_training(train, hp.seed)
            if train:
                return self._streamed_loader(features, common, world)
        lengths = self._lengths(features, train)
        size = hp.batch_size if train else hp.eval_batch_size or 2 * hp.batch_size
        settings = BatchSettings(train, lengths, size, hp.seed, world, rank, hp.task_temperature)
        own = self._task().batch_order(features, settings)  # a task that batches its own way
        if own is not None:
            kwargs = self._own_order(own, rank)
        elif train:
            kwargs = self._training_order(lengths, world, rank)
        else:
            kwargs = self._evaluation_order(len(features), lengths, size, world, rank)
        if train:
            # (None, 1.0): what the data module's own order hashed (no tasks, data.task_temperature's
            # default) before tasks ordered their own batches, so that a checkpoint written inside an
            # epoch then still resumes exactly
            shape = own.settings if own is not None else (None, 1.0)
            kwargs["data"] = fingerprint(
                lengths, hp.batch_size, hp.max_tokens, hp.seed, hp.group_by_length, *shape, world
            )
            order = kwargs.get("batch_sampler") or kwargs["sampler"]
            order.keyed = isinstance(features, LazyFeatures) and features.epoch_keyed
        dataset = IndexedByBatch(features) if kwargs.get("batch_size", 1) is None else features  # whole batches
        return (TrainingLoader if train else DataLoader)(
            dataset, persistent_workers=hp.num_workers > 0, **common, **kwargs
        )

    def _loader_arguments(self) -> dict[str, Any]:
        """What every loader of this data module shares: its collation, workers, generator."""
        hp = self.hparams
        return dict(
            # Every loader draws its workers' base seed from its own generator, not from torch's
            # global one: dropout's random numbers stay where a checkpoint saved them (exact resume).
            generator=torch.Generator().manual_seed(hp.seed),
            collate_fn=partial(
                collate,
                pad_token_id=self._model_part("tokenizer").pad_token_id,
                pad_values=self._task().pad_values,
                layout=bool(self.unpadded),
                pad_to_multiple_of=hp.pad_to_multiple_of,
                token_keys=self._task().batch_token_keys,
                max_length=self.max_length,
            ),
            num_workers=hp.num_workers,
            pin_memory=self.trainer is not None and self.trainer.strategy.root_device.type == "cuda",  # non-blocking
        )

    def _lengths(self, features: Sequence[Feature], train: bool) -> list[int] | None:
        """Tokens per feature (None for streamed evaluation data, read in its stored order); with a
        token budget over padded batches, each feature's bucketed length (what the budget counts)."""
        hp = self.hparams
        # Lazy features (memory-mapped pre-training shards) give their lengths without reading
        # them, and learn whether they feed training (fresh dynamic masks) or evaluation.
        if isinstance(features, LazyFeatures):
            features.for_training(train, hp.seed)
            lengths = features.lengths
        elif isinstance(features, StreamedFeatures):
            return None
        else:
            lengths = [len(f["input_ids"]) for f in features]
        if train and hp.max_tokens and not self.unpadded and hp.pad_to_multiple_of:  # the budget counts padding
            lengths = [padded_length(int(n), hp.pad_to_multiple_of, self.max_length) for n in lengths]
        return lengths

    @staticmethod
    def _own_order(order: BatchOrder, rank: int) -> dict[str, Any]:
        """The loader arguments of a task's own order (``Task.batch_order``); its left-out features
        warned by the first process."""
        if order.left_out and rank == 0:
            log.warning(order.left_out)
        if order.as_batch_sampler:
            return dict(batch_sampler=order.sampler)
        return dict(batch_size=order.batch_size, sampler=order.sampler)

    def _training_order(self, lengths: Any, world: int, rank: int) -> dict[str, Any]:
        """The training loader's order: a token budget's batches dealt among the processes, or
        fixed-size batches of a shared order."""
        hp = self.hparams
        sampler: TrainShardSampler | BatchShardSampler
        if hp.max_tokens:
            sampler, batch_size = BatchShardSampler(self._token_budget(lengths), world, rank), None
            left = (
                "data.max_tokens on {world} processes: the last batches of each epoch that are fewer than the "
                "processes are left out ({n} in the first)"
            )
        else:
            sampler = TrainShardSampler(lengths, hp.batch_size, hp.seed, hp.group_by_length, world, rank)
            batch_size = hp.batch_size
            left = (
                "{features} training features, {world} processes x data.batch_size {batch}: each epoch's last {n} "
                "features (others each epoch) make a batch for fewer than {world} processes and are left out"
            )
        if sampler.left_out() and rank == 0:
            log.warning(left.format(world=world, n=sampler.left_out(), features=len(lengths), batch=hp.batch_size))
        return dict(batch_size=batch_size, sampler=sampler)

    @staticmethod
    def _evaluation_order(count: int, lengths: list[int] | None, size: int, world: int, rank: int) -> dict[str, Any]:
        """An evaluation loader's order: the features longest first (stored order for streamed
        data), each on one process."""
        order = list(range(count)) if lengths is None else sorted(range(count), key=lambda i: -lengths[i])
        return dict(batch_size=size, sampler=EvalShardSampler(order, world, rank) if world > 1 else order)

    def _streamed_loader(self, features: StreamedFeatures, common: dict[str, Any], world: int) -> DataLoader:
        """litdata's loader over this process's chunks (``StreamedFeatures.training_loader``), with
        ``common``'s loader arguments."""
        hp = self.hparams
        given = [f"data.{k}" for k in ("max_tokens", "group_by_length") if hp[k]]
        if given:
            raise ValueError(f"{', '.join(given)}: not available with streamed training data (litdata's order)")
        loader = features.training_loader(hp.batch_size, **common)
        left_out = len(features) - world * loader.dataset.get_len(max(hp.num_workers, 1), hp.batch_size)
        if left_out and (self.trainer is None or self.trainer.is_global_zero):
            log.warning(
                "%s: %d of %d training features are left out each epoch, so that %d processes x %d loader workers "
                "read equally many (litdata's drop_last)",
                features.location, left_out, len(features), world, max(hp.num_workers, 1),
            )  # fmt: skip
        return loader

    def _token_budget(self, lengths: Any) -> TokenBudgetBatchSampler:
        padded = not self.unpadded
        return TokenBudgetBatchSampler(
            [int(n) for n in lengths], self.hparams.max_tokens, self.hparams.seed, padded, self.hparams.group_by_length
        )

    def train_dataloader(self) -> DataLoader:
        loader = self._loader("train", train=True)
        if self._train_place is not None:
            loader.load_state_dict(self._train_place)
            self._train_place = None
        self._train_loader = loader
        return loader

    def state_dict(self) -> dict[str, Any]:
        """The training loader's place in its epoch (``TrainingLoader.state_dict``), and where the
        data came from (``data_sources``: what a model card says it was trained on), saved in
        checkpoints. Lightning also saves and restores a stateful training loader itself, but only
        when the loader is built after the checkpoint is restored; ``BertModule`` builds it earlier,
        to size its learning-rate schedule (``trainer.estimated_stepping_batches``), while the data
        module is restored first."""
        state: dict[str, Any] = {"data_sources": self.data_sources()}
        if self._train_loader is not None:
            state["train_loader"] = self._train_loader.state_dict()
        return state

    def data_sources(self) -> dict[str, str]:
        """Where each task's data was read from, by task name (``""``: the single task): a
        folder, ``hf:<data set>``, or ``sample`` where the plugin's bundled or generated sample
        stood in for the data."""
        return {task or "": files.describe() for task, files in self._sources.items() if files.found is not None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Keep the checkpoint's place for the next training loader."""
        self._train_place = state.get("train_loader")

    def val_dataloader(self) -> DataLoader:
        if "validation" in self.examples:
            return self._loader("validation", train=False)
        if self.trainer is not None and self.trainer.state.fn == "fit" and self.trainer.is_global_zero:
            log.warning(
                "no validation file (data.validation_file): fit runs without validation and keeps last.ckpt only"
            )
        return []

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("predict", train=False)


def _ahead(items: Iterator[Any]) -> Iterator[Any]:
    """The items of ``items``, then None: each step sees the item after the current one."""
    yield from items
    yield None


def _check_task_settings(single: dict[str, Any]) -> None:
    """With ``data.tasks``: refuse a single task's setting (each task names its own files).

    Raises:
        ValueError: names each such setting given.
    """
    given = [f"data.{k}" for k, v in single.items() if v]
    if given:
        raise ValueError(f"{', '.join(given)}: not used with data.tasks (each task names its own files)")


def _deprecated_temperature(temperature: float, tasks: bool) -> None:
    """``data.task_temperature``, release 0.1's place of the multi-task task's temperature: checked
    (with ``data.tasks``) and warned as deprecated.

    Raises:
        ValueError: below 1 (1 = proportional; ``.inf``, uniform, is allowed).
    """
    if tasks and temperature != math.inf:
        check_float32(temperature, "data.task_temperature", low=1.0)
    warn_deprecated(
        f"data.task_temperature is release 0.1's place of the multi-task task's temperature: give "
        f"model.task.init_args.temperature {temperature} instead",
        stacklevel=3,
    )
