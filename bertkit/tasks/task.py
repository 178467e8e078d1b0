"""``Task``: the plain-Python half of a task plugin (the ``Head`` module is the other half).

A task reads its file formats against typed settings, learns what it needs from the training
examples (a label vocabulary), turns examples into model features and the head's outputs back
into records of words, characters and labels. It holds no ``nn.Module`` and needs no trainer:
``BertDataModule`` builds and iterates batches from a task and a tokenizer alone. The network
half is built by ``Task.build_head``. Every run goes one way (fit, test, ``bertkit predict``,
``Predictor``, ``bertkit serve``)::

    examples = task.read(path)                       # or task.read_text_lines(path, lines)
    task.learn(examples)                             # training examples: fills task.learned
    features = task.featurize(examples, tokenizer, max_length)
    batch = pad_batch(features, tokenizer.pad_token_id, task.pad_values)
    outputs = head.decode(head(encoder(batch), batch), batch)       # BertModule, on the device
    predictions = task.predict(head.feature_predictions(outputs, batch))     # plain Python from here on
    records = task.format_predictions(examples, predictions)

Subclasses take plain, type-hinted ``__init__`` arguments (LightningCLI reads them, a recipe's
``model.task.init_args`` sets them) and call ``save_hyperparameters()``, so that ``spec()``
rebuilds them from a checkpoint. ``Task`` is plain Python: importing it loads neither Lightning nor
torch.
"""

from __future__ import annotations

import dataclasses
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from bertkit.utils.deprecation import stored, warn_deprecated

if TYPE_CHECKING:
    import torch

    from bertkit.model.config import BertConfig
    from bertkit.model.tokenizer import BertTokenizer
    from bertkit.tasks.head import Head

Feature = dict[str, Any]
"""One model input, as ``Task.featurize`` returns it: ``input_ids`` (list of int, ``[CLS]`` …
``[SEP]``, at most ``model.max_length``) and ``example_index`` (int, the example it came from) are
required; the core also knows ``token_type_ids`` (list of int), ``labels`` (an int, a list of
floats, or a list of int per token with -100 = not scored), ``word_index`` (list of int, -1 =
no word) and ``word_positions`` (list of int: the token positions where ``word_index`` marks a
word, in order; collated as (B, W) padded with -1, so a head reads a batch's rows of words
without reading their longest on the host). Any other key is the task's: a list (padded with
the task's ``pad_values``), a number, or any other object (kept as it is, such as the example
for post-processing)."""

Batch = dict[str, Any]
"""Features collated by ``bertkit.data.collate.pad_batch``: ``input_ids``, ``token_type_ids`` and
every list key as (B, T) long tensors (B features, T the longest in the batch; equal-length lists
such as multi-hot labels as (B, n)), ``attention_mask`` (B, T), 1 for real tokens; number keys as
(B,) tensors; other values as a list of B objects. A head's ``forward`` returns ``loss`` (a scalar
when the batch has labels) and may return parts named ``*_loss``; ``BertModule`` logs each as
``{stage}/{key}`` (train, val, test)."""


