"""``MultiTask``: several tasks on one encoder (multi-task fine-tuning).

Each task keeps its own data files (``BertDataModule(tasks=…)`` reads them with that task's
``read``, as ``TaskExample``s), features, head and records; every batch holds one task's features
(``MultiTask.batch_order``: ``TaskMixingBatchSampler`` mixes them by temperature, Arivazhagan et
al. 2019 §4.2; T5 §3.5.2), so each head sees only batches it understands. A batch's loss is its task's
head's loss times the task's weight; losses and metrics are logged per task
(``train/ner/loss``, ``val/ner/f1``), so checkpoint selection and early stopping can watch any
task's metric.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from bertkit_plugins.multitask.samplers import SplitBatchSampler, TaskEvalBatchSampler, TaskMixingBatchSampler

from bertkit.api.task import (
    BatchOrder,
    BatchSettings,
    BertConfig,
    BertTokenizer,
    Feature,
    Head,
    Task,
    TaskExample,
    check_float32,
    deprecated_alias,
    task_from_spec,
)

TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class MultiTask(Task):
    """Several named tasks on one encoder.

    A batch holds one task's features (the ``task`` key, a list of B equal names). Predictions
    are that task's records with a ``task`` field, in input order; the checkpoint stores every
    task's spec.

    Args:
        tasks: the tasks by name (a Python identifier; the names of ``data.tasks``).
        loss_weights: weight of each task's loss (default 1 for every task).
        temperature: how training batches mix the tasks: task t's share is proportional to
            n_t ** (1 / T), n_t its training features. 1 = proportional (every batch once per
            epoch), larger favours small tasks, ``.inf`` = uniform (Arivazhagan et al. 2019 §4.2;
            T5 §3.5.2).

    Raises:
        ValueError: no tasks, a name that is not an identifier, a weight for an unknown task or
            a negative weight, two tasks that pad one feature key with different values, or a
            temperature below 1.
    """

    data_settings = ("temperature",)  # how training batches are drawn: a resumed run may change it

    def __init__(
        self, tasks: dict[str, Task], loss_weights: dict[str, float] | None = None, temperature: float = 1.0
    ) -> None:
        super().__init__()
        if temperature != math.inf:  # .inf: uniform mixing
            check_float32(temperature, "model.task.temperature", low=1.0)  # 1 = proportional
        if not tasks:
            raise ValueError("model.task.tasks: give at least one task, by name")
        for name in tasks:
            if not TASK_NAME.fullmatch(name):
                raise ValueError(f"model.task.tasks: task name {name!r} must be a Python identifier")
        weights = dict(loss_weights or {})
        unknown = sorted(set(weights) - set(tasks))
        if unknown:
            raise ValueError(f"model.task.loss_weights: {unknown} are not tasks of model.task.tasks {sorted(tasks)}")
        if any(w < 0 for w in weights.values()):
            raise ValueError(f"model.task.loss_weights={weights}: weights must be >= 0")
        self.save_hyperparameters(ignore=["tasks"])
        self.hparams["loss_weights"] = {name: float(weights.get(name, 1.0)) for name in tasks}
        self._tasks = {n: task_from_spec(t) if isinstance(t, dict) else t for n, t in tasks.items()}
        pad: dict[str, int] = {}
        for name, task in self._tasks.items():
            for key, value in task.pad_values.items():
                if pad.setdefault(key, value) != value:
                    raise ValueError(
                        f"model.task.tasks: {name} pads {key!r} with {value}, another task with {pad[key]}"
                    )
        self.pad_values = pad

    @property
    def tasks(self) -> dict[str, Task]:
        return dict(self._tasks)

    @property
    def ready(self) -> bool:
        return all(task.ready for task in self._tasks.values())

    def restore_learned(self, stored: Mapping[str, Any], built: bool, field: str = "model.task") -> None:
        named = stored.get("tasks") or stored.get("heads") or {}  # heads: release 0.1's name
        for name, task in self._tasks.items():
            task.restore_learned(named.get(name, {}).get("init_args", {}), built, f"{field}.tasks.{name}")

    def spec(self) -> dict[str, Any]:
        spec = super().spec()
        spec["init_args"]["tasks"] = {name: task.spec() for name, task in self._tasks.items()}
        return spec

    def build_head(self, config: BertConfig, tokenizer: BertTokenizer) -> Head:
        from bertkit_plugins.multitask.head import MultiTaskHeads

        heads = {name: task.build_head(config, tokenizer) for name, task in self._tasks.items()}
        return MultiTaskHeads(heads, self.hparams.loss_weights)

    # ----- data: each task's files are read by that task -----
    def read(self, path: Path, labelled: bool = True) -> list[Any]:
        raise ValueError(f"{path}: MultiTask reads each task's files with that task: give data.tasks")

    def _positions(self, examples: list[TaskExample]) -> dict[str, list[int]]:
        """The positions of each task's examples in ``examples`` (tasks in their order)."""
        positions: dict[str, list[int]] = {name: [] for name in self._tasks}
        for i, e in enumerate(examples):
            positions[e.task].append(i)
        return {name: p for name, p in positions.items() if p}

    def learn(self, examples: list[TaskExample]) -> None:
        for name, positions in self._positions(examples).items():
            self._tasks[name].learn([examples[i].example for i in positions])

    def featurize(self, examples: list[TaskExample], tokenizer: BertTokenizer, max_length: int) -> list[Feature]:
        """Each task's features, with ``task`` set and ``example_index`` pointing into
        ``examples`` (all tasks')."""
        features = []
        for name, positions in self._positions(examples).items():
            for f in self._tasks[name].featurize([examples[i].example for i in positions], tokenizer, max_length):
                features.append({**f, "example_index": positions[f["example_index"]], "task": name})
        return features

    def batch_order(self, features: Sequence[Feature], settings: BatchSettings) -> BatchOrder:
        """One task per batch. Training: the tasks mixed by ``temperature`` (or by a recipe's
        deprecated ``data.task_temperature``; ``TaskMixingBatchSampler``), every process taking
        its part of each global batch of processes x ``data.batch_size`` (``SplitBatchSampler``),
        so that all train the same task at each step; evaluation: each task's batches longest
        first, the tasks in turn, dealt among the processes (``TaskEvalBatchSampler``).

        Raises:
            ValueError: an evaluation task with fewer features than processes.
        """
        tasks = [f["task"] for f in features]
        world, rank = settings.num_replicas, settings.rank
        if not settings.train:
            batches = TaskEvalBatchSampler(tasks, settings.lengths, settings.batch_size, world, rank)
            return BatchOrder(batches, as_batch_sampler=world == 1)
        temperature = self.hparams.temperature if settings.task_temperature is None else settings.task_temperature
        mixed = TaskMixingBatchSampler(tasks, settings.batch_size * world, settings.seed, temperature)
        sampler = SplitBatchSampler(mixed, world, rank)
        left = sampler.left_out()
        message = (
            f"data.tasks on {world} processes: {left} training features of the first epoch are in global batches "
            "with fewer features than processes and are left out"
        )
        return BatchOrder(sampler, settings=(tasks, temperature), left_out=message if left else "")

    def batch_token_keys(self, features: Sequence[Feature]) -> frozenset[str] | None:
        """The token keys of the task whose features the batch holds (each batch holds one's)."""
        return self._tasks[features[0]["task"]].token_keys

    # ----- predictions: each task's records, in input order -----
    def predict(self, predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each run of features of one task (``MultiTaskHeads.feature_predictions`` names it in
        ``task``) predicted by that task, in order."""
        predicted = []
        for name, run in itertools.groupby(predictions, key=lambda p: p["task"]):
            predicted += self._tasks[name].predict([{k: v for k, v in p.items() if k != "task"} for p in run])
        return predicted

    def format_predictions(
        self, examples: list[TaskExample], predictions: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = [{} for _ in examples]
        for name, positions in self._positions(examples).items():
            local = {index: i for i, index in enumerate(positions)}
            own = [
                {**p, "example_index": local[p["example_index"]]} for p in predictions if p["example_index"] in local
            ]
            formatted = self._tasks[name].format_predictions([examples[i].example for i in positions], own)
            for index, record in zip(positions, formatted, strict=True):
                records[index] = {"task": name, **record}
        return records


def own_outputs(outputs: dict[str, torch.Tensor], task: str) -> dict[str, torch.Tensor]:
    """A task head's outputs as it returned them: ``MultiTaskHeads`` names its losses
    ``{task}/loss`` (``{task}/mlm_loss`` …); the weighted ``loss`` is the batch's."""
    prefix = f"{task}/"
    return {k.removeprefix(prefix): v for k, v in outputs.items() if k != "loss"}


MultiTaskHead = deprecated_alias(MultiTask, "MultiTaskHead", "bertkit.multitask", renamed={"heads": "tasks"})
