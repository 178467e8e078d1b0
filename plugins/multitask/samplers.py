"""The multi-task batch orders (``MultiTask.batch_order``): training batches of one task each,
the tasks mixed by temperature, every process taking its part of each global batch; evaluation
batches of one task each, the tasks in turn. Temperature-scaled task mixing: Arivazhagan et al.
2019, "Massively Multilingual Neural Machine Translation in the Wild", §4.2; Raffel et al. 2020
(T5), §3.5.2."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch.utils.data import DistributedSampler

from bertkit.api.task import EpochBatchSampler, ProcessBatches, share


class TaskMixingBatchSampler(EpochBatchSampler):
    """Training batches of one task each, the tasks mixed by temperature (see the module docstring).

    Args:
        tasks: the task of each feature.
        batch_size: features per batch.
        seed: seed of the order (``seed + epoch`` each epoch: the same order in any process and
            after resuming).
        temperature: ``T`` of the mix, >= 1 (``math.inf``: uniform over tasks).

    Raises:
        ValueError: ``temperature`` below 1.
    """

    def __init__(self, tasks: list[str], batch_size: int, seed: int = 0, temperature: float = 1.0) -> None:
        if not temperature >= 1.0:
            raise ValueError(
                f"model.task.temperature={temperature}: expected T >= 1 (1 = proportional, .inf = uniform)"
            )
        super().__init__(seed)
        self.groups: dict[str, list[int]] = {}
        for i, task in enumerate(tasks):
            self.groups.setdefault(task, []).append(i)
        self.batch_size, self.temperature = batch_size, temperature

    def probabilities(self) -> dict[str, float]:
        """Each task's share of the batches: n_t ** (1/T), normalised."""
        power = 0.0 if math.isinf(self.temperature) else 1.0 / self.temperature
        weights = {task: len(group) ** power for task, group in self.groups.items()}
        return {task: w / sum(weights.values()) for task, w in weights.items()}

    def _task_batches(self, task: str, g: torch.Generator) -> list[list[int]]:
        group = self.groups[task]
        order = [group[i] for i in torch.randperm(len(group), generator=g).tolist()]
        return [order[k : k + self.batch_size] for k in range(0, len(order), self.batch_size)]

    def draw(self, g: torch.Generator) -> list[list[int]]:
        cycles = {task: self._task_batches(task, g) for task in self.groups}
        total = sum(len(c) for c in cycles.values())
        if self.temperature == 1.0:
            pool = [b for c in cycles.values() for b in c]
            batches = [pool[i] for i in torch.randperm(total, generator=g).tolist()]
        else:
            names = list(self.groups)
            p = torch.tensor([self.probabilities()[t] for t in names], dtype=torch.float64)
            batches, used = [], dict.fromkeys(names, 0)
            for k in torch.multinomial(p, total, replacement=True, generator=g).tolist():
                task = names[k]
                if used[task] == len(cycles[task]):  # this task's batches are spent: a new cycle
                    cycles[task], used[task] = self._task_batches(task, g), 0
                batches.append(cycles[task][used[task]])
                used[task] += 1
        return batches

    def __len__(self) -> int:  # without drawing the epoch
        return sum(math.ceil(len(g) / self.batch_size) for g in self.groups.values())


class TaskEvalBatchSampler(DistributedSampler):
    """Evaluation batches of one task each, longest features first within a task, the tasks'
    batches taken in turn (so ``trainer.limit_val_batches`` still sees every task). With several
    processes, each task's batches are dealt among them (process ``rank`` takes batches ``rank``,
    ``rank + num_replicas`` … of every task), each feature on exactly one process, and a task
    with fewer batches than processes is cut into ``num_replicas`` smaller ones: every process
    evaluates every task, so each computes (and all-gathers) every task's metrics. Used as a
    ``batch_sampler`` in one process; with several, as the ``sampler`` of a loader with
    ``batch_size=None`` over ``IndexedByBatch`` features (Lightning leaves a
    ``DistributedSampler`` as it is).

    Args:
        tasks: the task of each feature.
        lengths: tokens per feature.
        batch_size: features per batch.
        num_replicas, rank: the process group's size and this process's rank.

    Raises:
        ValueError: a task has fewer features than there are processes.
    """

    def __init__(
        self, tasks: list[str], lengths: list[int], batch_size: int, num_replicas: int = 1, rank: int = 0
    ) -> None:
        order = sorted(range(len(tasks)), key=lambda i: -lengths[i])
        own = []
        for task in dict.fromkeys(tasks):
            features = [i for i in order if tasks[i] == task]
            if len(features) < num_replicas:
                raise ValueError(
                    f"data.tasks.{task}: {len(features)} evaluation features, fewer than the {num_replicas} processes "
                    "(each process evaluates every task)"
                )
            size = min(batch_size, len(features) // num_replicas)
            batches = [features[k : k + size] for k in range(0, len(features), size)]
            own.append(batches[rank::num_replicas])
        turns = max(len(b) for b in own)
        self.batches = [b[k] for k in range(turns) for b in own if k < len(b)]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches


class SplitBatchSampler(ProcessBatches):
    """One process's part of each global batch of a batch sampler's epoch (``TaskMixingBatchSampler``
    drawing batches of ``num_replicas`` x the batch size): at every step the processes' parts
    together are the batch one process would take (``share``: as even as possible), so every
    process trains the same task at each step and the steps equal one process's. A global batch
    with fewer features than processes is left out (a process with no batch would wait in the
    gradient all-reduce).
    """

    def left_out(self) -> int:
        """Features of this epoch no process trains on (in global batches with fewer than ``num_replicas``)."""
        return sum(len(b) for b in self.inner.batches() if len(b) < self.num_replicas)

    def own(self) -> list[list[int]]:
        """This process's batches of this epoch."""
        batches = self.inner.batches()
        return [share(b, self.num_replicas, self.rank) for b in batches if len(b) >= self.num_replicas]
