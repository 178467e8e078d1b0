"""Entity-level P/R/F1 equals seqeval (conlleval semantics) on real tag sequences."""

from __future__ import annotations

import random

import pytest
import torch
from bertkit_plugins.token_tagging.conll import read_conll
from bertkit_plugins.token_tagging.metric import EntityF1, entity_scores
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CONLL, need

seqeval_metrics = pytest.importorskip("seqeval.metrics")

TYPES = ["PER", "LOC", "ORG", "MISC"]
TAGS = ["O"] + [f"{p}-{t}" for t in TYPES for p in ("B", "I")]


def seqeval_scores(gold, pred):
    report = seqeval_metrics.classification_report(gold, pred, output_dict=True, zero_division=0)
    scores = {
        "precision": seqeval_metrics.precision_score(gold, pred, zero_division=0),
        "recall": seqeval_metrics.recall_score(gold, pred, zero_division=0),
        "f1": seqeval_metrics.f1_score(gold, pred, zero_division=0),
    }
    for t in TYPES:
        row = report.get(t, {"precision": 0.0, "recall": 0.0, "f1-score": 0.0})
        scores.update({f"precision_{t}": row["precision"], f"recall_{t}": row["recall"], f"f1_{t}": row["f1-score"]})
    return scores


def corrupt(gold, rate, seed):
    """Plausible model errors: wrong types, B/I swaps, missed and spurious tags (ill-formed ones too)."""
    rng = random.Random(seed)
    return [[rng.choice(TAGS) if rng.random() < rate else t for t in s] for s in gold]


@pytest.fixture(scope="module")
def gold():
    return [s.tags for s in read_conll(need(CONLL / "eng.testa"))]


@settings(max_examples=25, deadline=None)
@given(rate=st.floats(0.0, 0.5), seed=st.integers(0, 10_000))
def test_equals_seqeval_on_corrupted_real_tags(gold, rate, seed):
    sample = gold[seed % 3000 : seed % 3000 + 250]
    pred = corrupt(sample, rate, seed)
    ours, ref = entity_scores(sample, pred, TYPES), seqeval_scores(sample, pred)
    assert ours == pytest.approx(ref, abs=1e-9)


def test_metric_joins_shuffled_word_level_updates(gold):
    """Updates in any order and split across calls (windows, batches) give seqeval's numbers."""
    sample, pred = gold[:400], corrupt(gold[:400], 0.1, 7)
    index = {t: i for i, t in enumerate(TAGS)}
    rows = [
        (e, w, index[p], index[g])
        for e, (gs, ps) in enumerate(zip(sample, pred, strict=True))
        for w, (g, p) in enumerate(zip(gs, ps, strict=True))
    ]
    random.Random(0).shuffle(rows)
    metric = EntityF1(TAGS)
    for k in range(0, len(rows), 97):
        chunk = torch.tensor(rows[k : k + 97])
        metric.update(chunk[:, 0], chunk[:, 1], chunk[:, 2], chunk[:, 3])
    metric.update(*torch.tensor(rows[:50]).T)  # duplicates (as a padded DistributedSampler makes) are dropped
    result = {k: v.item() for k, v in metric.compute().items()}
    assert result == pytest.approx(seqeval_scores(sample, pred), abs=1e-6)
