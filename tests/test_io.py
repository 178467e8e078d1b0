"""Files in and out: byte-order marks, decode errors, permissions of atomic writes and
checkpoints, predictions of a partial predict, and the plots written after fit."""

from __future__ import annotations

import ast
import os

import pytorch_lightning as pl
import torch
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.sequence_classification.readers import read_table
from bertkit_plugins.token_tagging.conll import read_conll
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertDataModule, BertModule
from bertkit.training.callbacks import prediction_records
from bertkit.training.checkpoints import AtomicCheckpointIO
from bertkit.training.plots import read_metrics, write_plots
from bertkit.utils.io import atomic_dir, atomic_path, replace_output, text_lines, write_jsonl
from tests.conftest import ROOT

BOM = "\ufeff"


def test_bom_is_removed_at_the_start_and_anywhere_else(tmp_path):
    path = tmp_path / "eng.train"
    path.write_text(f"{BOM}-DOCSTART- -X- O O\n\nEU B-ORG\nrejects O\n\n{BOM}Peter B-PER\n{BOM}\n", encoding="utf-8")
    sentences = read_conll(path, "IOB2")
    assert [s.words for s in sentences] == [["EU", "rejects"], ["Peter"]]
    assert [s.source for s in sentences] == [f"{path}:3", f"{path}:6"]
    tsv = tmp_path / "a.tsv"
    tsv.write_text(f"{BOM}sentence\tlabel\r\nfine{BOM} film\t1\r\n", encoding="utf-8")
    (example,) = read_table(tsv, "sentence", None, "label")
    assert (example.text, example.label) == ("fine film", "1")


def test_lines_keep_numbers_and_name_undecodable_bytes(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"one\r\ntwo\n\nthr\xe9e\n")
    lines = text_lines(path)
    assert [next(lines), next(lines), next(lines)] == [(1, "one"), (2, "two"), (3, "")]
    try:
        next(lines)
    except ValueError as err:
        assert str(err).startswith(f"{path}:4: not UTF-8 text (byte 0xe9 at column 4)")
    else:
        raise AssertionError("no error for a Latin-1 byte")


def test_atomic_files_and_checkpoints_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        with atomic_path(tmp_path / "out.jsonl") as tmp:
            tmp.write_text("{}\n")
        AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.ones(2)}}, tmp_path / "ck" / "last.ckpt")
    finally:
        os.umask(old)
    assert (tmp_path / "out.jsonl").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "ck/last.ckpt").stat().st_mode & 0o777 == 0o640
    assert torch.load(tmp_path / "ck/last.ckpt", weights_only=True)["state_dict"]["w"].sum() == 2
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["ck", "last.ckpt", "out.jsonl"]


def test_partial_predict_writes_records_for_the_predicted_examples_only(tmp_path):
    texts = ["short", "a rather longer text than the others here", "a text of middle length", "x"]
    (tmp_path / "p.txt").write_text("\n".join(texts) + "\n")
    head = SequenceClassification(labels=["neg", "pos"])
    model = BertModule(head, pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2")
    data = BertDataModule(data_dir=str(tmp_path), predict_file="p.txt", eval_batch_size=2)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, limit_predict_batches=1)
    batches = trainer.predict(model, datamodule=data)
    records = prediction_records(model, data, batches)
    # Evaluation batches run longest first: the first batch holds the two longest texts.
    assert [r["text"] for r in records] == [texts[1], texts[2]]
    assert all(set(r["probabilities"]) == {"neg", "pos"} for r in records)


def test_plots_are_written_beside_the_metrics(tmp_path):
    metrics = tmp_path / "metrics.csv"
    metrics.write_text(
        "epoch,step,train/loss,val/f1,val/f1_PER,val/f1_LOC,val/loss\n"
        "0,10,1.5,,,,\n0,10,,0.4,0.5,0.3,1.2\n1,20,0.9,,,,\n1,20,,0.6,0.7,0.5,0.8\n"
    )
    assert read_metrics(metrics)["val/f1"] == [(10, 0.4), (20, 0.6)]  # steps done, as progress lines count
    written = write_plots(metrics)
    assert [p.name for p in written] == ["learning_curves.png", "per_type.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)


@settings(max_examples=25, deadline=None)
@given(mode=st.integers(0o400, 0o777).filter(lambda m: m & 0o600 == 0o600), kind=st.sampled_from(["file", "folder"]))
def test_every_writer_keeps_the_mode_of_the_output_it_replaces(tmp_path_factory, mode, kind):
    root = tmp_path_factory.mktemp("modes")
    target = root / ("out.jsonl" if kind == "file" else "export")
    if kind == "file":
        target.write_text("old\n", encoding="utf-8")
        target.chmod(mode)
        write_jsonl(target, [{"a": 1}])  # predict's single part, the scores, checkpoints (atomic_path)
        assert target.stat().st_mode & 0o777 == mode
        partial = root / "out.jsonl.partial"  # predict's and embed's parts, ONNX files
        partial.write_text("new\n", encoding="utf-8")
        replace_output(partial, target)
        assert target.stat().st_mode & 0o777 == mode and target.read_text(encoding="utf-8") == "new\n"
    else:
        target.mkdir()
        (target / "config.json").write_text("{}", encoding="utf-8")
        target.chmod(mode | 0o100)
        with atomic_dir(target) as tmp:
            (tmp / "config.json").write_text("{}", encoding="utf-8")
        assert target.stat().st_mode & 0o777 == mode | 0o100


def test_outputs_reach_their_names_only_through_the_one_writer():
    """A rename onto a user's file (``os.replace``, ``os.rename``, ``shutil.move``, ``Path.rename``
    or ``Path.replace``) anywhere but ``bertkit.utils.io`` would skip the mode it keeps."""
    found = []
    for path in [*(ROOT / "bertkit").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        if path == ROOT / "bertkit" / "utils" / "io.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = ast.unparse(node.func.value)
                if (owner, node.func.attr) in {("os", "replace"), ("os", "rename"), ("shutil", "move")} or (
                    node.func.attr in ("rename", "replace")
                    and owner != "dataclasses"
                    and len(node.args) == 1
                    and not node.keywords
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found
