"""Batch orders of ``BertDataModule``: random or length-grouped training orders shared among
processes, token-budget batches (dealt among processes), and evaluation shards. Each training
order is drawn from ``seed + epoch``: the same in every process and after resuming from a
checkpoint, and it can begin inside an epoch (``ResumableOrder``). A task that batches its own
way (``Task.batch_order``: the multitask plugin's task mixing) builds on ``EpochBatchSampler``,
``ProcessBatches`` and ``share``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DistributedSampler, Sampler


class ResumableOrder:
    """Mixin of the training orders: an epoch's order can begin after its first ``batches``
    batches (``resume``), so a run resumed from a checkpoint written inside an epoch goes on with
    the batch after the last one it trained on (``bertkit.data.resumable.TrainingLoader``)."""

    epoch: int
    _resume: tuple[int, int] | None = None
    keyed = False
    """Yield ``(epoch, index)`` instead of ``index`` (for ``LazyFeatures.epoch_keyed`` features)."""

    def key(self, index: int) -> int | tuple[int, int]:
        return (self.epoch, index) if self.keyed else index

    def resume(self, epoch: int, batches: int) -> None:
        """Skip the first ``batches`` batches of epoch ``epoch`` at the next iteration (of that
        epoch only: a resume at an epoch's end begins the next epoch from its start)."""
        self._resume = (epoch, batches)

    def begins_at(self) -> int:
        """Batches the next iteration of this epoch skips."""
        return self._resume[1] if self._resume is not None and self._resume[0] == self.epoch else 0

    def start(self) -> int:
        """``begins_at()``, read by the iteration itself: later iterations begin at the start."""
        start = self.begins_at()
        self._resume = None
        return start


class LengthGroupedSampler(Sampler[int]):
    """Random order in which each run of ``batch_size`` indices has similar lengths.

    Shuffle, cut into mega-batches of ``mega_batch_mult * batch_size``, sort each by length
    (longest first), then shuffle the batches: the scheme of Hugging Face's
    ``LengthGroupedSampler``. Less padding means fewer wasted FLOPs.
    """

    def __init__(self, lengths: list[int], batch_size: int, seed: int = 0, mega_batch_mult: int = 50) -> None:
        self.lengths, self.batch_size, self.seed, self.mult = lengths, batch_size, seed, mega_batch_mult
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.lengths), generator=g).tolist()
        mega = self.batch_size * self.mult
        batches = []
        for i in range(0, len(order), mega):
            chunk = sorted(order[i : i + mega], key=lambda j: -self.lengths[j])
            batches += [chunk[k : k + self.batch_size] for k in range(0, len(chunk), self.batch_size)]
        for b in torch.randperm(len(batches), generator=g).tolist():
            yield from batches[b]


class TrainShardSampler(ResumableOrder, DistributedSampler):
    """One process's share of an epoch's training order, in runs of ``batch_size`` indices: at
    every step the processes' batches together are the batch that one process with
    ``batch_size * num_replicas`` takes (the same examples in the same steps, whatever the
    number of processes). The order is drawn from ``seed + epoch``: random, or length-grouped
    over the global batch (``LengthGroupedSampler``). A last global batch shorter than the others
    is split as evenly as possible; one with fewer examples than processes is left out (a
    process with no batch would wait in the gradient all-reduce), which the data module reports.
    Lightning leaves a ``DistributedSampler`` as it is.

    Args:
        lengths: tokens per feature.
        batch_size: features per batch in each process.
        seed: seed of the order.
        group_by_length: length-grouped batches.
        num_replicas, rank: the process group's size and this process's rank.
    """

    def __init__(
        self, lengths: list[int], batch_size: int, seed: int = 0, group_by_length: bool = False,
        num_replicas: int = 1, rank: int = 0,
    ) -> None:  # fmt: skip
        self.lengths, self.batch_size, self.seed, self.group_by_length = lengths, batch_size, seed, group_by_length
        self.num_replicas, self.rank, self.epoch = num_replicas, rank, 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def left_out(self) -> int:
        """Examples left out of every epoch: a last global batch with fewer than ``num_replicas``."""
        rest = len(self.lengths) % (self.batch_size * self.num_replicas)
        return rest if rest < self.num_replicas else 0

    def _order(self) -> list[int]:
        if self.group_by_length:
            grouped = LengthGroupedSampler(self.lengths, self.batch_size * self.num_replicas, self.seed)
            grouped.set_epoch(self.epoch)
            return list(grouped)
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(len(self.lengths), generator=generator).tolist()

    def batches(self) -> list[list[int]]:
        """This process's batches of this epoch."""
        if self._cache is None or self._cache[0] != self.epoch:
            order, size, world = self._order(), self.batch_size * self.num_replicas, self.num_replicas
            parts = (order[i : i + size] for i in range(0, len(order) - self.left_out(), size))
            self._cache = (self.epoch, [share(part, world, self.rank) for part in parts])
        return self._cache[1]

    def __iter__(self) -> Iterator[int | tuple[int, int]]:
        for batch in self.batches()[self.start() :]:
            yield from map(self.key, batch)

    def __len__(self) -> int:
        return sum(len(b) for b in self.batches())


