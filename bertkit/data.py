"""``BertDataModule``: files -> head-owned features -> dynamically padded, length-grouped batches.

The data module is generic; the model's head reads the files and builds the features, so one
data module serves every task. ``setup`` reads the examples (and lets the head ``prepare`` on the
training examples); features are built when a loader is first asked for, after a checkpoint has
restored what the head learned, and kept in memory.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from bertkit.choices import check
from bertkit.heads import Batch, Feature

log = logging.getLogger(__name__)

DATA_ENV = "BERTKIT_DATA_DIR"
PredictFormat = Literal["auto", "text", "native"]
# Padding values of the list keys the core knows (input_ids pads with the tokenizer's pad id);
# -100 is ignored by cross-entropy, -1 is no word. Any other list key is padded with the value
# its head declares in ``Head.pad_values``.
PAD_VALUES = {"token_type_ids": 0, "labels": -100, "word_index": -1}


def pad_batch(features: list[Feature], pad_token_id: int = 0, pad_values: Mapping[str, int] | None = None) -> Batch:
    """Collate features: pad list-valued keys to their longest in the batch, stack numbers, keep
    other values (such as the example a feature came from) as a list.

    Adds ``attention_mask`` (B, T), 1 for real tokens. A list key becomes a (B, longest) tensor
    padded with ``pad_token_id`` for ``input_ids``, ``PAD_VALUES`` for the core's keys and
    ``pad_values`` (the head's ``Head.pad_values``) for any other (lists of equal length, such as
    multi-hot labels, are padded by nothing).

    Raises:
        ValueError: a list key that is neither the core's nor in ``pad_values`` (padding with a
            guessed value could claim a real index, such as word 0).
    """
    T = max(len(f["input_ids"]) for f in features)
    values = {**PAD_VALUES, "input_ids": pad_token_id, **(pad_values or {})}
    batch: Batch = {}
    for key, first in features[0].items():
        if isinstance(first, list):
            if key not in values:
                raise ValueError(
                    f"feature key {key!r} holds lists but has no padding value: declare it in the head's "
                    f"pad_values (e.g. pad_values = {{{key!r}: -1}}); the core pads only {', '.join(sorted(PAD_VALUES))}"
                )
            pad = values[key]
            n = max(len(f[key]) for f in features)
            batch[key] = torch.tensor([f[key] + [pad] * (n - len(f[key])) for f in features])
        elif isinstance(first, (bool, int, float)):
            batch[key] = torch.tensor([f[key] for f in features])
        else:  # any other object (an example a head post-processes with) stays a plain list
            batch[key] = [f[key] for f in features]
    batch["attention_mask"] = torch.tensor(
        [[1] * len(f["input_ids"]) + [0] * (T - len(f["input_ids"])) for f in features]
    )
    return batch


class EpochRandomSampler(Sampler[int]):
    """A random order of ``range(n)`` drawn from ``seed + epoch``: the same order for the same
    epoch in any process, also after resuming from a checkpoint."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        yield from torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()


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


