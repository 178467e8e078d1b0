"""Training on several files: the gold set and text a trained model tagged (``bertkit predict``'s
records read back as training data, a distillation transfer set)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bertkit_plugins.token_tagging import TokenClassification
from bertkit_plugins.token_tagging.conll import entities, to_iob2
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertTokenizer
from bertkit.data.datamodule import BertDataModule

TYPES = ["PER", "LOC"]
TAGS = ["O"] + [f"{p}-{t}" for t in TYPES for p in ("B", "I")]
words = st.text("abcdefgh", min_size=1, max_size=6)
tagged = st.lists(st.lists(st.tuples(words, st.sampled_from(TAGS)), min_size=1, max_size=8), min_size=1, max_size=5)


def predicted_file(task: TokenClassification, path: Path, sentences: list[list[tuple[str, str]]]) -> None:
    """The records ``bertkit predict`` writes for ``sentences`` (each word predicted its tag)."""
    text = path.with_suffix(".txt")
    text.write_text("".join(" ".join(w for w, _ in s) + "\n" for s in sentences))
    examples = task.read_text_lines(text, enumerate(text.read_text().splitlines(), 1))
    predictions = [
        {"example_index": e, "word_index": w, "tag": tag}
        for e, sentence in enumerate(sentences)
        for w, (_, tag) in enumerate(sentence)
    ]
    records = task.format_predictions(examples, predictions)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@settings(max_examples=40, deadline=None)
@given(sentences=tagged, scheme=st.sampled_from(["IOB1", "IOB2", "BIOES"]))
def test_predicted_records_read_back_as_the_tags_predicted(tmp_path_factory, sentences, scheme):
    """Whatever the recipe's tag scheme (the gold file's), a file ``bertkit predict`` wrote is read
    with its own fields and as IOB2: the words predicted, in order, and the entities predicted."""
    task = TokenClassification(TYPES, tag_scheme=scheme)
    path = tmp_path_factory.mktemp("predicted") / "predictions.jsonl"
    predicted_file(task, path, sentences)
    read = task.read(path)
    assert [s.words for s in read] == [[w for w, _ in s] for s in sentences]
    predicted = [[t for _, t in s] for s in sentences]
    assert [s.tags for s in read] == [to_iob2(t, "IOB2") for t in predicted]
    assert [entities(s.tags) for s in read] == [entities(t) for t in predicted]


def test_a_list_of_training_files_reads_each_in_order(tmp_path, minilm_dir):
    """``data.train_file`` as a list: the gold CoNLL file's sentences, then the predicted file's,
    each read as the task reads it; an empty list or a missing file is an error naming the
    setting or the file (a streamed folder among others: tests/test_streaming.py)."""
    (tmp_path / "gold.conll").write_text("Ann I-PER\nran O\n\nOslo I-LOC\n")
    task = TokenClassification(TYPES)
    predicted_file(task, tmp_path / "silver.jsonl", [[("bo", "B-PER"), ("sat", "O")]])
    data = BertDataModule(
        task, BertTokenizer.from_pretrained(minilm_dir), data_dir=str(tmp_path),
        train_file=["gold.conll", "silver.jsonl"], batch_size=4,
    )  # fmt: skip
    data.setup("fit")
    assert [(s.words, s.tags) for s in data.examples["train"]] == [
        (["Ann", "ran"], ["B-PER", "O"]), (["Oslo"], ["B-LOC"]), (["bo", "sat"], ["B-PER", "O"]),
    ]  # fmt: skip
    assert sum(len(b["input_ids"]) for b in data.train_dataloader()) == 3
    with pytest.raises(ValueError, match=r"data.train_file=\[\]: expected a file name or a non-empty list"):
        BertDataModule(task, train_file=[])
    missing = BertDataModule(task, data_dir=str(tmp_path), train_file=["gold.conll", "nowhere.jsonl"])
    with pytest.raises(FileNotFoundError, match=r"nowhere.jsonl: data.train_file not found"):
        missing.check_files("fit")
