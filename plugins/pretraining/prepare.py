"""``bertkit prepare``: a corpus -> memory-mapped shards of pre-training instances.

Documents stream from the corpus and are cut into groups of ``documents_per_shard``; each group
becomes one shard, built in a worker process: tokenize, ``create_instances`` for every document
``dupe_factor`` times, optionally mask (static masking), shuffle, write. NSP negatives are drawn
from the same group, so memory is bounded by ``workers`` groups in flight, not by the corpus (as
Google's README advises: shard the input and run the script per shard). Every group draws from
its own ``random.Random`` seeded by (seed, split, shard, pass), so the output does not depend on
the number of workers or on timing.

With ``holdout > 0`` whole documents are held out (a seeded draw per document) into a
``validation`` split beside ``train``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Literal

from bertkit_plugins.pretraining.corpus import read_documents
from bertkit_plugins.pretraining.instances import Document, SentenceTask, create_instances
from bertkit_plugins.pretraining.masking import MaskingStrategy, maskable
from bertkit_plugins.pretraining.shards import MANIFEST, stream_shards, write_manifest, write_shard

from bertkit.api.task import BertTokenizer, check_choice, load_tokenizer, require_litdata

log = logging.getLogger(__name__)
Storage = Literal["shards", "litdata"]


def tokenize_documents(tokenizer: BertTokenizer, documents: list[list[str]]) -> list[Document]:
    """Sentences -> (ids, word starts) with the tokenizer's word ids; empty sentences and
    documents are dropped (as Google's reader drops them)."""
    flat = [s for d in documents for s in d]
    encoded = iter(tokenizer.tokenize(flat))
    result = []
    for document in documents:
        sentences = []
        for _ in document:
            enc = next(encoded)
            if enc.input_ids:
                w = enc.word_ids
                starts = [j == 0 or w[j] != w[j - 1] for j in range(len(w))]
                sentences.append((enc.input_ids, starts))
        if sentences:
            result.append(sentences)
    return result


_worker: dict[str, Any] = {}


def _init_worker(tokenizer: BertTokenizer, settings: dict[str, Any], masking: MaskingStrategy | None) -> None:
    _worker.update(tokenizer=tokenizer, settings=settings, masking=masking)


def build_shard(split: str, index: int, documents: list[list[str]], directory: Path) -> dict[str, Any]:
    """Build and write one shard from raw documents (runs in a worker); its manifest entry."""
    tokenizer, s, masking = _worker["tokenizer"], _worker["settings"], _worker["masking"]
    docs = tokenize_documents(tokenizer, documents)
    instances, masks = [], [] if masking is not None else None
    specials = tokenizer.special_ids
    for dupe in range(s["dupe_factor"]):
        rng = random.Random(f"{s['seed']}/{split}/{index}/{dupe}")
        made = []
        for d in range(len(docs)):
            made += create_instances(
                docs,
                d,
                s["max_seq_length"],
                s["short_seq_prob"],
                s["sentence_task"],
                rng,
                tokenizer.build_inputs,
            )
        rng.shuffle(made)
        instances += made
        if masks is not None:
            for x in made:
                chosen_from = maskable(x.input_ids, tokenizer.cls_token_id, tokenizer.sep_token_id)
                masks.append(
                    masking.mask(
                        x.input_ids,
                        x.word_starts,
                        chosen_from,
                        rng,
                        tokenizer.mask_token_id,
                        tokenizer.vocab_size,
                        specials,
                    )
                )
    entry = write_shard(directory / f"shard-{index:05d}", instances, masks)
    return {**entry, "documents": len(docs)}


def prepare(
    inputs: str | list[str],
    output: str,
    vocab: str | BertTokenizer = "all-MiniLM-L6-v2",
    lowercase: bool = True,
    max_seq_length: int = 128,
    sentence_task: SentenceTask = "nsp",
    short_seq_prob: float = 0.1,
    dupe_factor: int = 1,
    static_masking: MaskingStrategy | None = None,
    holdout: float = 0.0,
    documents_per_shard: int = 500,
    workers: int = 0,
    seed: int = 12345,
    overwrite: bool = False,
    storage: Storage = "shards",
    chunk_bytes: str = "64MB",
) -> dict[str, Path]:
    """Turn corpus files/folders into shards under ``output/train`` (and ``output/validation``).

    Args:
        inputs: a corpus file (a sentence per line, blank line between documents) or folder (a
            document per file), or a list of them; see ``bertkit_plugins.pretraining.corpus``.
        output: the directory to write; each split gets a folder with ``manifest.json``.
        vocab: ``vocab.txt``, a tokenizer/model directory, a registered model name, or (from
            Python) a ``BertTokenizer``.
        lowercase: lower-case text (applies to a ``vocab.txt``; directories carry their own).
        max_seq_length: tokens per instance, specials included (Google: 128, then 512).
        sentence_task: ``nsp`` (next sentence prediction), ``sop`` (sentence order, ALBERT) or
            ``none`` (MLM only).
        short_seq_prob: share of documents with a random shorter target length (0.1).
        dupe_factor: passes over each document, each with other segments and masks (Google: 10
            with static masking; 1 suffices with dynamic masking).
        static_masking: a masking strategy to apply now and store (Google's static masks);
            None stores unmasked instances for dynamic masking at training time.
        holdout: fraction of documents held out into the ``validation`` split.
        documents_per_shard: documents per shard (NSP negatives come from the same shard).
        workers: worker processes; 0 = one per CPU core; 1 = in this process.
        seed: makes everything reproducible, independent of ``workers``.
        overwrite: replace an existing prepared split.
        storage: ``shards`` (memory-mapped numpy shards, read from a local disk) or ``litdata``
            (litdata chunks, the ``stream`` extra: streamed while training, from a local folder
            or, copied there, an object store such as ``s3://bucket/corpus/train``). The
            instances are the same; ``benchmarks/results/streaming.json`` compares the two.
        chunk_bytes: the size of a litdata chunk (``storage=litdata``).

    Returns:
        The prepared directory of each split.

    Raises:
        FileExistsError: a split is already prepared and ``overwrite`` is false.
        ValueError: bad settings, or a split's shard with NSP holds a single document.
        ImportError: ``storage=litdata`` without litdata (names the extra).
    """
    check_choice("sentence_task", sentence_task, SentenceTask)
    check_choice("storage", storage, Storage)
    if storage == "litdata":
        require_litdata()
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout={holdout}: expected 0 <= holdout < 1")
    if max_seq_length < 8 or dupe_factor < 1 or documents_per_shard < 2:
        raise ValueError("expected max_seq_length >= 8, dupe_factor >= 1, documents_per_shard >= 2")
    inputs = [inputs] if isinstance(inputs, str) else inputs
    tokenizer = vocab if isinstance(vocab, BertTokenizer) else load_tokenizer(vocab, lowercase)
    root = Path(output)
    splits = ["train"] + (["validation"] if holdout else [])
    for split in splits:
        if (root / split / MANIFEST).is_file() and not overwrite:
            raise FileExistsError(f"{root / split}: already prepared (pass overwrite=true to replace it)")
    for split in splits:  # the manifest is the completion marker: gone until the new shards are all written
        (root / split / MANIFEST).unlink(missing_ok=True)
    settings = dict(
        max_seq_length=max_seq_length,
        sentence_task=sentence_task,
        short_seq_prob=short_seq_prob,
        dupe_factor=dupe_factor,
        seed=seed,
    )
    workers = workers or os.cpu_count() or 1
    entries: dict[str, list[dict[str, Any]]] = {split: [] for split in splits}
    with _Pool(workers, tokenizer, settings, static_masking) as pool:
        groups: dict[str, list[list[str]]] = {split: [] for split in splits}
        held: dict[str, list[list[str]] | None] = {split: None for split in splits}
        counts = dict.fromkeys(splits, 0)
        draw = random.Random(f"{seed}/holdout")
        for document in read_documents(inputs):
            split = "validation" if holdout and draw.random() < holdout else "train"
            groups[split].append(document)
            if len(groups[split]) == documents_per_shard:  # submit one group late: the last may merge
                if held[split] is not None:
                    pool.submit(split, counts[split], held[split], root / split, entries[split])
                    counts[split] += 1
                held[split], groups[split] = groups[split], []
        for split in splits:
            last = (held[split] or []) + groups[split]
            if len(groups[split]) >= 2 and held[split] is not None:  # a small remainder merges into the last group
                pool.submit(split, counts[split], held[split], root / split, entries[split])
                counts[split] += 1
                last = groups[split]
            if not last:
                raise ValueError(f"{', '.join(map(str, inputs))}: no documents for the {split} split")
            pool.submit(split, counts[split], last, root / split, entries[split])
    for split in splits:
        shards = sorted(entries[split], key=lambda e: e["name"])
        manifest = {
            **settings,
            "static_masking": static_masking is not None,
            "masking": static_masking.spec() if static_masking is not None else None,
            "vocab_size": tokenizer.vocab_size,
            "vocab_sha256": tokenizer.vocab_sha256(),
            "inputs": [str(Path(p).resolve()) for p in inputs],
            "holdout": holdout,
            "documents": sum(e["documents"] for e in shards),
            "instances": sum(e["instances"] for e in shards),
            "tokens": sum(e["tokens"] for e in shards),
            "shards": shards,
        }
        write_manifest(root / split, manifest)
        if storage == "litdata":
            stream_shards(root / split, chunk_bytes, workers)
        log.warning(
            "%s%s: %d documents -> %d instances (%d tokens) in %d shards at %s",
            ", ".join(map(str, inputs)),
            f" ({split} split)" if holdout else "",
            manifest["documents"],
            manifest["instances"],
            manifest["tokens"],
            len(shards),
            root / split,
        )
    return {split: root / split for split in splits}


class _Pool:
    """Runs ``build_shard`` in worker processes (or in this process for one worker), with at most
    two groups per worker in flight so the reader never runs far ahead."""

    def __init__(
        self, workers: int, tokenizer: BertTokenizer, settings: dict[str, Any], masking: MaskingStrategy | None
    ) -> None:
        self.workers = workers
        self.pending: set[Future] = set()
        self.executor = None
        if workers > 1:
            self.executor = ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(tokenizer, settings, masking),
            )
        else:
            _init_worker(tokenizer, settings, masking)

    def __enter__(self) -> _Pool:
        return self

    def submit(self, split: str, index: int, documents: list[list[str]], directory: Path, into: list) -> None:
        if self.executor is None:
            into.append(build_shard(split, index, documents, directory))
            return
        while len(self.pending) >= 2 * self.workers:
            done, self.pending = wait(self.pending, return_when=FIRST_COMPLETED)
            for future in done:
                future.result()  # re-raise a worker's error here
        future = self.executor.submit(build_shard, split, index, documents, directory)
        future.add_done_callback(lambda f: into.append(f.result()) if f.exception() is None else None)
        self.pending.add(future)

    def __exit__(self, *exc: object) -> None:
        if self.executor is None:
            return
        try:
            for future in self.pending:
                future.result()
        finally:
            self.executor.shutdown(cancel_futures=True)
