"""The example join every head's ``format_predictions`` starts from (four heads had four
copies of it): per-feature predictions grouped by ``example_index``, nothing silently dropped."""

from __future__ import annotations

import pytest
from bertkit_plugins.sequence_classification import SequenceClassification
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import by_example


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=20), st.randoms())
def test_groups_keep_every_feature_in_order(per_example, random):
    predictions = [{"example_index": e, "k": k} for e, n in enumerate(per_example) for k in range(n)]
    random.shuffle(predictions)
    groups = by_example(predictions, len(per_example), SequenceClassification())
    assert [len(g) for g in groups] == per_example
    for e, group in enumerate(groups):
        assert all(p["example_index"] == e for p in group)
        assert [p["k"] for p in group] == [p["k"] for p in predictions if p["example_index"] == e]


def test_a_missing_or_foreign_example_is_an_error_naming_the_head():
    head = SequenceClassification()
    with pytest.raises(ValueError, match=r"SequenceClassification: no prediction for example\(s\) \[1\]"):
        by_example([{"example_index": 0}, {"example_index": 2}], 3, head)
    with pytest.raises(ValueError, match="prediction for example 5, but there are 3 examples"):
        by_example([{"example_index": 5}], 3, head)


def test_the_default_format_refuses_several_features_per_example():
    head = SequenceClassification(labels=["a", "b"])
    one = {"example_index": 0, "scores": [0.2, 0.8]}
    with pytest.raises(ValueError, match="example 0 has several features"):
        head.format_predictions([object()], [one, one])
