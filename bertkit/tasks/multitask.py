"""Several heads on one encoder: ``MultiTaskHead``, each task's data files (``TaskData``) and the
batches they train on (``TaskMixingBatchSampler``).

Each task has its own head and its own data files (``BertDataModule(tasks=…)``), and every batch
holds one task's features, so each head sees only batches it understands. A batch's loss is its
head's loss times the task's weight; losses and metrics are logged per task (``train/ner/loss``,
``val/ner/f1``), so checkpoint selection and early stopping can watch any task's metric.

Training batches are mixed by temperature-scaled sampling (Arivazhagan et al. 2019, "Massively
Multilingual Neural Machine Translation in the Wild", §4.2; Raffel et al. 2020, T5 §3.5.2): a
batch comes from task t with probability proportional to n_t ** (1 / T), n_t its number of
training features. ``T = 1`` is proportional mixing, done exactly: every batch of every task once
per epoch, in one random order. ``T > 1`` flattens the mix towards small tasks (``T = inf``:
uniform over tasks); an epoch is then as many batches as with ``T = 1``, each task's batches
drawn from its own reshuffled cycle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from bertkit.model.bert import EncoderOutput
from bertkit.model.config import BertConfig
from bertkit.model.tokenizer import BertTokenizer
from bertkit.tasks.legacy import Batch, Feature, Head
from bertkit.tasks.task import TaskExample, task_from_spec

TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class MultiTaskHead(Head):
    """Several named heads on one encoder (multi-task fine-tuning).

    A batch holds one task's features (the ``task`` key, a list of B equal names); the task's head
    computes its outputs and loss. The batch's ``loss`` is that loss times the task's weight; the
    head's own losses are returned as ``{task}/loss`` (and ``{task}/mlm_loss`` …), metrics as
    ``{task}/{name}``, so ``BertModule`` logs ``val/ner/f1``. Predictions are the task head's
    records with a ``task`` field, in input order. The checkpoint stores every head's spec.

    Args:
        heads: the heads by task name (a Python identifier; the names of ``data.tasks``).
        loss_weights: weight of each task's loss (default 1 for every task).

    Raises:
        ValueError: no heads, a name that is not an identifier, a weight for an unknown task or
            a negative weight, or two heads that pad one feature key with different values.
    """

    aliases: ClassVar[tuple[str, ...]] = ("bertkit.multitask.MultiTaskHead",)

    def __init__(self, heads: dict[str, Head], loss_weights: dict[str, float] | None = None) -> None:
        super().__init__()
        if not heads:
            raise ValueError("model.head.heads: give at least one head, by task name")
        for name in heads:
            if not TASK_NAME.fullmatch(name):
                raise ValueError(f"model.head.heads: task name {name!r} must be a Python identifier")
        weights = dict(loss_weights or {})
        unknown = sorted(set(weights) - set(heads))
        if unknown:
            raise ValueError(f"model.head.loss_weights: {unknown} are not tasks of model.head.heads {sorted(heads)}")
        if any(w < 0 for w in weights.values()):
            raise ValueError(f"model.head.loss_weights={weights}: weights must be >= 0")
        self.save_hyperparameters(ignore=["heads"])
        self.hparams["loss_weights"] = {name: float(weights.get(name, 1.0)) for name in heads}
        self.heads = nn.ModuleDict({n: task_from_spec(h) if isinstance(h, dict) else h for n, h in heads.items()})
        pad: dict[str, int] = {}
        for name, head in self.heads.items():
            for key, value in head.pad_values.items():
                if pad.setdefault(key, value) != value:
                    raise ValueError(
                        f"model.head.heads: {name} pads {key!r} with {value}, another head with {pad[key]}"
                    )
        self.pad_values = pad
        self._updated: set[tuple[str, str]] = set()  # (stage, task) with metric updates to compute

    # ----- what the core asks of every head -----
    @property
    def tasks(self) -> dict[str, Head]:
        return dict(self.heads)

    @property
    def ready(self) -> bool:
        return all(head.ready for head in self.heads.values())

    @property
    def reads_cls_only(self) -> bool:
        return all(head.reads_cls_only for head in self.heads.values())

    @property
    def reads_pooler(self) -> bool:
        return any(head.reads_pooler for head in self.heads.values())

    @property
    def reads_padding(self) -> bool:
        return any(head.reads_padding for head in self.heads.values())

    def restore_learned(self, stored: Mapping[str, Any], built: bool, field: str = "model.head") -> None:
        for name, head in self.heads.items():
            sub = stored.get("heads", {}).get(name, {}).get("init_args", {})
            head.restore_learned(sub, built, f"{field}.heads.{name}")

    def spec(self) -> dict[str, Any]:
        spec = super().spec()
        spec["init_args"]["heads"] = {name: head.spec() for name, head in self.heads.items()}
        return spec

    def build(self, config: BertConfig) -> None:
        for head in self.heads.values():
            head.build(config)

    def attach(self, encoder: nn.Module) -> None:
        for head in self.heads.values():
            head.attach(encoder)

    def parameter_settings(self) -> list[tuple[list[nn.Parameter], dict[str, float]]]:
        return [group for head in self.heads.values() for group in head.parameter_settings()]

    # ----- data: each task's files are read by its own head -----
    def read(self, path: Path, labelled: bool = True) -> list[Any]:
        raise ValueError(f"{path}: MultiTaskHead reads each task's files with its head: give data.tasks")

    def _positions(self, examples: list[TaskExample]) -> dict[str, list[int]]:
        """The positions of each task's examples in ``examples`` (tasks in the heads' order)."""
        positions: dict[str, list[int]] = {name: [] for name in self.heads}
        for i, e in enumerate(examples):
            positions[e.task].append(i)
        return {name: p for name, p in positions.items() if p}

    def prepare(self, examples: list[TaskExample]) -> None:
        for name, positions in self._positions(examples).items():
            self.heads[name].prepare([examples[i].example for i in positions])

    def featurize(self, examples: list[TaskExample], tokenizer: BertTokenizer, max_length: int) -> list[Feature]:
        """Each task's features from its head, with ``task`` set and ``example_index`` pointing
        into ``examples`` (all tasks')."""
        features = []
        for name, positions in self._positions(examples).items():
            for f in self.heads[name].featurize([examples[i].example for i in positions], tokenizer, max_length):
                features.append({**f, "example_index": positions[f["example_index"]], "task": name})
        return features

    # ----- training and evaluation: the batch's task decides -----
    @staticmethod
    def _task(batch: Batch) -> str:
        return batch["task"][0]

    @staticmethod
    def _own(outputs: dict[str, torch.Tensor], task: str) -> dict[str, torch.Tensor]:
        """The task head's outputs as it returned them (namespaced losses back to their names)."""
        prefix = f"{task}/"
        return {k.removeprefix(prefix): v for k, v in outputs.items() if k != "loss"}

    def encoder_inputs(self, batch: Batch) -> Batch:
        return self.heads[self._task(batch)].encoder_inputs(batch)

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        task = self._task(batch)
        outputs = self.heads[task](encoded, batch)
        losses = [k for k in outputs if k == "loss" or k.endswith("_loss")]
        result = {k: v for k, v in outputs.items() if k not in losses}
        result.update({f"{task}/{k}": outputs[k] for k in losses})
        if "loss" in outputs:
            result["loss"] = self.hparams.loss_weights[task] * outputs["loss"]
        return result

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        task = self._task(batch)
        self.heads[task].update_metrics(stage, self._own(outputs, task), batch)
        self._updated.add((stage, task))

    def compute_metrics(self, stage: str) -> dict[str, torch.Tensor]:
        """Each task's metrics as ``{task}/{name}``, for the tasks that had ``stage`` batches (the
        sanity check's few batches may hold one task only)."""
        tasks = [n for n in self.heads if (stage, n) in self._updated]
        self._updated -= {(stage, n) for n in tasks}
        return {f"{n}/{k}": v for n in tasks for k, v in self.heads[n].compute_metrics(stage).items()}

    # ----- predictions: each task's records from its head, in input order -----
    def predict(self, outputs: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        task = self._task(batch)
        return self.heads[task].predict(self._own(outputs, task), batch)

    def format_predictions(
        self, examples: list[TaskExample], predictions: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = [{} for _ in examples]
        for name, positions in self._positions(examples).items():
            local = {index: i for i, index in enumerate(positions)}
            own = [
                {**p, "example_index": local[p["example_index"]]} for p in predictions if p["example_index"] in local
            ]
            formatted = self.heads[name].format_predictions([examples[i].example for i in positions], own)
            for index, record in zip(positions, formatted, strict=True):
                records[index] = {"task": name, **record}
        return records
