"""Streamed data (litdata chunks, the ``stream`` extra): ``bertkit prepare storage=litdata`` writes
the instances the memory-mapped shards hold; training streams them with the masks the shards
path draws; processes read disjoint, equal shares whatever the chunk counts (never a hung
gradient sync); a run killed inside an epoch resumes exactly; a fine-tuning split written by
``bertkit stream`` trains in place of its file; and the missing extra is named at once."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import random
import re
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import patch

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.data.streaming import StreamedFeatures, require_litdata, stored_feature, write_chunks
from tests.conftest import RECIPE, ROOT, TINY, free_port, run_bertkit
from tests.test_pretraining_data import corpus_file
from tests.test_resume import PRETRAIN, TWO, interrupt_then_resume

pytest.importorskip("litdata", reason="the stream extra (litdata) is not installed")


@pytest.fixture(autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path_factory.getbasetemp() / "bertkit-cache"
    monkeypatch.setenv("BERTKIT_CACHE", str(path))
    return path


def _prepare(corpus: Path, output: Path, storage: str, **settings) -> Path:
    from bertkit_plugins.pretraining.prepare import prepare

    common = dict(vocab="all-MiniLM-L6-v2", max_seq_length=48, documents_per_shard=10, workers=1, dupe_factor=2)
    return prepare(str(corpus), str(output), storage=storage, **{**common, **settings})["train"]


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


@pytest.mark.slow
@pytest.mark.system
def test_litdata_storage_holds_the_instances_of_the_shards_and_masks_them_alike(tmp_path):
    from bertkit_plugins.pretraining import TokenMasking
    from bertkit_plugins.pretraining.shards import Shards
    from bertkit_plugins.pretraining.task import MaskInstance, PreTrainingInstances

    from bertkit.model.pretrained import load_tokenizer

    corpus = corpus_file(tmp_path / "corpus.txt", random.Random(0), documents=40)
    shards = Shards(_prepare(corpus, tmp_path / "shards", "shards"))
    method = multiprocessing.get_start_method(allow_none=True)
    streamed = _prepare(corpus, tmp_path / "litdata", "litdata", chunk_bytes="2kb")
    assert multiprocessing.get_start_method(allow_none=True) == method  # litdata's spawn is undone
    manifest = json.loads((streamed / "manifest.json").read_text())
    assert manifest.pop("storage") == "litdata" and manifest == shards.manifest
    assert len(list(streamed.glob("chunk-*.bin"))) > 3
    items = StreamedFeatures(streamed, to_feature=lambda item, epoch, seed: item)
    assert len(items) == len(shards) > 40
    assert all(_same({**shards[i], "index": i}, items[i]) for i in range(len(shards)))
    from bertkit_plugins.pretraining.shards import read_manifest

    url = f"local:{streamed}"  # through litdata's download path, as from an object store
    assert read_manifest(url) == {**shards.manifest, "storage": "litdata"}
    fetched = StreamedFeatures(url, to_feature=lambda item, epoch, seed: item)
    assert all(_same(items[i], fetched[i]) for i in range(len(shards)))

    mask = MaskInstance(load_tokenizer("all-MiniLM-L6-v2", True), TokenMasking(), dynamic=True)
    from_shards = PreTrainingInstances(shards, mask)
    from_shards.for_training(True, seed=3)
    features = StreamedFeatures(streamed, to_feature=mask)
    features.for_training(True, seed=3)
    loader = features.training_loader(5, collate_fn=list)
    for epoch in range(2):
        seen = [f for batch in loader for f in batch]
        assert sorted(f["example_index"] for f in seen) == list(range(len(shards)))  # each once an epoch
        assert all(_same(f, from_shards[(epoch, f["example_index"])]) for f in seen)  # masks of (seed, epoch, index)
    from_shards.for_training(False)
    features.for_training(False)
    assert all(_same(features[i], from_shards[i]) for i in range(len(shards)))  # evaluation's fixed masks


def _indices(batch: list[dict]) -> list[int]:
    return [int(f["index"]) for f in batch]


def _share(rank: int, world: int, port: int, cases: list[tuple[str, int, int]], out: str) -> None:
    """One process of the DDP test, for each case (chunk folder, batch size, loader workers): two
    epochs of its streamed share, a gradient-like all-reduce after every batch (a process with
    fewer batches would leave the others waiting)."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    for case, (location, batch_size, workers) in enumerate(cases):
        features = StreamedFeatures(location)
        features.for_training(True, seed=0)
        loader = features.training_loader(batch_size, collate_fn=_indices, num_workers=workers)
        epochs = []
        for _ in range(2):
            batches = []
            for batch in loader:
                batches.append(batch)
                dist.all_reduce(torch.ones(1))
            epochs.append(batches)
        Path(out, f"{case}-{rank}.json").write_text(json.dumps({"epochs": epochs, "length": len(loader)}))
        dist.barrier()
    dist.destroy_process_group()


