"""The batch contract: list-valued feature keys are padded with the value the core or the head
declares, never with a guessed 0 (which would claim word 0, token 0 …)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.data.collate import collate, pad_batch
from bertkit.model.unpadded import LAYOUT_KEYS, Unpadded, given_layout, with_layout

FEATURES = [
    {"input_ids": [2, 7, 8, 3], "first_of": [1, 2], "labels": [0, 1, 0, 0], "example_index": 0},
    {"input_ids": [2, 9, 3], "first_of": [1], "labels": [1, 1, 0], "example_index": 1},
]


def test_an_undeclared_list_key_is_an_error_naming_it():
    with pytest.raises(ValueError, match="feature key 'first_of' holds lists but has no padding value"):
        pad_batch(FEATURES, pad_token_id=0)


def test_declared_and_core_keys_pad_with_their_values():
    batch = pad_batch(FEATURES, pad_token_id=5, pad_values={"first_of": -1})
    assert batch["input_ids"].tolist() == [[2, 7, 8, 3], [2, 9, 3, 5]]
    assert batch["first_of"].tolist() == [[1, 2], [1, -1]]
    assert batch["labels"].tolist() == [[0, 1, 0, 0], [1, 1, 0, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert torch.equal(batch["example_index"], torch.tensor([0, 1]))


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6), extra=st.integers(0, 3))
def test_the_layout_a_loader_computes_is_the_one_the_model_would(lengths, extra):
    """``collate(layout=True)``: within ``given_layout`` the batch's own mask gets the stored
    layout, equal field by field to ``from_mask``'s; any other mask is laid out anew."""
    features = [{"input_ids": list(range(2, 2 + n))} for n in lengths]
    batch = collate(features, pad_token_id=0, layout=True)
    if extra:  # a batch padded past its longest row (a bucketed shape)
        batch["attention_mask"] = torch.nn.functional.pad(batch["attention_mask"], (0, extra))
        batch = with_layout({k: v for k, v in batch.items() if k not in LAYOUT_KEYS})
    mask = batch["attention_mask"]
    expected = Unpadded.from_mask(mask)
    with given_layout(batch):
        got = Unpadded.of(batch["input_ids"], mask)
        anew = Unpadded.of(batch["input_ids"], mask.clone())
    assert got is not anew and Unpadded.of(batch["input_ids"], mask) is not got  # only inside, only that mask
    for layout in (got, anew):
        assert torch.equal(layout.indices, expected.indices) and torch.equal(layout.cu_seqlens, expected.cu_seqlens)
        assert (layout.offsets, layout.max_seqlen, layout.batch_size, layout.seq_len) == (
            expected.offsets, expected.max_seqlen, expected.batch_size, expected.seq_len,
        )  # fmt: skip


def test_a_model_reads_the_same_from_a_batch_with_its_layout():
    from bertkit_plugins.token_tagging import TokenClassification

    from bertkit import BertModule

    torch.manual_seed(0)
    model = BertModule(TokenClassification(["PER"]), pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2")
    features = [
        {"input_ids": [101, *range(1000, 1000 + n), 102], "labels": [-100] + [0] * n + [-100]} for n in (5, 1, 9)
    ]
    plain, laid_out = pad_batch(features), collate(features, layout=True)
    assert set(laid_out) - set(plain) == set(LAYOUT_KEYS)
    with torch.no_grad():
        model.train()  # dropout on: the same draws on both
        torch.manual_seed(1)
        a = model(plain)
        torch.manual_seed(1)
        b = model(laid_out)
    assert torch.equal(a["logits"], b["logits"]) and torch.equal(a["loss"], b["loss"])