def share(batch: list[int], num_replicas: int, rank: int) -> list[int]:
    """Process ``rank``'s part of a global batch: ``num_replicas`` consecutive parts as even as
    possible (the first ``len(batch) % num_replicas`` parts one longer)."""
    size, extra = divmod(len(batch), num_replicas)
    begin = rank * size + min(rank, extra)
    return batch[begin : begin + size + (rank < extra)]


class EpochBatchSampler(ResumableOrder, Sampler[list[int]]):
    """Base of the training batch samplers: ``draw(generator)`` makes an epoch's batches from a
    generator seeded with ``seed + epoch``; ``batches()`` keeps them for the epoch. Lightning calls
    ``set_epoch`` on ``batch_sampler.sampler``, which is the sampler itself."""

    def __init__(self, seed: int) -> None:
        self.seed, self.epoch = seed, 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def sampler(self) -> EpochBatchSampler:
        return self

    def draw(self, g: torch.Generator) -> list[list[int]]:
        raise NotImplementedError

    def batches(self) -> list[list[int]]:
        """This epoch's batches (the same list on every call within an epoch)."""
        if self._cache is None or self._cache[0] != self.epoch:
            self._cache = (self.epoch, self.draw(torch.Generator().manual_seed(self.seed + self.epoch)))
        return self._cache[1]

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self) -> Iterator[list[int | tuple[int, int]]]:
        for batch in self.batches()[self.start() :]:
            yield list(map(self.key, batch))


