"""Pre-training tasks on raw text: ``MaskedLM`` (masked LM) and ``PreTraining`` (that task plus
next-sentence or sentence-order prediction), on the corpus plumbing of ``CorpusTask``.

Data: a training file is a corpus (file or folder, see ``corpus``) or a directory written by
``bertkit prepare``. A corpus is prepared on first use into a cache keyed by its contents and
every setting (``CorpusPreparation``), then read from memory-mapped shards, masked as the task's
``masking`` strategy says (static masks drawn when preparing, or dynamic ones drawn when read).
The heads (``MaskedLMPredictionHead``, ``PreTrainingHeads``) are ``transformers``'
``BertForPreTraining`` ``cls`` layers.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
from bertkit_plugins.pretraining.corpus import python_docs_corpus
from bertkit_plugins.pretraining.instances import SentenceTask
from bertkit_plugins.pretraining.masking import MaskingStrategy, TokenMasking, maskable
from bertkit_plugins.pretraining.prepare import prepare
from bertkit_plugins.pretraining.shards import MANIFEST, Shards, read_manifest

from bertkit.api.task import (
    BertConfig,
    BertTokenizer,
    Feature,
    Head,
    LazyFeatures,
    StreamedFeatures,
    Task,
    by_example,
    cache_dir,
    check_choice,
    deprecated_alias,
    is_remote,
    registered,
    stored_class,
)

SentencePairTask = Literal["nsp", "sop"]
log = logging.getLogger(__name__)


@dataclass
class Corpus:
    """A training/evaluation source: a corpus file or folder, or a prepared directory (shards, or
    litdata chunks in a folder or at an object store's URL)."""

    path: str | Path


@dataclass
class MaskedText:
    """A text to fill in at ``predict``: ``[MASK]`` marks each token to predict."""

    text: str
    source: str


@dataclass
class CorpusPreparation:
    """How a corpus becomes training instances when a run prepares it (``bertkit prepare``'s
    options of the same meaning; google-research/bert ``create_pretraining_data.py``). These say
    how data is read, not what the model is: a resumed run may change them (with a warning).

    Args:
        dupe_factor: passes per document, each with other segments and masks.
        short_seq_prob: share of documents with a random shorter target length (0.1).
        documents_per_shard: documents per shard (NSP negatives' pool).
        workers: worker processes (0 = one per core).
        seed: the seed of instances and static masks.
    """

    dupe_factor: int = 1
    short_seq_prob: float = 0.1
    documents_per_shard: int = 500
    workers: int = 0
    seed: int = 12345


class MaskInstance:
    """A stored instance -> its feature, masked as the task says: static masks (stored by
    ``prepare``) as stored; dynamic masks (RoBERTa, Liu et al. 2019) drawn from a generator seeded
    by ``(seed, epoch, index)`` in training, and fixed per instance index in evaluation (epoch
    None), so held-out scores compare across steps. Called as ``StreamedFeatures``' ``to_feature``
    and by ``PreTrainingInstances``."""

    def __init__(self, tokenizer: BertTokenizer, masking: MaskingStrategy, dynamic: bool) -> None:
        self.masking, self.dynamic = masking, dynamic
        self.cls_id, self.sep_id, self.mask_id = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id
        self.vocab_size, self.special_ids = tokenizer.vocab_size, tokenizer.special_ids

    def __call__(self, item: dict[str, Any], epoch: int | None, seed: int) -> Feature:
        """``item``: a ``Shards`` instance with its ``index``."""
        index = int(item["index"])
        ids = item["input_ids"].tolist()
        a = int(item["segment_a_length"])
        labels = [-100] * len(ids)
        if self.dynamic:
            masked = self.masking.mask(
                ids,
                item["word_starts"].tolist(),
                maskable(ids, self.cls_id, self.sep_id),
                random.Random(f"{seed}/{epoch}/{index}" if epoch is not None else f"eval/{index}"),
                self.mask_id,
                self.vocab_size,
                self.special_ids,
            )
            inputs = masked.input_ids
            for p, label in zip(masked.positions, masked.labels, strict=True):
                labels[p] = label
        else:
            inputs = list(ids)
            for p, token in zip(item["masked_positions"].tolist(), item["masked_input_ids"].tolist(), strict=True):
                inputs[p], labels[p] = token, ids[p]
        return {
            "input_ids": inputs,
            "token_type_ids": [0] * a + [1] * (len(ids) - a),
            "labels": labels,
            "next_sentence_label": int(item["sentence_label"]),
            "example_index": index,
        }


class PreTrainingInstances(LazyFeatures):
    """Features from prepared shards, masked on the fly (``MaskInstance``; a lazy sequence for
    the DataLoader). ``epoch_keyed``: the training order passes the epoch, so dynamic masks are
    the same in one process or many, with any number of DataLoader workers, and after resuming.
    """

    epoch_keyed = True

    def __init__(self, shards: Shards, mask: MaskInstance) -> None:
        self.shards, self.mask = shards, mask
        self.training, self.seed = True, 0

    def __len__(self) -> int:
        return len(self.shards)

    @property
    def lengths(self) -> np.ndarray:
        return self.shards.lengths

    def for_training(self, training: bool, seed: int = 0) -> None:
        self.training, self.seed = training, seed

    def __getitem__(self, key: int | tuple[int, int]) -> Feature:  # type: ignore[override]
        """The instance ``key``: an index, or ``(epoch, index)`` from a training order."""
        epoch, index = key if isinstance(key, tuple) else (0, key)
        item = {**self.shards[index], "index": index}
        return self.mask(item, epoch if self.training else None, self.seed)


class CorpusTask(Task):
    """What every pre-training objective on raw text shares: reading a corpus or prepared shards,
    preparing a corpus into the cache on first use (``CorpusPreparation``), masking
    (``self.masking``, static or dynamic), and the default corpus. A subclass calls
    ``use_corpus(masking, preparation)`` in its ``__init__`` after ``save_hyperparameters`` and has
    the setting ``dynamic_masking`` (and ``sentence_task`` if it pairs segments; none = ``none``)."""

    data_settings = ("preparation",)
    token_keys = frozenset({"labels"})

    def use_corpus(self, masking: MaskingStrategy | dict | None, preparation: CorpusPreparation | dict | None) -> None:
        """Set ``self.masking`` (a strategy, its spec from a checkpoint, or None = ``TokenMasking()``)
        and ``self.preparation``, and store both in the settings as plain values (weights_only
        checkpoints)."""
        if isinstance(masking, dict):  # rebuilt from a checkpoint's hyper-parameters
            source = "checkpoint model.task.init_args.masking.class_path"
            cls = stored_class(str(masking.get("class_path")), MaskingStrategy, registered("register_masking"), source)
            masking = cls(**masking.get("init_args", {}))
        self.masking = masking or TokenMasking()
        self.hparams["masking"] = self.masking.spec()
        if isinstance(preparation, dict):
            preparation = CorpusPreparation(**preparation)
        self.preparation = preparation or CorpusPreparation()
        self.hparams["preparation"] = asdict(self.preparation)
        self._tokenizer: BertTokenizer | None = None

    @property
    def sentence_task(self) -> SentenceTask:
        return self.hparams.get("sentence_task", "none")

    # ----- data -----

    def read(self, path: Path, labelled: bool = True) -> list[Any]:
        """A corpus (file or folder) or a ``bertkit prepare`` directory, as one source."""
        return [Corpus(path if is_remote(path) else Path(path))]

    def featurize(self, examples: list[Any], tokenizer: BertTokenizer, max_length: int) -> Any:
        """Texts to predict on (``MaskedText``) -> encoded features; a ``Corpus`` -> its prepared
        instances (``PreTrainingInstances``, masked as ``self.masking`` says)."""
        self._tokenizer = tokenizer
        if examples and isinstance(examples[0], MaskedText):
            encoded = tokenizer.encode_batch([e.text for e in examples], max_length=max_length)
            return [
                {"input_ids": e.input_ids, "token_type_ids": e.token_type_ids, "example_index": i}
                for i, e in enumerate(encoded)
            ]
        (source,) = examples
        path, manifest = self._prepared(source.path, tokenizer, max_length)
        mask = MaskInstance(tokenizer, self.masking, self.hparams.dynamic_masking)
        if manifest.get("storage") == "litdata":
            return StreamedFeatures(path, to_feature=mask)
        return PreTrainingInstances(Shards(path), mask)

    def _settings(self, max_length: int) -> dict[str, Any]:
        p = self.preparation
        return dict(
            max_seq_length=max_length,
            sentence_task=self.sentence_task,
            short_seq_prob=p.short_seq_prob,
            dupe_factor=p.dupe_factor,
            seed=p.seed,
        )

    def _prepared(
        self, path: str | Path, tokenizer: BertTokenizer, max_length: int
    ) -> tuple[str | Path, dict[str, Any]]:
        """A prepared directory for ``path`` (itself if it has a manifest or is an object store's
        URL, else a cached one) and its manifest.

        Raises:
            ValueError: prepared shards that do not fit this task or tokenizer (names the field).
        """
        if not is_remote(path) and not (Path(path) / MANIFEST).is_file():
            static = self.masking if not self.hparams.dynamic_masking else None
            key = _corpus_key(path, tokenizer.vocab_sha256(), self._settings(max_length), static)
            target = cache_dir() / "pretraining" / key
            if not (target / "train" / MANIFEST).is_file():
                log.warning("preparing %s into %s (once; later runs reuse it)", path, target)
                prepare(
                    [path],
                    target,
                    tokenizer,
                    static_masking=static,
                    documents_per_shard=self.preparation.documents_per_shard,
                    workers=self.preparation.workers,
                    overwrite=True,
                    **self._settings(max_length),
                )
            path = target / "train"
        manifest = read_manifest(path)
        where = f"{str(path).rstrip('/')}/{MANIFEST}"
        expected = {"vocab_sha256": tokenizer.vocab_sha256(), "sentence_task": self.sentence_task}
        for field, value in expected.items():
            if manifest.get(field) != value:
                raise ValueError(
                    f"{where}: {field} is {manifest.get(field)!r}, but this model needs {value!r} "
                    "(prepare the corpus with the model's tokenizer and sentence task)"
                )
        if manifest["max_seq_length"] > max_length:
            raise ValueError(f"{where}: max_seq_length {manifest['max_seq_length']} > model.max_length {max_length}")
        if not self.hparams.dynamic_masking and not manifest["static_masking"]:
            raise ValueError(f"{where}: no static masks; prepare with static_masking or set dynamic_masking: true")
        return path, manifest

    def sample_files(self) -> dict[str, Path]:
        """The Python documentation topics from the standard library (every machine has them)."""
        paths = python_docs_corpus(cache_dir() / "python-docs-corpus")
        return {**paths, "test": paths["validation"]}

    def tokenizer(self) -> BertTokenizer:
        """The tokenizer the task featurized with or built its head for (records name tokens).

        Raises:
            RuntimeError: neither has happened.
        """
        if self._tokenizer is None:
            raise RuntimeError(f"{type(self).__name__}: no tokenizer yet (featurize or build_head first)")
        return self._tokenizer


class MaskedLM(CorpusTask):
    """Masked LM alone (RoBERTa's objective, Liu et al. 2019; BERT's first task, Devlin et al.
    2019 §3.1): predict the masked tokens; ``PreTraining`` adds NSP or SOP to it.

    Args:
        masking: the masking strategy (``TokenMasking``, ``WholeWordMasking``, ``NgramMasking``
            or a plugin's; ``bertkit plugins`` lists them); default token-level 15 %, 80/10/10,
            at most 20 predictions per sequence.
        dynamic_masking: draw masks when an instance is read (RoBERTa) instead of using those
            stored when the corpus was prepared (Google's static masks; the shards must have them).
        preparation: how a corpus is prepared (``CorpusPreparation``: ``dupe_factor`` …).
        top_k: candidates per ``[MASK]`` written by ``predict``.
    """

    def __init__(
        self,
        masking: MaskingStrategy | None = None,
        dynamic_masking: bool = True,
        preparation: CorpusPreparation | None = None,
        top_k: int = 5,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["masking", "preparation"])
        self.use_corpus(masking, preparation)

    def build_head(self, config: BertConfig, tokenizer: BertTokenizer) -> Head:
        from bertkit_plugins.pretraining.head import MaskedLMPredictionHead

        self._tokenizer = self._tokenizer or tokenizer
        return MaskedLMPredictionHead(config, tokenizer.mask_token_id, self.hparams.top_k)

    def read_text_lines(self, path: Path, lines: Iterable[tuple[int, str]]) -> list[MaskedText]:
        """Texts to fill in, one per line, each with at least one ``[MASK]``.

        Raises:
            ValueError: a line without ``[MASK]`` (names the file and line).
        """
        examples = []
        for number, line in lines:
            if not line.strip():
                continue
            if "[MASK]" not in line:
                raise ValueError(f"{path}:{number}: no [MASK] to predict in {line[:60]!r}")
            examples.append(MaskedText(line, f"{path}:{number}"))
        return examples

    def predict(self, predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per text: each ``[MASK]``'s position and its ``top_k`` candidate tokens with
        probabilities, from the head's candidate token ids (``MaskedLMPredictionHead.feature_predictions``)."""
        to_token = self.tokenizer().backend.id_to_token

        def named(mask: dict[str, Any]) -> dict[str, Any]:
            tokens = [{"token": to_token(c["token_id"]), "probability": c["probability"]} for c in mask["candidates"]]
            return {"position": mask["position"], "candidates": tokens}

        return [{**feature, "masks": [named(mask) for mask in feature["masks"]]} for feature in predictions]

    def format_predictions(self, examples: list[MaskedText], predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per text: each ``[MASK]``'s token position and top-k candidates, and the text with
        every ``[MASK]`` replaced by its best candidate (``##`` continuation marks dropped)."""
        records = []
        for example, features in zip(examples, by_example(predictions, len(examples), self), strict=True):
            masks = [mask for feature in features for mask in feature["masks"]]
            filled = example.text
            for mask in masks:
                filled = filled.replace("[MASK]", mask["candidates"][0]["token"].removeprefix("##"), 1)
            records.append({"source": example.source, "text": example.text, "filled": filled, "masks": masks})
        return records


class PreTraining(MaskedLM):
    """BERT's pre-training: masked LM plus a sentence-pair task, NSP or SOP, on the pooled
    ``[CLS]`` (Devlin et al. 2019, A.2; ``PreTrainingHeads``).

    Args:
        sentence_task: ``nsp`` (next sentence prediction, BERT) or ``sop`` (sentence order
            prediction, ALBERT; Lan et al. 2020). MLM alone is ``MaskedLM``.
        masking, dynamic_masking, preparation, top_k: as ``MaskedLM``.

    Raises:
        ValueError: an unknown ``sentence_task``.
    """

    def __init__(
        self,
        sentence_task: SentencePairTask = "nsp",
        masking: MaskingStrategy | None = None,
        dynamic_masking: bool = True,
        preparation: CorpusPreparation | None = None,
        top_k: int = 5,
    ) -> None:
        check_choice("model.task.sentence_task", sentence_task, SentencePairTask)
        super().__init__(masking, dynamic_masking, preparation, top_k)
        self.hparams["sentence_task"] = sentence_task

    def build_head(self, config: BertConfig, tokenizer: BertTokenizer) -> Head:
        from bertkit_plugins.pretraining.head import PreTrainingHeads

        self._tokenizer = self._tokenizer or tokenizer
        return PreTrainingHeads(config, tokenizer.mask_token_id, self.sentence_task, self.hparams.top_k)


def _corpus_key(path: Path, vocab: str, settings: dict[str, Any], static: MaskingStrategy | None) -> str:
    """Cache key: the corpus files' paths, sizes and modification times, vocabulary and settings."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    stats = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    blob = json.dumps([stats, vocab, settings, static.spec() if static else None], sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


# ----- release 0.1's names: the preparation settings were arguments of their own -----
FLAT_PREPARATION = {
    "dupe_factor": "dupe_factor",
    "short_seq_prob": "short_seq_prob",
    "documents_per_shard": "documents_per_shard",
    "prepare_workers": "workers",
    "prepare_seed": "seed",
}


def flat_preparation(task: type[CorpusTask]) -> list[inspect.Parameter]:
    """``task``'s ``__init__`` parameters with ``preparation`` spread out as release 0.1 had it."""
    defaults = {f.name: f.default for f in fields(CorpusPreparation)}
    kept = [p for p in inspect.signature(task.__init__).parameters.values() if p.name != "preparation"]
    flat = [
        inspect.Parameter(
            old, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults[new], annotation=type(defaults[new])
        )
        for old, new in FLAT_PREPARATION.items()
    ]
    return kept[:-1] + flat + kept[-1:] if kept[-1].name == "top_k" else kept + flat


def nest_preparation(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Release 0.1's flat preparation arguments gathered into ``preparation``."""
    flat = {new: kwargs.pop(old) for old, new in FLAT_PREPARATION.items() if old in kwargs}
    return {**kwargs, "preparation": CorpusPreparation(**flat)} if flat else kwargs


MaskedLMHead = deprecated_alias(
    MaskedLM, "MaskedLMHead", "bertkit_plugins.pretraining.head", convert=nest_preparation,
    parameters=flat_preparation(MaskedLM),
)  # fmt: skip
PreTrainingHead = deprecated_alias(
    PreTraining, "PreTrainingHead", "bertkit_plugins.pretraining.head", convert=nest_preparation,
    parameters=flat_preparation(PreTraining),
)  # fmt: skip
