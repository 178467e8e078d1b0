"""Document context for NER (``TokenClassification(context=K)``, FLERT): each window is encoded
with up to K tokens of its neighbours from the same document only, within ``max_length``, and
only its own words carry labels and word indices."""

from __future__ import annotations

from pathlib import Path

import pytest
from bertkit_plugins.token_tagging import TokenClassification

from bertkit.model.pretrained import load_tokenizer
from bertkit.model.tokenizer import BertTokenizer

DOCS = """-DOCSTART- -X- -X- O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP O

The DT B-NP O
European NNP I-NP B-ORG
Commission NNP I-NP I-ORG
said VBD B-VP O

-DOCSTART- -X- -X- O

Germany NNP B-NP B-LOC
won VBD B-VP O
"""


@pytest.fixture(scope="module")
def tokenizer() -> BertTokenizer:
    return load_tokenizer("all-MiniLM-L6-v2")


def own_ids(tokenizer: BertTokenizer, words: list[str]) -> list[int]:
    return tokenizer.tokenize([words], is_pretokenized=True)[0].input_ids


def test_a_window_is_encoded_with_its_documents_neighbours_only(tmp_path: Path, tokenizer) -> None:
    (tmp_path / "docs.conll").write_text(DOCS)
    head = TokenClassification(entity_types=["PER", "LOC", "ORG"], context=3)
    sentences = head.read(tmp_path / "docs.conll")
    assert [s.document for s in sentences][:3] == [sentences[0].document] * 3 != [sentences[3].document] * 3
    ids = [own_ids(tokenizer, s.words) for s in sentences]
    features = head.featurize(sentences, tokenizer, max_length=64)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    expected = [
        ids[0] + ids[1][:3],  # the document's first sentence: no left context
        ids[0][-3:] + ids[1] + ids[2][:3],
        ids[1][-3:] + ids[2],  # the last of its document: nothing from the next document
        ids[3],  # alone in its document
    ]
    for feature, want, sentence, _ in zip(features, expected, sentences, ids, strict=True):
        assert feature["input_ids"] == [cls, *want, sep]
        owned = [w for w in feature["word_index"] if w >= 0]
        assert owned == list(range(len(sentence.words)))  # its own words, each once
        labelled = [i for i, label in enumerate(feature["labels"]) if label != -100]
        assert labelled == [i for i, w in enumerate(feature["word_index"]) if w >= 0]
    plain = TokenClassification(entity_types=["PER", "LOC", "ORG"]).featurize(sentences, tokenizer, max_length=64)
    assert [f["input_ids"] for f in plain] == [[cls, *own, sep] for own in ids]


def test_context_gives_way_to_the_windows_own_tokens(tmp_path: Path, tokenizer) -> None:
    words = [f"w{i}" for i in range(40)]
    (tmp_path / "long.conll").write_text("".join(f"{w} O\n" for w in words) + "\nshort O\nend O\n")
    head = TokenClassification(entity_types=["PER"], context=64, stride=4)
    sentences = head.read(tmp_path / "long.conll")
    features = head.featurize(sentences, tokenizer, max_length=24)
    assert all(len(f["input_ids"]) <= 24 for f in features)
    owned = sorted(w for f in features[:-1] for w in f["word_index"] if w >= 0)
    assert owned == list(range(40))  # every word of the long sentence owned once, context or not
    assert all(len(f["input_ids"]) == 24 for f in features)  # the room filled with context


def test_paragraphs_of_a_text_file_are_documents(tmp_path: Path, tokenizer) -> None:
    head = TokenClassification(entity_types=["PER"], context=16)
    lines = enumerate(["Anna met Tom .", "They left .", "", "", "Oslo is cold ."], 1)
    sentences = head.read_text_lines(tmp_path / "x.txt", lines)
    assert sentences[0].document == sentences[1].document != sentences[2].document
    third = head.featurize(sentences, tokenizer, max_length=64)[2]["input_ids"]
    assert third == [tokenizer.cls_token_id, *own_ids(tokenizer, sentences[2].words), tokenizer.sep_token_id]


def test_a_negative_context_is_refused() -> None:
    with pytest.raises(ValueError, match=r"model.task.context=-1: expected a number of tokens >= 0"):
        TokenClassification(entity_types=["PER"], context=-1)


def test_each_request_to_a_predictor_is_a_document_of_its_own() -> None:
    from bertkit import BertModule
    from bertkit.inference.predictor import Predictor

    model = BertModule(
        TokenClassification(entity_types=["PER"], context=16),
        pretrained=None,
        preset="tiny",
        vocab_file="all-MiniLM-L6-v2",
    )
    predictor = Predictor.from_model(model.eval(), max_length=32)
    first, second = predictor.examples(["Anna met Tom .", "They left ."]), predictor.examples(["Oslo is cold ."])
    alone = [predictor.predict_examples([group])[0] for group in (first, second)]
    featurized = []
    featurize = predictor.task.featurize
    predictor.task.featurize = lambda examples, *a: featurized.append(examples) or featurize(examples, *a)
    assert predictor.predict_examples([first, second]) == alone  # batched together, never each other's context
    assert featurized == [first, second]