class TokenBudgetBatchSampler(EpochBatchSampler):
    """Training batches defined by a token budget instead of a sentence count.

    Each epoch draws a random order (seeded by ``seed + epoch``), optionally length-grouped as
    ``LengthGroupedSampler`` does, and cuts it greedily into batches whose cost stays within
    ``max_tokens``: the number of real tokens (``padded=False``: what an unpadded encoder computes
    on) or batch size x longest sequence (``padded=True``: the padded (B, T) tensor). fairseq's
    ``--max-tokens`` and MosaicBERT's packing follow the same idea.

    Args:
        lengths: tokens per feature.
        max_tokens: the budget per batch.
        seed: seed of the order.
        padded: count padded positions rather than real tokens.
        group_by_length: sort mega-batches of about 50 batches by length before cutting.

    Raises:
        ValueError: a feature alone exceeds ``max_tokens``.
    """

    def __init__(
        self, lengths: list[int], max_tokens: int, seed: int = 0, padded: bool = False, group_by_length: bool = False
    ) -> None:
        longest = max(lengths, default=0)
        if longest > max_tokens:
            raise ValueError(f"data.max_tokens={max_tokens} is less than the longest feature ({longest} tokens)")
        super().__init__(seed)
        self.lengths, self.max_tokens = lengths, max_tokens
        self.padded, self.group_by_length = padded, group_by_length

    def _order(self, g: torch.Generator) -> list[int]:
        order = torch.randperm(len(self.lengths), generator=g).tolist()
        if not self.group_by_length:
            return order
        mega = max(1, 50 * self.max_tokens * len(self.lengths) // max(1, sum(self.lengths)))  # ~50 batches
        return [
            j for i in range(0, len(order), mega) for j in sorted(order[i : i + mega], key=lambda j: -self.lengths[j])
        ]

    def draw(self, g: torch.Generator) -> list[list[int]]:
        batches = cut_by_tokens(self._order(g), self.lengths, self.max_tokens, self.padded)
        if self.group_by_length:  # grouped batches come out sorted: shuffle them
            batches = [batches[b] for b in torch.randperm(len(batches), generator=g).tolist()]
        return batches


class ProcessBatches(ResumableOrder, DistributedSampler):
    """Base of the samplers that give one process its batches of a batch sampler's epoch (drawn
    alike in every process): ``own()`` is this process's list. They yield whole batches, lists of
    indices, for a ``DataLoader`` with ``batch_size=None`` over ``IndexedByBatch`` features:
    Lightning would otherwise replace a custom batch sampler's order with its
    ``DistributedSampler``, and leaves a ``DistributedSampler`` as it is.

    Args:
        batches: the epoch's batches (its ``set_epoch`` is called here).
        num_replicas, rank: the process group's size and this process's rank.
    """

    def __init__(self, batches: EpochBatchSampler, num_replicas: int = 1, rank: int = 0) -> None:
        self.inner, self.num_replicas, self.rank = batches, num_replicas, rank

    @property
    def epoch(self) -> int:  # type: ignore[override]
        return self.inner.epoch

    def set_epoch(self, epoch: int) -> None:
        self.inner.set_epoch(epoch)

    def own(self) -> list[list[int]]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[list[int | tuple[int, int]]]:
        for batch in self.own()[self.start() :]:
            yield list(map(self.key, batch))

    def __len__(self) -> int:
        return len(self.own())


class BatchShardSampler(ProcessBatches):
    """One process's share of a batch sampler's epoch (``TokenBudgetBatchSampler``): the epoch's
    batches, drawn alike in every process, dealt in turn (process ``rank`` takes batches ``rank``,
    ``rank + num_replicas`` …), so that at every step each process trains on a batch of its own
    within the budget (fairseq's ``--max-tokens``, a budget per GPU). The epoch's last batches,
    fewer than ``num_replicas``, are left out (a process with no batch would wait in the gradient
    all-reduce).
    """

    def left_out(self) -> int:
        """Batches of this epoch no process trains on (fewer than ``num_replicas``)."""
        return len(self.inner.batches()) % self.num_replicas

    def own(self) -> list[list[int]]:
        """This process's batches of this epoch."""
        batches = self.inner.batches()
        return batches[self.rank : len(batches) - self.left_out() : self.num_replicas]


class IndexedByBatch:
    """Features indexed by a whole batch of keys (the items of ``ProcessBatches``, and of a task's
    own order with ``batch_size`` None, ``BatchOrder``): ``[i, j, …]`` gives ``[features[i], features[j], …]``."""

    def __init__(self, features: Any) -> None:
        self.features = features

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, keys: list[Any]) -> list[Any]:
        return [self.features[key] for key in keys]


def cut_by_tokens(order: list[int], lengths: list[int], max_tokens: int, padded: bool = False) -> list[list[int]]:
    """``order`` cut greedily into consecutive batches whose cost stays within ``max_tokens``: real
    tokens (``sum(lengths)``), or with ``padded`` rows x longest (the padded (B, T) tensor). A
    feature longer than the budget forms a batch alone."""
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = longest = 0
    for i in order:
        n = lengths[i]
        cost = (len(current) + 1) * max(longest, n) if padded else tokens + n
        if current and cost > max_tokens:
            batches.append(current)
            current, tokens, longest = [], 0, 0
        current.append(i)
        tokens, longest = tokens + n, max(longest, n)
    if current:
        batches.append(current)
    return batches


class EvalShardSampler(DistributedSampler):
    """One process's share of an evaluation order: every ``world_size``-th index from ``rank``,
    each index on exactly one process (no padding repeats, unlike ``DistributedSampler``, whose
    repeated examples would count twice in a metric). Lightning leaves a ``DistributedSampler``
    as it is. The shares differ in length by at most one batch's worth of features.

    Args:
        order: the global order (longest first).
        num_replicas, rank: the process group's size and this process's rank.
    """

    def __init__(self, order: list[int], num_replicas: int, rank: int) -> None:
        self.order, self.num_replicas, self.rank = order, num_replicas, rank
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        return iter(self.order[self.rank :: self.num_replicas])

    def __len__(self) -> int:
        return len(self.order[self.rank :: self.num_replicas])