class TokenBudgetBatchSampler(Sampler[list[int]]):
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
        self.lengths, self.max_tokens, self.seed = lengths, max_tokens, seed
        self.padded, self.group_by_length = padded, group_by_length
        self.epoch = 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def sampler(self) -> TokenBudgetBatchSampler:
        """Itself: Lightning calls ``set_epoch`` on ``batch_sampler.sampler``."""
        return self

    def _order(self, g: torch.Generator) -> list[int]:
        order = torch.randperm(len(self.lengths), generator=g).tolist()
        if not self.group_by_length:
            return order
        mega = max(1, 50 * self.max_tokens * len(self.lengths) // max(1, sum(self.lengths)))  # ~50 batches
        return [
            j for i in range(0, len(order), mega) for j in sorted(order[i : i + mega], key=lambda j: -self.lengths[j])
        ]

    def batches(self) -> list[list[int]]:
        """This epoch's batches (the same list on every call within an epoch)."""
        if self._cache is not None and self._cache[0] == self.epoch:
            return self._cache[1]
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        batches: list[list[int]] = []
        current: list[int] = []
        tokens = longest = 0
        for i in self._order(g):
            n = self.lengths[i]
            cost = (len(current) + 1) * max(longest, n) if self.padded else tokens + n
            if current and cost > self.max_tokens:
                batches.append(current)
                current, tokens, longest = [], 0, 0
            current.append(i)
            tokens, longest = tokens + n, max(longest, n)
        if current:
            batches.append(current)
        if self.group_by_length:  # grouped batches come out sorted: shuffle them
            batches = [batches[b] for b in torch.randperm(len(batches), generator=g).tolist()]
        self._cache = (self.epoch, batches)
        return batches

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches()


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


class BertDataModule(pl.LightningDataModule):
    """Data for any head: split files in a data directory, featurized by the model's head.

    Split files are read from, in order: ``data_dir``; ``$BERTKIT_DATA_DIR/<dataset>``; else the
    small sample the head's plugin ships (``Head.sample_files``; its test split also serves
    ``predict``), with a message saying how to use the real data.

    Args:
        data_dir: directory holding the split files.
        dataset: the data set's path under ``$BERTKIT_DATA_DIR`` (e.g. ``ner/conll2003``).
        train_file: training split: absolute, relative to the working directory if it exists
            there, else relative to the data directory (the same for every ``*_file``).
        validation_file: validation split; None to skip validation (or see ``validation_split``).
        test_file: test split.
        predict_file: file to predict on.
        predict_format: ``auto`` (``.txt`` = plain text, one example per line; else the head's
            format), ``text``, or ``native``.
        validation_split: without a ``validation_file``, hold out this fraction of the training
            examples as the validation split: a random subset drawn with ``seed``, so the same
            seed gives the same split (for data sets without a dev file, such as MRPC).
        max_length: tokens per feature, specials included (≤ max_position_embeddings).
        batch_size: training batch size (features); see ``max_tokens``.
        max_tokens: define training batches by a token budget instead: at most this many real
            tokens per batch with the unpadded encoder (``model.unpad``), at most batch size x
            longest feature with the padded one (``TokenBudgetBatchSampler``). Random order each
            epoch (length-grouped with ``group_by_length``); the number of batches per epoch
            (and so the learning-rate schedule) follows from the budget. Single process only.
        eval_batch_size: batch size for validation/test/predict; None = ``2 * batch_size``.
        group_by_length: length-grouped training batches (less padding, faster on the padded
            path) instead of a uniformly random order (transformers' ``Trainer`` and Google BERT's
            default). Off by default: on CoNLL-2003 NER (4,000 sentences, 1 epoch, 5 seeds) it
            cost 4.1 ± 0.8 F1 (``benchmarks/results/seeds/ner/random-order.json``); on RTE it
            made no difference. Eval batches are always sorted by length.
        num_workers: DataLoader worker processes.
        seed: seed of the training order and of ``validation_split``.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        dataset: str | None = None,
        train_file: str | None = None,
        validation_file: str | None = None,
        test_file: str | None = None,
        predict_file: str | None = None,
        predict_format: PredictFormat = "auto",
        validation_split: float = 0.0,
        max_length: int = 128,
        batch_size: int = 32,
        max_tokens: int | None = None,
        eval_batch_size: int | None = None,
        group_by_length: bool = False,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check("data.predict_format", predict_format, PredictFormat)
        if not 0.0 <= validation_split < 1.0:
            raise ValueError(f"data.validation_split={validation_split}: expected 0 <= validation_split < 1")
        if max_length < 8:
            raise ValueError(f"data.max_length={max_length}: expected at least 8")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"data.max_tokens={max_tokens}: expected a positive number of tokens")
        self.save_hyperparameters()
        self._source: Path | dict[str, Path] | None = None
        self.examples: dict[str, list[Any]] = {}
        self.features: dict[str, list[Feature]] = {}
        self._attached: Any = None

    def attach(self, model: Any) -> None:
        """Read and featurize with ``model``'s head and tokenizer outside a trainer call, e.g.
        ``run.datamodule.setup("fit")`` in a notebook (``bertkit.compose`` attaches its model)."""
        self._attached = model

    def _module(self) -> Any:
        if self.trainer is not None and self.trainer.lightning_module is not None:
            return self.trainer.lightning_module
        if self._attached is None:
            raise RuntimeError(
                "BertDataModule has no BertModule: call datamodule.attach(model) or trainer.fit(model, datamodule)"
            )
        return self._attached

    def data_source(self) -> Path | dict[str, Path]:
        """The data directory, or the head's sample files by split (see the class docstring)."""
        if self._source is None:
            self._source = self._find_source()
        return self._source

    def _find_source(self) -> Path | dict[str, Path]:
        hp = self.hparams
        if hp.data_dir:
            return Path(hp.data_dir).expanduser()
        root = os.environ.get(DATA_ENV)
        if root and hp.dataset:
            return Path(root).expanduser() / hp.dataset
        sample = self._module().head.sample_files()
        if sample is None:
            raise ValueError(f"no data: set data.data_dir or {DATA_ENV} (with data.dataset)")
        where = f"set {DATA_ENV}=ROOT (reads ROOT/{hp.dataset})" if hp.dataset else "give data.dataset"
        log.warning(
            "No data directory given: using the bundled sample %s. For the real data pass --data.data_dir DIR or %s.",
            Path(sample["train"]).parent,
            where,
        )
        return sample

    def _path(self, split: str, name: str) -> Path:
        """An absolute path, a path that exists from the working directory, else the split's file in
        the source. The bundled sample stands in for the recipe's split files only: a predict file
        other than the test file must exist.

        Raises:
            FileNotFoundError: the file does not exist (named as given and where it was looked for).
        """
        given = Path(name).expanduser()
        source = None if given.is_absolute() or given.is_file() else self.data_source()
        if source is None:
            path = given
        elif not isinstance(source, dict):
            path = source / given
        elif split == "predict" and name != self.hparams.test_file:
            raise FileNotFoundError(
                f"{given}: data.predict_file not found (looked in {Path.cwd()}; no data directory is set)"
            )
        else:
            path = source["test" if split == "predict" else split]
        if not path.exists():  # a file, or a folder for heads that read folders (a corpus, shards)
            raise FileNotFoundError(f"{path}: data.{split}_file not found")
        return path

    def _read(self, split: str, name: str | None) -> list[Any]:
        if name is None:
            raise ValueError(f"data.{split}_file is not set")
        head, path = self._module().head, self._path(split, name)
        fmt = self.hparams.predict_format
        as_text = split == "predict" and (fmt == "text" or (fmt == "auto" and path.suffix == ".txt"))
        examples = head.read_text(path) if as_text else head.read(path, labelled=split != "predict")
        if not examples:
            raise ValueError(f"{path}: no examples in data.{split}_file (is it empty, or in another format?)")
        log.info("%s: %d examples from %s", split, len(examples), path)
        return examples

    def _load_train(self) -> None:
        """Read train, let the head ``prepare`` on all of it, then hold out ``validation_split``."""
        hp = self.hparams
        examples = self._read("train", hp.train_file)
        self._module().head.prepare(examples)
        if hp.validation_file or not hp.validation_split:
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
        if split == "train" or (split == "validation" and not self.hparams.validation_file):
            self._load_train()  # the validation split, if any, is held out of train
        else:
            self.examples[split] = self._read(split, self.hparams[f"{split}_file"])

    def _has_validation(self) -> bool:
        return bool(self.hparams.validation_file or self.hparams.validation_split)

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self._load("train")
            if self._has_validation():
                self._load("validation")
        elif stage == "validate":
            self._load("validation")
        elif stage in ("test", "predict"):
            self._load("test" if stage == "test" else "predict")

    def forget(self, split: str) -> None:
        """Drop a split's examples and features, so the next ``setup`` reads its file again."""
        self.examples.pop(split, None)
        self.features.pop(split, None)

    def _features(self, split: str) -> list[Feature]:
        if split not in self.features:
            module = self._module()
            self.features[split] = module.head.featurize(
                self.examples[split], module.tokenizer, self.hparams.max_length
            )
            log.info("%s: %d features", split, len(self.features[split]))
        return self.features[split]

    def _loader(self, split: str, train: bool) -> DataLoader:
        features = self._features(split)
        pad_id = self._module().tokenizer.pad_token_id
        hp = self.hparams
        # A lazy feature sequence (memory-mapped pre-training shards) gives its lengths without
        # reading them, and learns whether it feeds training (fresh dynamic masks) or evaluation.
        if hasattr(features, "training"):
            features.training = train
        lengths = getattr(features, "lengths", None)
        if lengths is None:
            lengths = [len(f["input_ids"]) for f in features]
        if train and hp.max_tokens:
            kwargs = dict(batch_sampler=self._token_budget(lengths))
        elif train:
            if hp.group_by_length:
                sampler = LengthGroupedSampler(lengths, hp.batch_size, hp.seed)
            else:
                sampler = EpochRandomSampler(len(lengths), hp.seed)
            kwargs = dict(batch_size=hp.batch_size, sampler=sampler)
        else:
            order = sorted(range(len(features)), key=lambda i: -lengths[i])
            world = self.trainer.world_size if self.trainer is not None else 1
            sampler = EvalShardSampler(order, world, self.trainer.global_rank) if world > 1 else order
            kwargs = dict(batch_size=hp.eval_batch_size or 2 * hp.batch_size, sampler=sampler)
        return DataLoader(
            features,
            # The loader draws its workers' base seed from this generator, not from torch's global
            # one: dropout's random numbers stay where a checkpoint saved them (exact resume).
            generator=torch.Generator().manual_seed(hp.seed),
            collate_fn=partial(pad_batch, pad_token_id=pad_id, pad_values=self._module().head.pad_values),
            num_workers=hp.num_workers,
            persistent_workers=hp.num_workers > 0,
            pin_memory=self.trainer is not None
            and self.trainer.strategy.root_device.type == "cuda",  # non-blocking copies
            **kwargs,
        )

    def _token_budget(self, lengths: Any) -> TokenBudgetBatchSampler:
        if self.trainer is not None and self.trainer.world_size > 1:
            raise ValueError("data.max_tokens: token-budget batches run in one process only; use data.batch_size")
        padded = not self._module().hparams.unpad
        return TokenBudgetBatchSampler(
            [int(n) for n in lengths], self.hparams.max_tokens, self.hparams.seed, padded, self.hparams.group_by_length
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("validation", train=False) if "validation" in self.examples else []

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("predict", train=False)
