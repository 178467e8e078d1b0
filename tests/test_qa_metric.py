"""SQuAD EM/F1 against hand-checked values and the official evaluation scripts (tests/squad_official.py)."""

from __future__ import annotations

import json
import random

import pytest
from bertkit_plugins.question_answering.metric import SquadScore, best_scores, normalize_answer
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import squad_official as official
from tests.conftest import DATA, need


@pytest.mark.parametrize(
    ("golds", "prediction", "exact", "f1"),
    [
        (["Eiffel Tower"], "the Eiffel tower.", 1.0, 1.0),  # article, case, punctuation
        (["Denver Broncos"], "Broncos", 0.0, 2 / 3),  # P 1, R 1/2
        (["Denver Broncos", "The Broncos", "Broncos"], "the Broncos team", 0.0, 2 / 3),  # best of three golds
        (["U.S. Army"], "US army", 1.0, 1.0),  # punctuation inside a word is dropped, not split
        (["an apple a day"], "apple day", 1.0, 1.0),
        (["Saint-Saëns"], "SaintSaëns", 1.0, 1.0),
        (["1,000 men"], "1000", 0.0, 2 / 3),
        (["Paris"], "London", 0.0, 0.0),
    ],
)
def test_hand_checked_cases(golds: list[str], prediction: str, exact: float, f1: float) -> None:
    for version_2 in (False, True):
        assert best_scores(golds, prediction, version_2) == pytest.approx((exact, f1))
    assert official.metric_max_over_ground_truths(official.f1_score_v1, prediction, golds) == pytest.approx(f1)
    assert max(official.compute_f1(g, prediction) for g in golds) == pytest.approx(f1)


def test_empty_answers_differ_between_v1_and_v2() -> None:
    # A gold answer that normalises to nothing: v1.1 gives F1 0 to an empty prediction, v2.0 gives 1.
    assert best_scores(["The"], "", version_2=False) == (1.0, 0.0)
    assert best_scores(["The"], "", version_2=True) == (1.0, 1.0)
    assert official.f1_score_v1("", "The") == 0 and official.compute_f1("", "") == 1
    assert best_scores(["Paris"], "", version_2=True) == (0.0, 0.0)
    assert normalize_answer("  The  Cat,  the hat ") == "cat hat"


def dataset(rows: list[tuple[str, list[str]]]) -> list[dict]:
    qas = [
        {"id": qid, "question": "?", "answers": [{"text": g, "answer_start": 0} for g in golds]} for qid, golds in rows
    ]
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


@settings(deadline=None, max_examples=60)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(["the cat", "a dog", "Paris", "cat", "dog house", "The", ""]), max_size=3),
            st.sampled_from(["cat", "the dog", "Paris!", "house", "dog house", "x"]),
            st.floats(-5, 5, allow_nan=False),
        ),
        min_size=1,
        max_size=25,
    ),
    st.floats(-3, 3, allow_nan=False),
)
def test_v2_scores_and_best_threshold_equal_official(rows: list, threshold: float) -> None:
    golds = [[g for g in golds if g] for golds, _, _ in rows]  # unanswerable: no gold answers
    spans = [span for _, span, _ in rows]
    diffs = [diff for _, _, diff in rows]
    data = dataset([(str(i), g) for i, g in enumerate(golds)])
    metric = SquadScore(version_2=True, threshold=threshold)
    metric.update(spans, diffs, golds)
    ours = {k: float(v) for k, v in metric.compute().items()}
    made = {str(i): "" if d > threshold else s for i, (s, d) in enumerate(zip(spans, diffs, strict=True))}
    expected = official.evaluate_v2(data, made)
    for key, value in expected.items():
        assert ours[{"exact": "exact_match"}.get(key, key)] == pytest.approx(value), key
    # find_best_thresh over the best spans (every question answered), na_probs = the differences.
    answered = {str(i): s for i, s in enumerate(spans)}
    exact_raw, f1_raw = official.get_raw_scores(data, answered)
    has = {str(i): bool(g) for i, g in enumerate(golds)}
    na = {str(i): d for i, d in enumerate(diffs)}
    for kind, raw in (("exact", exact_raw), ("f1", f1_raw)):
        best, at = official.find_best_thresh(answered, raw, na, has)
        assert ours[f"best_{kind}"] == pytest.approx(best)
        assert ours[f"best_{kind}_thresh"] == pytest.approx(at)


def perturbed_predictions(examples: list[dict], seed: int) -> dict[str, str]:
    """Realistic near-miss answers on real questions: gold, gold trimmed or extended by a word,
    another span of the passage."""
    rng = random.Random(seed)
    predictions = {}
    for context, qa in examples:
        gold = qa["answers"][rng.randrange(len(qa["answers"]))]
        start, end = gold["answer_start"], gold["answer_start"] + len(gold["text"])
        kind = rng.randrange(5)
        if kind == 1:
            following = context.find(" ", end + 1)  # one more word
            end = following if following >= 0 else len(context)
        elif kind == 2:
            start = context.find(" ", start) + 1 or start  # drop the first word
        elif kind == 3:
            start = rng.randrange(len(context))
            end = min(len(context), start + rng.randrange(1, 40))
        elif kind == 4:
            start = end = 0  # empty
        predictions[qa["id"]] = context[start:end]
    return predictions


def test_real_predictions_match_official_and_torchmetrics() -> None:
    from torchmetrics.text import SQuAD

    path = need(DATA / "qa" / "squad" / "dev-v1.1.json")
    data = json.loads(path.read_text(encoding="utf-8"))["data"][:12]
    examples = [(p["context"], qa) for a in data for p in a["paragraphs"] for qa in p["qas"]]
    predictions = perturbed_predictions(examples, seed=0)
    golds = [[a["text"] for a in qa["answers"]] for _, qa in examples]
    metric = SquadScore()
    metric.update([predictions[qa["id"]] for _, qa in examples], [0.0] * len(examples), golds)
    ours = {k: float(v) for k, v in metric.compute().items()}
    expected = official.evaluate_v1(data, predictions)
    assert 20 < expected["f1"] < 90  # a mix of hits and misses, not a degenerate case
    assert ours == pytest.approx(expected, abs=1e-9)
    tm = SQuAD()
    tm.update(
        [{"prediction_text": predictions[qa["id"]], "id": qa["id"]} for _, qa in examples],
        [
            {"answers": {"text": g, "answer_start": [0] * len(g)}, "id": qa["id"]}
            for g, (_, qa) in zip(golds, examples, strict=True)
        ],
    )
    assert {k: float(v) for k, v in tm.compute().items()} == pytest.approx(expected, abs=1e-3)  # float32
