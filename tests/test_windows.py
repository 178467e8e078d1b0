"""Long sentences: overlapping word-aligned windows; every word owned once; no word dropped."""

from __future__ import annotations

import itertools

import pytest
from bertkit_plugins.token_tagging import TokenClassification
from bertkit_plugins.token_tagging.conll import Sentence
from bertkit_plugins.token_tagging.windows import make_windows, owners
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertTokenizer
from bertkit.data.windows import max_context_window


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.integers(1, 6), min_size=1, max_size=120),
    budget=st.integers(1, 40),
    stride_frac=st.floats(0, 0.9),
)
def test_windows_cover_everything_and_each_word_has_one_owner(pieces, budget, stride_frac):
    word_ids = [w for w, n in enumerate(pieces) for _ in range(n)]
    stride = min(int(budget * stride_frac), budget - 1)
    spans = make_windows(word_ids, budget, stride)
    assert spans[0][0] == 0 and spans[-1][1] == len(word_ids)
    for (s1, e1), (s2, _) in itertools.pairwise(spans):
        assert s1 < s2 <= e1  # progress, no gap
    assert all(0 < e - s <= budget for s, e in spans)
    owner = owners(word_ids, spans)
    assert set(owner) == set(range(len(pieces)))
    for w, k in owner.items():
        s, e = spans[k]
        assert s <= word_ids.index(w) < e


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return BertTokenizer.from_pretrained(minilm_dir)


def test_long_sentence_loses_no_word(tokenizer):
    words = [f"Word{i}" if i % 7 else "Kowalczykowski" for i in range(300)]
    tags = ["B-PER" if i % 7 == 0 else "O" for i in range(300)]
    sentence = Sentence(words, tags, "mem:1", list(range(300)))
    head = TokenClassification(["PER"], stride=16)
    features = head.featurize([sentence], tokenizer, max_length=64)
    assert len(features) > 5 and all(len(f["input_ids"]) <= 64 for f in features)
    owned = sorted(w for f in features for w in f["word_index"] if w >= 0)
    assert owned == list(range(300))  # every word exactly once
    labelled = [(w, label) for f in features for w, label in zip(f["word_index"], f["labels"], strict=True) if w >= 0]
    assert all(head.tags[label] == tags[w] for w, label in labelled)
    # Re-joining per-window predictions gives one tag per word, in order.
    preds = [{"example_index": 0, "word_index": w, "tag": tags[w]} for w, _ in labelled]
    record = head.format_predictions([sentence], preds)[0]
    assert record["tags"] == tags and record["words"] == words
    assert len(record["entities"]) == len([t for t in tags if t != "O"])


def test_word_the_tokenizer_drops_becomes_unk(tokenizer):
    sentence = Sentence(["A", "\u200b", "B"], ["O", "B-PER", "O"], "mem:1", [1, 2, 3])
    feature = TokenClassification(["PER"]).featurize([sentence], tokenizer, 16)[0]
    assert feature["word_index"].count(1) == 1
    assert feature["input_ids"][feature["word_index"].index(1)] == tokenizer.unk_token_id


def test_label_all_subwords_uses_inside_tags(tokenizer):
    sentence = Sentence(["Kowalczykowski"], ["B-PER"], "mem:1", [1])
    head = TokenClassification(["PER"], label_all_subwords=True)
    labels = [head.tags[i] for i in head.featurize([sentence], tokenizer, 16)[0]["labels"] if i >= 0]
    assert labels[0] == "B-PER" and len(labels) > 1 and set(labels[1:]) == {"I-PER"}


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.integers(1, 4), min_size=2, max_size=80), budget=st.integers(2, 30))
def test_tagger_owner_is_the_window_with_most_context(pieces, budget):
    """The tagger's owner of a word is Google's max-context window of its first token: no other
    window holding it gives more context (min of left and right, + 0.01 x length)."""
    word_ids = [w for w, n in enumerate(pieces) for _ in range(n)]
    spans = make_windows(word_ids, budget, budget // 2)
    for w, k in owners(word_ids, spans).items():
        pos = word_ids.index(w)
        score = {i: min(pos - s, e - 1 - pos) + 0.01 * (e - s) for i, (s, e) in enumerate(spans) if s <= pos < e}
        assert k in score
        assert all(score[i] < score[k] or (score[i] == score[k] and i >= k) for i in score)


def test_a_token_outside_every_window_is_an_error():
    with pytest.raises(ValueError, match="token 9 is in none of the windows"):
        max_context_window([(0, 4), (2, 6)], 9)
