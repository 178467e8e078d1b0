"""CoNLL reading: IOB1 -> IOB2, BIOES, -DOCSTART-, malformed lines, unknown entity types."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from bertkit_plugins.token_tagging import TokenClassification
from bertkit_plugins.token_tagging.conll import entities, read_conll, to_iob2

from tests.conftest import CONLL, need


def test_iob1_to_iob2_rules():
    assert to_iob2(["I-PER", "I-PER", "O", "I-LOC"], "IOB1") == ["B-PER", "I-PER", "O", "B-LOC"]
    # B- in IOB1 marks an entity directly after one of the same type.
    assert to_iob2(["I-PER", "B-PER", "I-PER"], "IOB1") == ["B-PER", "B-PER", "I-PER"]
    assert to_iob2(["I-ORG", "I-LOC"], "IOB1") == ["B-ORG", "B-LOC"]
    iob2 = ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]
    assert to_iob2(iob2, "IOB2") == iob2
    assert to_iob2(["S-PER", "B-LOC", "E-LOC", "O"], "BIOES") == ["B-PER", "B-LOC", "I-LOC", "O"]


def test_real_conll2003_train_counts_and_scheme():
    """The whole of eng.train, IOB1 on disk: entity counts must equal the data set's documented ones."""
    sentences = read_conll(need(CONLL / "eng.train"))
    assert len(sentences) == 14041
    assert sum(len(s.words) for s in sentences) == 203621
    counts = Counter(kind for s in sentences for kind, _, _ in entities(s.tags))
    assert counts == {"PER": 6600, "LOC": 7140, "ORG": 6321, "MISC": 3438}
    for s in sentences:  # valid IOB2: every I-X continues an X entity
        for prev, tag in itertools.pairwise(["O", *s.tags]):
            assert not tag.startswith("I-") or prev[2:] == tag[2:]


def test_dev_and_test_sentence_counts():
    assert len(read_conll(need(CONLL / "eng.testa"))) == 3250
    assert len(read_conll(need(CONLL / "eng.testb"))) == 3453


def test_docstart_and_blank_lines(tmp_path):
    path = tmp_path / "d.conll"
    path.write_text("-DOCSTART- -X- O O\n\nA x x I-PER\nB x x O\n\n\n-DOCSTART- -X- O O\nC x x I-LOC\n")
    sentences = read_conll(path)
    assert [s.words for s in sentences] == [["A", "B"], ["C"]]
    assert sentences[1].source == f"{path}:8"


def test_bioes_and_tag_column(tmp_path):
    path = tmp_path / "b.tsv"
    path.write_text("New S-LOC x\nYork O x\n\nJohn B-PER x\nSmith E-PER x\n")
    sentences = read_conll(path, scheme="BIOES", tag_column=1)
    assert [s.tags for s in sentences] == [["B-LOC", "O"], ["B-PER", "I-PER"]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("EU I-ORG\nrejects\n", r"b.conll:2: expected 'token \.\.\. tag' columns"),
        ("EU I-ORG\nrejects Q-X\n", r"b.conll:2: tag 'Q-X' is not O or a valid IOB1 tag"),
        ("EU I-ORG\nrejects S-ORG\n", r"b.conll:2: tag 'S-ORG' is not O or a valid IOB1 tag"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "b.conll"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_conll(path)


def test_tag_column_out_of_range(tmp_path):
    path = tmp_path / "c.conll"
    path.write_text("EU x I-ORG\n")
    with pytest.raises(ValueError, match=r"c.conll:1: expected a tag in column 5 of 3"):
        read_conll(path, tag_column=5)


def test_entity_type_unknown_to_the_head_is_an_error(tmp_path):
    path = tmp_path / "eng.testb"
    path.write_text("Paris I-LOC\n\nWWF I-NGO\n")
    head = TokenClassification(["PER", "LOC", "ORG", "MISC"])
    with pytest.raises(ValueError, match=r"eng.testb:3: tag B-NGO has an entity type not in model.task.entity_types"):
        head.read(path)
