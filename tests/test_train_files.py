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


@settings(max_examples=60, deadline=None)
@given(sentences=tagged, copies=st.integers(1, 3), seed=st.integers(0, 5))
def test_mention_replacement_swaps_each_mention_for_one_of_its_type(sentences, copies, seed):
    """Every new sentence is one with an entity, its words outside the mentions kept in place and
    each mention replaced by a mention of the same type found in the text; the seed fixes them."""
    from bertkit_plugins.token_tagging.augment import mention_replacement
    from bertkit_plugins.token_tagging.conll import Sentence

    read = [Sentence([w for w, _ in s], to_iob2([t for _, t in s], "IOB2"), f"f:{i}") for i, s in enumerate(sentences)]
    pool: dict[str, set[tuple[str, ...]]] = {}
    for sentence in read:
        for kind, start, end in entities(sentence.tags):
            pool.setdefault(kind, set()).add(tuple(sentence.words[start:end]))
    made = mention_replacement(read, copies, seed)
    sources = [s for s in read for _ in range(copies) if entities(s.tags)]
    assert len(made) == len(sources) and made == mention_replacement(read, copies, seed)

    def fits(words: list[str], source: Sentence, at: int, chunks: list[tuple[str, int, int]]) -> bool:
        """Whether ``words`` are ``source``'s from word ``at`` with each of ``chunks`` swapped."""
        if not chunks:
            return words == source.words[at:]
        kind, start, end = chunks[0]
        gap = source.words[at:start]
        rest = words[len(gap) :]
        return words[: len(gap)] == gap and any(
            tuple(rest[: len(m)]) == m and fits(rest[len(m) :], source, end, chunks[1:]) for m in pool[kind]
        )

    assert all(fits(words, source, 0, entities(source.tags)) for words, source in zip(made, sources, strict=True))


def test_augment_writes_tokens_that_predict_reads(tmp_path):
    from bertkit_plugins.token_tagging.augment import mention_replacement

    from tests.conftest import run_bertkit

    (tmp_path / "train.conll").write_text(
        "-DOCSTART- -X- O O\n\nMarta NNP B-NP I-PER\nflew VBD B-VP O\nto TO B-PP O\nOslo NNP B-NP I-LOC\n\n"
        "Jan NNP B-NP I-PER\nsaw VBD B-VP O\nParis NNP B-NP I-LOC\n\nIt PRP B-NP O\nrained VBD B-VP O\n"
    )
    said = run_bertkit("augment", "train.conll", "out.jsonl", "--copies", "2", cwd=tmp_path).stdout
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert "4 sentences (2 per sentence of train.conll with an entity) written to out.jsonl" in said
    assert len(records) == 4 and all(len(r["tokens"]) in (3, 4) for r in records)
    assert {r["tokens"][0] for r in records} <= {"Marta", "Jan"} and {r["tokens"][-1] for r in records} <= {
        "Oslo",
        "Paris",
    }
    task = TokenClassification(["PER", "LOC"])
    assert [s.words for s in task.read(tmp_path / "out.jsonl", labelled=False)] == [r["tokens"] for r in records]
    with pytest.raises(ValueError, match="copies=0: expected at least 1"):
        mention_replacement([], copies=0)
