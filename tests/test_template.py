"""The tokenizer's template is the one source of ``[CLS] A [SEP] (B [SEP])``: ``build_inputs`` on
token ids gives exactly what ``encode`` gives on the text, and ``spread`` puts per-token values
at their sequence's positions (heads build windows through it, never by hand)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertTokenizer

WORDS = ["Hamburg", "steel", "won't", "naïve", "3.5", "re-entry", "Accra", "the", "[MASK]", "東京", "!"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)


@pytest.fixture(scope="module")
def tokenizer(minilm_dir) -> BertTokenizer:
    return BertTokenizer.from_pretrained(minilm_dir)


@settings(max_examples=60, deadline=None)
@given(first=texts, second=st.none() | texts)
def test_build_inputs_is_the_template_encode_applies(tokenizer, first, second):
    ids = [e.input_ids for e in tokenizer.tokenize([first] if second is None else [first, second])]
    inputs = tokenizer.build_inputs(*ids)
    encoded = tokenizer.encode(first, second)
    assert inputs.input_ids == encoded.input_ids
    assert inputs.token_type_ids == encoded.token_type_ids
    assert inputs.sequence_ids == encoded.sequence_ids
    assert len(inputs.input_ids) == sum(map(len, ids)) + tokenizer.num_special_tokens(pair=second is not None)
    a = list(range(len(ids[0])))
    b = [-(i + 1) for i in range(len(ids[1]))] if second is not None else []
    spread = inputs.spread(None, a, b)
    assert [v for v in spread if v is not None] == a + b
    assert [v is None for v in spread] == [s is None for s in inputs.sequence_ids]
    if second is not None:
        assert spread[inputs.start(1)] == -1