def _chunk_of(sizes: tuple[int, ...], chunk: int):
    start = sum(sizes[:chunk])
    for i in range(sizes[chunk]):
        yield {"index": start + i, "input_ids": np.arange(3 + i % 5, dtype=np.int32)}


SHARE_CASES = [((10, 10, 7), 4, 0), ((9, 4, 12, 7, 5), 3, 2)]  # 3 chunks; 4 chunks, 2 loader workers each


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.system
def test_processes_read_disjoint_equal_shares_of_chunks_that_do_not_divide(tmp_path):
    """Each case on the same two processes, forked (one start of each)."""
    from functools import partial

    import torch.multiprocessing as mp

    cases = []
    for case, (sizes, batch_size, workers) in enumerate(SHARE_CASES):
        location = tmp_path / f"chunks{case}"
        written = write_chunks(
            partial(_chunk_of, sizes), range(len(sizes)), location, chunk_size=max(sizes), expected=sum(sizes)
        )
        assert written == sum(sizes) and len(list(location.glob("chunk-*.bin"))) == -(-sum(sizes) // max(sizes)) >= 3
        cases.append((str(location), batch_size, workers))
    mp.start_processes(_share, args=(2, free_port(), cases, str(tmp_path)), nprocs=2, start_method="fork")
    for case, (sizes, batch_size, workers) in enumerate(SHARE_CASES):
        ranks = [json.loads((tmp_path / f"{case}-{r}.json").read_text()) for r in range(2)]
        assert ranks[0]["length"] == ranks[1]["length"] == len(ranks[0]["epochs"][0])
        for epoch in range(2):
            shares = [[i for batch in r["epochs"][epoch] for i in batch] for r in ranks]
            assert len(shares[0]) == len(shares[1])  # equal shares: the all-reduce after each batch never waited
            assert not set(shares[0]) & set(shares[1])  # no item read by both
            assert all(len(set(s)) == len(s) and set(s) <= set(range(sum(sizes))) for s in shares)
            assert sum(sizes) - 2 * len(shares[0]) < 2 * max(workers, 1) * batch_size  # drop_last leaves a remainder


PRETRAIN_STREAMED = [a for a in PRETRAIN if not a.startswith("--trainer.max_steps")] + ["--trainer.max_steps=12"]


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.parametrize("processes", [1, pytest.param(2, marks=pytest.mark.ddp)])
def test_streamed_pretraining_killed_inside_an_epoch_resumes_exactly(tmp_path, processes):
    from bertkit_plugins.pretraining.corpus import python_docs_corpus

    corpus = python_docs_corpus(tmp_path / "docs")["train"]
    streamed = _prepare(corpus, tmp_path / "litdata", "litdata", max_seq_length=32, dupe_factor=1, chunk_bytes="64kb")
    args = [*PRETRAIN_STREAMED, f"--data.train_file={streamed}"] + (TWO if processes == 2 else [])
    checkpoint = interrupt_then_resume(
        tmp_path, "KillAtStep", 10, args=args, folder="pretrain_bert", score="val/mlm_accuracy"
    )
    saved = checkpoint["BertDataModule"]["train_loader"]
    assert checkpoint["global_step"] == 9 and saved["current_epoch"] == 1
    assert saved["num_samples_yielded"] == 9 * (8 if processes == 1 else 4)  # this process's


@pytest.mark.slow
@pytest.mark.system
def test_a_split_written_by_bertkit_stream_trains_in_place_of_its_file(tmp_path):
    from bertkit import compose

    out = tmp_path / "train-chunks"
    proc = run_bertkit("stream", "--config", str(RECIPE), "--output", str(out), "--part_size", "100", cwd=tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "features" and f"-> {manifest['features']} features" in proc.stderr

    overrides = {"model.pretrained": None, "model.preset": "tiny", "model.vocab_file": "all-MiniLM-L6-v2"}
    written = compose(RECIPE, overrides=overrides).datamodule
    written.setup("fit")
    streamed = compose(RECIPE, overrides={**overrides, "data.train_file": str(out)}).datamodule
    streamed.setup("fit")
    expected, got = written._features("train"), streamed._features("train")
    assert isinstance(got, StreamedFeatures) and len(got) == len(expected) == manifest["features"]
    assert all(_same(got[i], expected[i]) for i in range(len(expected)))  # written in order, labels included

    fit = run_bertkit(
        "fit", "--config", str(RECIPE), *TINY, f"--data.train_file={out}", "--trainer.max_epochs=1",
        "--trainer.limit_val_batches=2", "--trainer.enable_progress_bar=false", cwd=tmp_path,
    )  # fmt: skip
    steps = -(-manifest["features"] // 32)  # every feature once, batches of data.batch_size 32
    assert f"{steps} optimizer steps" in fit.stdout + fit.stderr

    url = f"local:{out}"  # litdata's stand-in for an object store: chunks fetched into the cache
    remote = compose(RECIPE, overrides={**overrides, "data.train_file": url, "data.validation_file": url}).datamodule
    remote.setup("fit")
    by_url = remote._features("validation")
    assert len(by_url) == len(expected) and all(_same(by_url[i], expected[i]) for i in range(len(expected)))
    fit = run_bertkit(
        "fit", "--config", str(RECIPE), *TINY, f"--data.train_file={url}", f"--data.validation_file={url}",
        "--trainer.max_epochs=1", "--trainer.limit_train_batches=4", "--trainer.enable_progress_bar=false",
        "--trainer.default_root_dir=runs/remote", cwd=tmp_path,
    )  # fmt: skip
    assert "4 optimizer steps" in fit.stdout + fit.stderr and "val/f1" in fit.stdout + fit.stderr

    other = compose(ROOT / "recipes/sst2.yaml", overrides={**overrides, "data.train_file": str(out)}).datamodule
    with pytest.raises(
        ValueError, match=re.escape(f"{out / 'manifest.json'}: features of bertkit_plugins.token_tagging")
    ):
        other.setup("fit")
    held_out = compose(RECIPE, overrides={**overrides, "data.validation_split": 0.1, "data.validation_file": None})
    held_out = held_out.datamodule
    with pytest.raises(ValueError, match="data.validation_split: bertkit stream writes a split file whole"):
        held_out.write_stream("train", str(tmp_path / "never"))
    mixed = compose(RECIPE, overrides={**overrides, "data.train_file": ["eng.train", str(out)]}).datamodule
    with pytest.raises(ValueError, match="data.train_file: a streamed folder is read alone, not with other files"):
        mixed.setup("fit")
    bigger = compose(RECIPE, overrides={**overrides, "data.train_file": str(out), "model.max_length": 64}).datamodule
    bigger.setup("fit")
    with pytest.raises(ValueError, match="max_length 128 > model.max_length 64"):
        bigger._features("train")


def test_streamed_data_without_litdata_names_the_extra_before_lightning_starts(tmp_path, monkeypatch):
    import sys

    import bertkit.cli
    import bertkit.cli.extras
    from bertkit.cli.extras import check_extras

    chunks = tmp_path / "chunks"
    chunks.mkdir()
    (chunks / "index.json").write_text("{}")
    real = bertkit.cli.extras.find_spec
    monkeypatch.setattr(bertkit.cli.extras, "find_spec", lambda name: None if name == "litdata" else real(name))
    for options, where in [
        (["--data.train_file", "s3://bucket/train"], "the command line: data.train_file s3://bucket/train"),
        ([f"--data.data_dir={tmp_path}", "--data.validation_file=chunks"], "the command line: data.validation_file"),
    ]:
        with pytest.raises(ImportError, match=re.escape(where) + r".* pip install 'bertkit\[stream\]'"):
            check_extras(options)
        monkeypatch.setattr(bertkit.cli, "run_lightning", lambda args: pytest.fail("Lightning started"))
        assert bertkit.cli.main(["fit", "--config", str(RECIPE), *options]) == 2
    check_extras(["--data.train_file", str(tmp_path)])  # a folder without litdata's index.json
    monkeypatch.setitem(sys.modules, "litdata", None)
    with pytest.raises(
        ImportError, match=re.escape("needs litdata, which is not installed: pip install 'bertkit[stream]'")
    ):
        require_litdata()


@pytest.mark.slow
@pytest.mark.system
def test_a_writer_that_falls_short_is_an_error_not_a_short_folder(tmp_path):
    from functools import partial

    with pytest.raises(RuntimeError, match=r"3 items written of 5 \(a writer process failed"):
        write_chunks(partial(_chunk_of, (3,)), [0], tmp_path / "out", expected=5)
    assert stored_feature({"input_ids": np.arange(3), "label": 1}, None, 0) == {"input_ids": [0, 1, 2], "label": 1}


@settings(max_examples=16, deadline=None)
@given(
    before=st.sampled_from([None, "fork", "spawn", "forkserver"]), set_inside=st.sampled_from(["spawn", "fork"]),
    fails=st.booleans(),
)  # fmt: skip
def test_writing_chunks_gives_the_process_back_its_start_method(before, set_inside, fails, tmp_path_factory) -> None:
    """``write_chunks`` around a litdata that sets the start method (as ``litdata.optimize``
    does): the process has its own again afterwards, also when the writing fails."""
    from bertkit.data import streaming

    def optimize(output_dir, **_):
        multiprocessing.set_start_method(set_inside, force=True)
        if fails:
            raise RuntimeError("a writer failed")
        Path(output_dir, "index.json").write_text(json.dumps({"chunks": [{"chunk_size": 1}]}))

    original = multiprocessing.get_start_method(allow_none=True)
    try:
        multiprocessing.set_start_method(before, force=True)
        litdata = SimpleNamespace(optimize=optimize)
        with patch.object(streaming, "require_litdata", lambda: litdata), contextlib.suppress(RuntimeError):
            streaming.write_chunks(lambda x: [x], [1], tmp_path_factory.mktemp("chunks"), workers=1)
        assert multiprocessing.get_start_method(allow_none=True) == before
    finally:
        multiprocessing.set_start_method(original, force=True)
