"""The batch contract: list-valued feature keys are padded with the value the core or the head
declares, never with a guessed 0 (which would claim word 0, token 0 …)."""

from __future__ import annotations

import pytest
import torch

from bertkit.data.collate import pad_batch

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
