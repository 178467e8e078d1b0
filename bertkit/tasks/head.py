"""``Head``: the base class of task heads and pre-training objectives.

A head owns everything task-specific: reading its data format, turning examples into
features, its ``nn.Module`` on top of the encoder, its loss, its torchmetrics metrics, and
post-processing predictions back to words, characters or labels. Subclasses take plain,
type-hinted ``__init__`` arguments (LightningCLI reads them) and call ``save_hyperparameters()``
so a checkpoint can rebuild them.

A head may learn settings from the training examples before its layers exist (a label
vocabulary): it names them in ``learned``, fills those hyper-parameters in ``prepare`` and is
``ready`` once they are set. ``BertModule`` builds it then, stores them in checkpoints, and
restores them from a checkpoint into a head that has not seen training data.
"""

from __future__ import annotations

import importlib
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from pytorch_lightning.core.mixins import HyperparametersMixin
from torch import nn
from torchmetrics import MetricCollection

from bertkit.model.bert import EncoderOutput
from bertkit.model.config import BertConfig
from bertkit.model.tokenizer import BertTokenizer
from bertkit.plugins import registered
from bertkit.utils.io import text_lines

Feature = dict[str, Any]
"""One model input, as ``Head.featurize`` returns it: ``input_ids`` (list of int, ``[CLS]`` …
``[SEP]``, at most ``data.max_length``) and ``example_index`` (int, the example it came from) are
required; the core also knows ``token_type_ids`` (list of int), ``labels`` (an int, a list of
floats, or a list of int per token with -100 = not scored) and ``word_index`` (list of int, -1 =
no word). Any other key is the head's: a list (padded with the head's ``pad_values``), a number,
or any other object (kept as it is, such as the example for post-processing)."""

Batch = dict[str, Any]
"""Features collated by ``bertkit.data.datamodule.pad_batch``: ``input_ids``, ``token_type_ids`` and every
list key as (B, T) long tensors (B features, T the longest in the batch; equal-length lists such
as multi-hot labels as (B, n)), ``attention_mask`` (B, T), 1 for real tokens; number keys as (B,)
tensors; other values as a list of B objects. A head's ``forward`` returns ``loss`` (a scalar
when the batch has labels) and may return parts named ``*_loss``; ``BertModule`` logs each as
``{stage}/{key}`` (train, val, test)."""