class Settings(dict):
    """A task's settings (``Task.hparams``): a dict whose keys read and write as attributes too
    (``task.hparams.tag_scheme``), as Lightning's ``AttributeDict``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no setting {name!r}; the task's settings are {sorted(self)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


class Task(ABC):
    """The plain-Python part of a task: formats, what is learned from data, features, records."""

    learned: ClassVar[tuple[str, ...]] = ()
    """Settings ``learn`` may fill from the training examples (a label vocabulary); stored in
    checkpoints and restored from them into a task that has not seen training data."""

    pad_values: ClassVar[Mapping[str, int]] = {}
    """The padding value of each list-valued feature key beyond the core's (``input_ids``,
    ``token_type_ids``, ``labels`` -100, ``word_index`` and ``word_positions`` -1;
    ``bertkit.data.collate.pad_batch``). A list key without one is an error when batches are
    built, never a guessed 0."""

    token_keys: ClassVar[frozenset[str] | None] = None
    """The list-valued feature keys beyond ``input_ids`` and ``token_type_ids`` that run over the
    tokens, one entry per token (per-token ``labels``, ``word_index``): ``data.pad_to_multiple_of``
    pads them with ``input_ids`` to the batch's bucketed length, and pads any other list key (such
    as multi-hot labels) to its own longest. None: not declared, and ``data.pad_to_multiple_of``
    refuses a task whose features hold such lists (equal lengths cannot tell the two apart)."""

    data_settings: ClassVar[tuple[str, ...]] = ()
    """Settings that only say how files are read (columns, file formats, how a corpus is
    prepared): resuming a run with one of them changed warns, where a changed setting that
    shapes the model is refused (``bertkit.training.checkpoints.refuse_changed_recipe``)."""

    request_fields: ClassVar[tuple[str, ...]] = ()
    """The fields of one JSON record of the task's native format that a request gives
    (``{"question", "context"}`` for question answering), for clients such as ``bertkit serve``'s
    page; empty: the task is asked with lines of text (``read_text_lines``)."""

    windowed: ClassVar[bool] = False
    """Whether ``featurize`` reads every token of a long text, in overlapping windows (a tagger's
    ``stride``), rather than its first ``max_length`` tokens: ``bertkit serve`` then refuses a
    request over its token budget from the texts' token count alone, before any window is made
    (``Predictor.least_tokens``)."""

    aliases: ClassVar[tuple[str, ...]] = ()
    """Class paths this class answered to in earlier releases: a checkpoint or export folder
    that names one of them loads it (``bertkit.plugins.stored_class``)."""

    _release_01: ClassVar[bool] = False  # release 0.1's heads (bertkit.tasks.legacy) predict from tensors

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse, when the class is defined, a ``predict`` that takes anything but the predictions
        (``predict(outputs, batch)`` of a task written for tensors).

        Raises:
            TypeError: names the class and where the tensor work goes.
        """
        super().__init_subclass__(**kwargs)
        predict = vars(cls).get("predict")
        if predict is None or cls._release_01:
            return
        required = [
            p
            for p in list(inspect.signature(predict).parameters.values())[1:]
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
        if len(required) != 1:
            raise TypeError(
                f"{cls.__module__}.{cls.__qualname__}.predict{inspect.signature(predict)}: Task.predict takes one "
                "argument, the head's per-feature predictions as plain Python values (predict(self, predictions)); "
                "the work on the decoded tensors belongs to the head's feature_predictions(decoded, batch)"
            )

    @property
    def hparams(self) -> Settings:
        """The task's settings: its ``__init__`` arguments as ``save_hyperparameters`` recorded
        them (empty before), the ``learned`` ones filled in; what ``spec`` stores."""
        return self.__dict__.setdefault("_hparams", Settings())

    def save_hyperparameters(self, *names: str, ignore: Iterable[str] = ()) -> None:
        """Record the arguments of the ``__init__`` that calls it as the task's settings
        (``hparams``), as Lightning's ``save_hyperparameters`` does for a module: their values
        when it is called, over those a base class's ``__init__`` recorded; with ``names``, those
        alone; ``ignore`` removes settings (objects that are no settings, such as another task's
        instances, or a base class's settings the subclass does not take: ``spec`` stores only
        what the class's ``__init__`` takes).

        Raises:
            RuntimeError: not called from an ``__init__`` of the task's class or its bases.
        """
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        inits = (vars(c).get("__init__") for c in type(self).__mro__)
        # a decorated __init__ (functools.wraps) is known by the code of the function it wraps
        by_code = {getattr(inspect.unwrap(f), "__code__", None): f for f in inits if f is not None}
        init = by_code.get(caller.f_code) if caller is not None else None
        if init is None:
            raise RuntimeError(f"{type(self).__name__}.save_hyperparameters: call it from the task's __init__")
        values: dict[str, Any] = {}
        for parameter in list(inspect.signature(init).parameters.values())[1:]:  # self
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                values.update(caller.f_locals[parameter.name])
            elif parameter.kind is not inspect.Parameter.VAR_POSITIONAL:
                values[parameter.name] = caller.f_locals[parameter.name]
        settings = self.hparams  # a base class's __init__ may have recorded its own before
        settings.update({k: v for k, v in values.items() if not names or k in names})
        for key in ignore:
            settings.pop(key, None)

    @property
    def ready(self) -> bool:
        """Whether ``build_head`` can run: every ``learned`` setting is set."""
        return all(self.hparams.get(name) is not None for name in self.learned)

    @property
    def tasks(self) -> Mapping[str, Task]:
        """The named tasks of a multi-task task, whose files ``BertDataModule(tasks=…)`` reads
        with each one's ``read`` (as ``TaskExample``); empty for a single task."""
        return {}

    def batch_token_keys(self, features: Sequence[Feature]) -> frozenset[str] | None:
        """The ``token_keys`` of one batch's features (what ``data.pad_to_multiple_of`` pads with
        ``input_ids``); a task whose batches hold features of one of several kinds (a multi-task
        task) names that kind's. Default: ``token_keys``."""
        return self.token_keys

    def batch_order(self, features: Sequence[Feature], settings: BatchSettings) -> BatchOrder | None:
        """The order of a loader over this task's features, for a task that batches its own way (a
        multi-task task: one named task per batch, the tasks mixed); None (the default): the data
        module's own (random or length-grouped batches of ``data.batch_size``, a token budget,
        evaluation longest first). Called for every loader the data module builds, training and
        evaluation, on every process (``settings`` says which)."""
        return None

    def restore_learned(self, stored: Mapping[str, Any], built: bool, field: str = "model.task") -> None:
        """Take the ``learned`` settings from a checkpoint's ``init_args`` (``stored``): set them on
        a task whose head is not built yet, check them where it is. ``field`` names it in errors.

        Raises:
            ValueError: a built task's learned setting differs from the checkpoint's.
        """
        for name in self.learned:
            if name not in stored:
                continue
            if not built:
                self.hparams[name] = stored[name]
            elif self.hparams[name] != stored[name]:
                raise ValueError(
                    f"the checkpoint's {field}.{name} {stored[name]!r} differs from this run's {self.hparams[name]!r}"
                )

    def learn(self, examples: list[Any]) -> None:  # noqa: B027 - a hook: a task without learned settings keeps it
        """See the training examples (all of them, before ``build_head``); fill ``learned`` settings.

        Raises:
            ValueError: the examples contradict the task's settings (names file and line).
        """

    @abstractmethod
    def read(self, path: Path, labelled: bool = True) -> list[Any]:
        """Read examples from a file in this task's format (``labelled``: with their labels).

        Raises:
            ValueError: a malformed line; the message names the file and line.
        """

    def read_text_lines(self, path: Path, lines: Iterable[tuple[int, str]]) -> list[Any]:
        """Examples from some ``(line number, line)`` pairs of the plain text file ``path`` (one
        example per non-blank line; sources name ``path:number``). ``bertkit predict`` reads a
        text file through this a part at a time, so memory does not grow with the file;
        ``Predictor`` reads each request's texts through it.

        Raises:
            ValueError: a line the task cannot read (names file and line); by default, any: the
                task reads no plain text.
        """
        raise ValueError(f"{path}: {type(self).__name__} does not read plain text files")

    def sample_files(self) -> dict[str, Path] | None:
        """A small data set the plugin ships, by split (``train``, ``validation``, ``test``);
        used when no data directory is configured."""
        return None

    @abstractmethod
    def featurize(self, examples: list[Any], tokenizer: BertTokenizer, max_length: int) -> Sequence[Feature]:
        """Turn examples into model features (``Feature``; ``input_ids`` and ``example_index``
        required), in order; an example may give several features (windows) and each names its
        example by ``example_index``. A task reading data too large for memory returns a
        ``LazyFeatures``."""

    @abstractmethod
    def build_head(self, config: BertConfig, tokenizer: BertTokenizer) -> Head:
        """The head module for an encoder of ``config`` and its ``tokenizer`` (called once the
        task is ``ready``, by ``BertModule``)."""

    def predict(self, predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The per-feature predictions of one batch in the task's own terms, from the head's
        (``Head.feature_predictions``: plain Python values, one dict per feature with its
        ``example_index``); ``format_predictions`` joins them into records. Plain Python in and
        out: a task reads no tensor, so it is tested with dicts alone. The default returns them
        as they are."""
        return predictions

    def format_predictions(self, examples: list[Any], predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One JSON-serialisable record per example, in input order, from all per-feature predictions.

        The default is for tasks with one feature per example: ``format_record`` of each example
        and its feature's prediction (without ``example_index``).

        Raises:
            ValueError: an example has several features (windows) or none; a task that makes
                windows joins them in its own ``format_predictions`` (``by_example`` groups them).
        """
        records = []
        groups = by_example(predictions, len(examples), self)
        for index, (example, group) in enumerate(zip(examples, groups, strict=True)):
            if len(group) > 1:
                raise ValueError(
                    f"{type(self).__name__}: example {index} has several features; the default "
                    "format_predictions takes one per example: override it to join them"
                )
            records.append(self.format_record(example, {k: v for k, v in group[0].items() if k != "example_index"}))
        return records

    def format_record(self, example: Any, prediction: dict[str, Any]) -> dict[str, Any]:
        """The record of one example from its feature's prediction (``predict``'s dict
        without ``example_index``); the default returns the prediction as it is."""
        return prediction

    def spec(self) -> dict[str, Any]:
        """``{"class_path", "init_args"}`` that rebuilds this task (stored in checkpoints; a
        deprecated alias stores the class it stands for). ``init_args`` are the settings the
        class's ``__init__`` takes: a subclass whose parent's ``__init__`` saved more of its own
        (a third-party task over ``TokenClassification``) stores only what rebuilds it."""
        cls = canonical(type(self))
        accepted = inspect.signature(cls.__init__).parameters
        keep_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        args = {k: v for k, v in self.hparams.items() if keep_all or k in accepted}
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": args}


def canonical(cls: type) -> type:
    """The class a deprecated alias (``deprecated_alias``) stands for; any other class itself."""
    return vars(cls).get("alias_of", cls)


def deprecated_alias(
    task: type[Task],
    name: str,
    module: str,
    renamed: Mapping[str, str] | None = None,
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    parameters: Sequence[inspect.Parameter] | None = None,
) -> type[Task]:
    """``name``, release 0.1's class ``module.name`` of what is now ``task``, kept for one release.

    A subclass of ``task`` that warns when it is built and takes the old arguments: recipes and
    code that name it keep working, checkpoints and export folders that stored ``module.name``
    load (``aliases``), and it stores itself as ``task`` (``spec``). Define it in the plugin
    module that defines ``task``, and register it under ``name`` too (so that a recipe's old
    name is known before anything is imported).

    Args:
        task: the class it stands for.
        name: its old name; module: its old module (where a recipe's full class path points).
        renamed: old argument name -> new name.
        convert: turns the old keyword arguments into ``task``'s (after ``renamed``).
        parameters: its old signature's parameters (LightningCLI reads them), when ``convert``
            changes more than names; default: ``task``'s, with the old names.
    """
    renamed = dict(renamed or {})
    old_names = {new: old for old, new in renamed.items()}
    signature = inspect.signature(task.__init__)
    if parameters is None:
        parameters = [p.replace(name=old_names.get(p.name, p.name)) for p in signature.parameters.values()]

    old = signature.replace(parameters=list(parameters))

    def __init__(self: Task, *args: Any, **kwargs: Any) -> None:
        kwargs = dict(old.bind(self, *args, **kwargs).arguments)
        kwargs.pop(next(iter(old.parameters)))  # self
        warn_deprecated(
            f"{name} is release 0.1's name of {task.__name__}: a recipe's model.head: {{class_path: {name}}} is now "
            f"model.task: {{class_path: {task.__name__}}}"
            + (f" (init_args {', '.join(f'{o} -> {n}' for o, n in renamed.items())})" if renamed else "")
        )
        kwargs = {renamed.get(k, k): v for k, v in kwargs.items()}
        task.__init__(self, **(convert(kwargs) if convert else kwargs))

    __init__.__signature__ = old  # type: ignore[attr-defined]
    doc = f"Release 0.1's name of ``{task.__name__}`` (deprecated)."
    # Its home is where it is defined (importable: jsonargparse finds a class's path by getattr on
    # each parent package, and ``bertkit.<old name>`` would warn on every lookup); the old path is an alias.
    namespace = {"__init__": __init__, "__module__": task.__module__, "__qualname__": name, "__doc__": doc}
    return type(name, (task,), {**namespace, "aliases": (f"{module}.{name}",), "alias_of": task})


@dataclass(frozen=True)
class BatchSettings:
    """What ``Task.batch_order`` is told of the loader it orders.

    Attributes:
        train: a training loader (an order drawn anew each epoch, resumable) or an evaluation one.
        lengths: tokens per feature, or None (streamed evaluation data, read in its stored order).
        batch_size: ``data.batch_size`` (training) or the evaluation batch size.
        seed: ``data.seed``; a training order is drawn from ``seed + epoch``.
        num_replicas, rank: the process group's size and this process's rank.
        task_temperature: release 0.1's ``data.task_temperature`` (how a multi-task task mixes its
            tasks) where a data module is still given it, which then overrides the task's own
            setting; None otherwise.
    """

    train: bool
    lengths: Sequence[int] | None
    batch_size: int
    seed: int
    num_replicas: int
    rank: int
    task_temperature: float | None = None


@dataclass
class BatchOrder:
    """A loader's order, as ``Task.batch_order`` gives it.

    Attributes:
        sampler: a ``Sampler`` (a ``DistributedSampler`` on several processes: Lightning leaves it
            as it is), or a batch sampler with ``batch_size`` None.
        batch_size: the ``DataLoader``'s; None: ``sampler`` yields whole batches (lists of
            indices), read from the features by one key each (``IndexedByBatch``).
        as_batch_sampler: give ``sampler`` as the ``DataLoader``'s ``batch_sampler`` (one
            process) instead. An evaluation order must give every index once: prediction
            writes what it yields.
        settings: the order's own settings, which a resumed run compares with the checkpoint's
            to go on inside an epoch exactly (the data module adds the features' lengths and
            its batch settings).
        left_out: for a training order that leaves features out (global batches too small for
            every process), what the first process warns: how many and why; empty: none.
    """

    sampler: Any
    batch_size: int | None = None
    as_batch_sampler: bool = False
    settings: tuple[Any, ...] = ()
    left_out: str = ""


@dataclass(frozen=True)
class TaskExample:
    """An example of one named task, as ``BertDataModule(tasks=…)`` reads them for a task with
    ``Task.tasks``."""

    task: str
    example: Any


class LazyFeatures(Sequence[Feature], ABC):
    """Features a task reads on demand (memory-mapped shards too large to hold as dicts): the
    data module asks for the lengths without reading the features, and says whether they feed
    training or evaluation (a task may draw fresh random choices, such as masks, in training).

    With ``epoch_keyed``, a training loader reads ``features[(epoch, index)]`` instead of
    ``features[index]``: random choices drawn from ``(seed, epoch, index)`` are then the same in
    any process, DataLoader worker or resumed run, and new each epoch."""

    epoch_keyed: bool = False

    @property
    @abstractmethod
    def lengths(self) -> Sequence[int]:
        """Each feature's number of tokens, in order."""

    def for_training(self, training: bool, seed: int = 0) -> None:
        """Called with True before a training loader reads them, False before an evaluation one;
        ``seed`` is the data module's (``data.seed``)."""


def by_example(predictions: list[dict[str, Any]], count: int, task: Any) -> list[list[dict[str, Any]]]:
    """Per-feature predictions grouped by their ``example_index``: one list per example, in input
    order, each in the order its features were predicted — the join every ``Task.format_predictions``
    starts from.

    Args:
        predictions: ``Task.predict`` of every batch, flattened.
        count: the number of examples (indices ``0 … count-1``).
        task: named in errors.

    Raises:
        ValueError: an example has no prediction, or an index is outside ``0 … count-1``.
    """
    groups: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for p in predictions:
        index = p["example_index"]
        if not 0 <= index < count:
            raise ValueError(f"{type(task).__name__}: prediction for example {index}, but there are {count} examples")
        groups[index].append(p)
    missing = [i for i, group in enumerate(groups) if not group]
    if missing:
        raise ValueError(f"{type(task).__name__}: no prediction for example(s) {missing[:5]}")
    return groups


def renamed_source(example: Any, old: str, new: str) -> Any:
    """``example`` (a dataclass) with ``old`` replaced by ``new`` in its text fields (its source
    ``file:line``, a default id): a temporary or cache file named as its user knows it (``inputs``,
    ``conll2003[train]``). Anything else is returned as it is."""
    if not dataclasses.is_dataclass(example):
        return example
    fields = {f.name: getattr(example, f.name) for f in dataclasses.fields(example)}
    changed = {k: v.replace(old, new) for k, v in fields.items() if isinstance(v, str) and old in v}
    return dataclasses.replace(example, **changed) if changed else example


def predict_batch(task: Task, head: Head, outputs: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
    """The per-feature predictions of one batch from the head's raw outputs: ``head.decode`` (on
    the device), ``head.feature_predictions`` (to plain Python), then ``task.predict``.
    ``BertModule.predict_step`` and ``Predictor`` both predict through this (and
    ``task.format_predictions``), whatever computed ``outputs`` (torch or ONNX Runtime). A
    release-0.1 head, task and head in one object (``bertkit.tasks.legacy``), predicts from the
    decoded tensors as it did."""
    decoded = head.decode(outputs, batch)
    if task._release_01:
        return task.predict(decoded, batch)  # type: ignore[call-arg]
    return task.predict(head.feature_predictions(decoded, batch))


def task_from_spec(spec: dict[str, Any], source: str = "checkpoint hyper_parameters.task") -> Task:
    """Rebuild a task from ``Task.spec()`` output read from a file (``bertkit.plugins.stored_class``:
    only registered or already-imported tasks, or a former class path a task lists in ``aliases``).

    Raises:
        ValueError: the class is not a known ``Task``, or its arguments are not accepted.
    """
    from bertkit.plugins import registered_tasks, stored_class

    cls = stored_class(str(spec.get("class_path")), Task, registered_tasks(), f"{source}.class_path")
    try:
        with stored():  # an earlier release's stored name loads quietly: the next save stores the current one
            return cls(**spec.get("init_args", {}))
    except TypeError as err:
        raise ValueError(f"{source}.init_args: {err}") from None