class Head(nn.Module, HyperparametersMixin, ABC):
    """A task head: data in, loss and metrics out, predictions back to the user's units."""

    learned: tuple[str, ...] = ()
    """Hyper-parameters ``prepare`` may fill from the training examples."""

    pad_values: ClassVar[Mapping[str, int]] = {}
    """The padding value of each list-valued feature key beyond the core's (``input_ids``,
    ``token_type_ids``, ``labels`` -100, ``word_index`` -1; ``bertkit.data.datamodule.pad_batch``). A list key
    without one is an error when batches are built, never a guessed 0."""

    onnx_outputs: tuple[str, ...] = ()
    """Keys of ``forward``'s output that an ONNX export returns (logits per example or token);
    empty: the head has no ONNX export."""

    aliases: ClassVar[tuple[str, ...]] = ()
    """Full class paths this class had in earlier releases: checkpoints and export folders that
    name one of them load it (``stored_class``)."""

    hf_architecture: str = "BertModel"
    """The ``transformers`` class whose checkpoint ``hf_state_dict`` completes (``config.json``'s
    ``architectures``)."""

    @property
    def ready(self) -> bool:
        """Whether ``build`` can run: every ``learned`` hyper-parameter is set."""
        return all(self.hparams.get(name) is not None for name in self.learned)

    @property
    def reads_cls_only(self) -> bool:
        """Whether the head reads only ``[CLS]`` (or the pooler) of the last layer; then the
        encoder computes the last block for ``[CLS]`` alone (``BertEncoder(cls_only=True)``)."""
        return False

    @property
    def reads_pooler(self) -> bool:
        """Whether the head reads the encoder's pooler output (BERT's tanh layer on ``[CLS]``).
        When it does not, ``BertModule`` freezes the pooler: a parameter that takes no part in
        the loss would stop multi-process (DDP) training at its first step."""
        return False

    @property
    def reads_padding(self) -> bool:
        """Whether the head reads hidden states at padding positions (a loss over them, as
        transformers' QA loss); then the encoder runs padded (``unpad=False``) whatever
        ``model.unpad`` says, so they are what the reference computes."""
        return False

    def restore_learned(self, stored: Mapping[str, Any], built: bool, field: str = "model.head") -> None:
        """Take the ``learned`` settings from a checkpoint's ``init_args`` (``stored``): set them on
        a head not yet built, check them on a built one. ``field`` names the head in errors.

        Raises:
            ValueError: a built head's learned setting differs from the checkpoint's.
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

    def prepare(self, examples: list[Any]) -> None:
        """See the training examples (all of them, before ``build``); fill ``learned`` settings.

        Raises:
            ValueError: the examples contradict the head's configuration (names file and line).
        """

    @abstractmethod
    def build(self, config: BertConfig) -> None:
        """Create the layers on top of an encoder of this config; called once by ``BertModule``."""

    def attach(self, encoder: nn.Module) -> None:
        """Called once after ``build`` with the ``BertEncoder``, for a head that shares its weights
        (an MLM decoder tied to the word embeddings). Keep no submodule reference: the encoder's
        parameters must stay listed once, under ``encoder.``."""

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """This head's tensors under ``hf_architecture``'s key names (``cls.*`` for
        ``BertForPreTraining``, ``classifier.*`` …); empty when no ``transformers`` class computes
        what this head computes (the export is then the encoder alone, with a warning)."""
        return {}

    def parameter_settings(self) -> list[tuple[list[nn.Parameter], dict[str, float]]]:
        """Parameters of this head that need optimizer settings of their own (``lr``,
        ``weight_decay``), e.g. a CRF's transition scores; each list becomes one AdamW group
        without weight decay unless it says so, and the schedule applies to it as to the rest."""
        return []

    def hf_config(self) -> dict[str, Any]:
        """``config.json`` entries ``hf_architecture`` needs (``id2label``, ``problem_type`` …)."""
        return {}

    @abstractmethod
    def read(self, path: Path, labelled: bool = True) -> list[Any]:
        """Read examples from a file in this head's format.

        Raises:
            ValueError: a malformed line; the message names the file and line.
        """

    def read_text(self, path: Path) -> list[Any]:
        """Read a plain text file for prediction: ``read_text_lines`` of all its lines. A head
        that overrides this instead of ``read_text_lines`` is read whole by ``bertkit predict``."""
        return self.read_text_lines(path, text_lines(path))

    def read_text_lines(self, path: Path, lines: Iterable[tuple[int, str]]) -> list[Any]:
        """Examples from some ``(line number, line)`` pairs of the plain text file ``path`` (one
        example per non-blank line; sources name ``path:number``). ``bertkit predict`` reads a
        text file through this a part at a time, so memory does not grow with the file.

        Raises:
            ValueError: a line the head cannot read (names file and line); by default, any: the
                head reads no plain text.
        """
        raise ValueError(f"{path}: {type(self).__name__} does not read plain text files")

    @abstractmethod
    def featurize(self, examples: list[Any], tokenizer: BertTokenizer, max_length: int) -> list[Feature]:
        """Turn examples into model features (lists of ints; ``input_ids`` required).

        Every feature carries ``example_index`` so predictions can be joined back. Values that are
        neither lists nor numbers (such as the example itself, for post-processing that needs its
        text) reach the batch as a plain list.
        """

    def encoder_inputs(self, batch: Batch) -> Batch:
        """The batch the encoder reads, made from the loader's (``BertModule`` calls this before
        the encoder, and passes the result on to ``forward``). The default returns it unchanged;
        ELECTRA's head runs its generator here and returns the corrupted ``input_ids``."""
        return batch

    @abstractmethod
    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        """Head outputs for a batch; includes ``loss`` when the batch has labels."""

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        """Accumulate ``stage`` metrics (``val`` or ``test``) for one batch, usually
        ``self.metrics[stage].update(…)``."""

    def compute_metrics(self, stage: str) -> dict[str, torch.Tensor]:
        """Epoch-level metrics for ``stage``, keys without the stage prefix; ``BertModule`` logs
        them as ``{stage}/{key}`` (synchronised across processes by torchmetrics).

        The default computes and then resets ``self.metrics[stage]``: a torchmetrics ``Metric``
        (its value named ``score``, or its dict of values), or a ``MetricCollection`` or
        ``nn.ModuleDict`` of named ones; ``{}`` when the head has no ``metrics`` for the stage.
        """
        metrics = getattr(self, "metrics", None)
        if metrics is None or stage not in metrics:
            return {}
        found = metrics[stage]
        named = found.items() if isinstance(found, (nn.ModuleDict, MetricCollection)) else [("score", found)]
        values: dict[str, torch.Tensor] = {}
        for name, metric in named:
            value = metric.compute()
            metric.reset()
            values.update(value if isinstance(value, dict) else {name: value})
        return values

    def predict(self, outputs: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        """Per-feature predictions (plain Python) for one batch; joined later by ``format_predictions``.

        The default gives each feature its ``example_index`` and its row of every output but the
        losses, as lists (a (B, T, C) ``logits`` becomes T lists of C floats per feature,
        padding included).
        """
        keys = [k for k in outputs if k != "loss" and not k.endswith("_loss")]
        rows = batch["example_index"].tolist()
        return [{"example_index": e, **{k: outputs[k][i].tolist() for k in keys}} for i, e in enumerate(rows)]

    def format_predictions(self, examples: list[Any], predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One JSON-serialisable record per example, in input order, from all per-feature predictions.

        The default is for heads with one feature per example: ``format_record`` of each example
        and its feature's prediction (without ``example_index``).

        Raises:
            ValueError: an example has several features (windows) or none; a head that makes
                windows joins them in its own ``format_predictions`` (``by_example`` groups them).
        """
        records = []
        for index, (example, group) in enumerate(
            zip(examples, by_example(predictions, len(examples), self), strict=True)
        ):
            if len(group) > 1:
                raise ValueError(
                    f"{type(self).__name__}: example {index} has several features; the default "
                    "format_predictions takes one per example: override it to join them"
                )
            records.append(self.format_record(example, {k: v for k, v in group[0].items() if k != "example_index"}))
        return records

    def format_record(self, example: Any, prediction: dict[str, Any]) -> dict[str, Any]:
        """The record of one example from its feature's prediction (``predict``'s dict without
        ``example_index``); the default returns the prediction as it is."""
        return prediction

    def sample_files(self) -> dict[str, Path] | None:
        """A small data set the plugin ships, by split (``train``, ``validation``, ``test``);
        used when no data directory is configured."""
        return None

    def spec(self) -> dict[str, Any]:
        """``{"class_path", "init_args"}`` that rebuilds this head (stored in checkpoints)."""
        cls = type(self)
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": dict(self.hparams)}


def by_example(predictions: list[dict[str, Any]], count: int, head: Head) -> list[list[dict[str, Any]]]:
    """Per-feature predictions grouped by their ``example_index``: one list per example, in input
    order, each in the order its features were predicted — the join every head's
    ``format_predictions`` starts from.

    Args:
        predictions: ``Head.predict`` output of every batch, flattened.
        count: the number of examples (indices ``0 … count-1``).
        head: named in errors.

    Raises:
        ValueError: an example has no prediction, or an index is outside ``0 … count-1``.
    """
    groups: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for p in predictions:
        index = p["example_index"]
        if not 0 <= index < count:
            raise ValueError(f"{type(head).__name__}: prediction for example {index}, but there are {count} examples")
        groups[index].append(p)
    missing = [i for i, group in enumerate(groups) if not group]
    if missing:
        raise ValueError(f"{type(head).__name__}: no prediction for example(s) {missing[:5]}")
    return groups


def import_class(class_path: str, base: type) -> type:
    """The class at a dotted ``class_path`` the user gave (a recipe, the command line), checked
    to subclass ``base``. Imports its module.

    Raises:
        ValueError: it cannot be imported or is not a subclass of ``base``.
    """
    module_name, _, class_name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"class_path {class_path!r} cannot be imported: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"class_path {class_path!r} is not a {base.__module__}.{base.__qualname__}")
    return cls


def full_name(cls: type) -> str:
    """``module.QualifiedName`` of a class: the full path untrusted class paths are compared with."""
    return f"{cls.__module__}.{cls.__qualname__}"


def stored_class(class_path: str, base: type, registry: Mapping[str, type], source: str) -> type:
    """The class named by a file bertkit reads but the user did not write (a checkpoint's
    hyper-parameters, a model directory's ``config.json``), without importing anything.

    A stored name can only select: a registered class (by its registered name, its full path or
    a former full path it lists in ``aliases``, as checkpoints of earlier releases name it), or a ``base`` subclass in a module that is already imported (one the user's recipe,
    ``plugins:`` list, installed entry points or own code imported). A module is never imported
    because a file names it, so a crafted checkpoint cannot run a ``.py`` file lying beside it.

    Args:
        class_path: the stored name.
        base: the class it must subclass.
        registry: the registered classes by name (``register_heads``, ``register_encoders`` …).
        source: the file and field, for errors.

    Raises:
        ValueError: anything else (the message names ``source`` and how to make the class known).
    """
    if class_path in registry:
        return registry[class_path]
    for cls in registry.values():
        if isinstance(cls, type) and class_path in (full_name(cls), *getattr(cls, "aliases", ())):
            return cls
    module_name, _, class_name = class_path.rpartition(".")
    module = sys.modules.get(module_name) if module_name else None
    cls = getattr(module, class_name, None) if module is not None else None
    if not (isinstance(cls, type) and issubclass(cls, base) and full_name(cls) == class_path):
        raise ValueError(
            f"{source}: {class_path!r} is not a registered {base.__qualname__} nor one in a module already imported; "
            "bertkit does not import code a checkpoint or model directory names. If you trust it, name its module "
            "in the recipe's plugins: list (or import it before loading)"
        )
    return cls


def head_from_spec(spec: dict[str, Any], source: str = "checkpoint hyper_parameters.head") -> Head:
    """Rebuild a head from ``Head.spec()`` output read from a file (``stored_class``: only
    registered or already-imported heads).

    Raises:
        ValueError: the class is not a known ``Head``, or its arguments are not accepted.
    """
    cls = stored_class(str(spec.get("class_path")), Head, registered("register_heads"), f"{source}.class_path")
    try:
        return cls(**spec.get("init_args", {}))
    except TypeError as err:
        raise ValueError(f"{source}.init_args: {err}") from None
