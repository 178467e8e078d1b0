"""``SpanClassification``: nested entities read from JSON Lines (bad records named by file and line), every
span up to ``max_span_width`` labelled once across windows, entity F1 exact over spans (flat
output by non-maximum suppression, duplicates removed, gold spans no window classifies counted
as missed), and a model that learns nested entities and predicts them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from bertkit_plugins.token_tagging import SpanClassification
from bertkit_plugins.token_tagging.span_metric import SpanF1, keep_best

from bertkit import BertModule
from bertkit.data.collate import pad_batch
from bertkit.model.pretrained import load_tokenizer

NESTED = {"tokens": ["the", "IL-9", "gene", "in", "U938", "T", "cells"], "entities": [
    {"start": 1, "end": 3, "type": "DNA"}, {"start": 1, "end": 2, "type": "protein"},
    {"start": 4, "end": 7, "type": "cell_type"}, {"start": 4, "end": 5, "type": "cell_line"},
]}  # fmt: skip
TYPES = ["protein", "DNA", "cell_type", "cell_line"]


def write(path: Path, *records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"tokens": ["a", "b"], "entities": [{"start": 1, "end": 3, "type": "DNA"}]}, r"x.jsonl:2: entities\[0\]: expected 0 <= start < end <= 2 \(word indices, end exclusive\), got start 1, end 3"),
        ({"tokens": ["a", "b"], "entities": [{"start": 1, "end": 1, "type": "DNA"}]}, r"x.jsonl:2: entities\[0\]: expected"),
        ({"tokens": ["a"], "entities": [{"start": 0, "end": 1, "type": 3}]}, r"x.jsonl:2: entities\[0\].type: expected a string, got an integer 3"),
        ({"tokens": ["a"]}, r"x.jsonl:2: no field 'entities'; the object has \['tokens'\]"),
        ({"tokens": ["a"], "entities": [{"start": 0, "end": 1, "type": "RNA"}]}, r"x.jsonl:2: entity type 'RNA' not in model.task.entity_types"),
    ],
)  # fmt: skip
def test_a_bad_span_record_is_named_with_file_and_line(tmp_path, record, message):
    path = write(tmp_path / "x.jsonl", NESTED, record)
    with pytest.raises(ValueError, match=message):
        SpanClassification(TYPES).read(path)


def test_every_span_is_labelled_once_across_windows(tmp_path, caplog):
    tokenizer = load_tokenizer("all-MiniLM-L6-v2")
    long = {"tokens": NESTED["tokens"] * 6, "entities": [
        {**e, "start": e["start"] + 7 * i, "end": e["end"] + 7 * i} for i in range(6) for e in NESTED["entities"]
    ]}  # fmt: skip
    long["entities"].append({"start": 0, "end": 20, "type": "DNA"})  # longer than max_span_width
    head = SpanClassification(TYPES, max_span_width=4, stride=6)
    [sentence] = head.read(write(tmp_path / "x.jsonl", long))
    features = head.featurize([sentence], tokenizer, max_length=24)
    assert len(features) > 2
    warned = [r.getMessage() for r in caplog.records if "no window can classify" in r.getMessage()]
    assert len(warned) == 1 and "max_span_width=4" in warned[0] and "x.jsonl:1" in warned[0]
    labelled: dict[tuple[int, int], int] = {}
    for f in features:
        words = [w for w in f["word_present"] if w >= 0]
        for slot, label in enumerate(f["span_labels"]):
            if label != -100:
                span = (words[slot // 4], words[slot // 4] + slot % 4 + 1)
                assert span not in labelled, span  # classified in one window only
                labelled[span] = label
    widths = {(a, b) for a in range(42) for b in range(a + 1, min(a + 4, 42) + 1)}
    assert set(labelled) <= widths and len(labelled) >= len(widths) - 12  # spans across a window's end: few
    gold = {(e["start"], e["end"]): head.type_ids[e["type"]] for e in long["entities"] if e["end"] - e["start"] <= 4}
    assert {s: labelled[s] for s in gold if s in labelled} == {s: gold[s] for s in gold if s in labelled}
    assert sum(1 for s in labelled if labelled[s] > 0) == len([s for s in gold if s in labelled])
    triples = features[0]["gold_spans"]
    assert len(triples) == 3 * len(long["entities"]) and all(f["gold_spans"] == [] for f in features[1:])


def test_span_f1_nested_flat_duplicates_and_missed_gold():
    gold = torch.tensor([[0, 1, 3, 2], [0, 1, 2, 1], [1, 0, 20, 2]])  # the last: longer than any window classifies
    predicted = torch.tensor([[0, 1, 3, 2], [0, 1, 2, 1], [0, 1, 2, 1], [0, 2, 4, 3]])  # a repeat (padded sampler)
    scores = torch.tensor([0.9, 0.8, 0.8, 0.7])
    nested, flat = SpanF1(TYPES, nested=True), SpanF1(TYPES, nested=False)
    for metric in (nested, flat):
        metric.update(predicted, scores, gold)
    n, f = nested.compute(), flat.compute()
    assert n["precision"] == pytest.approx(2 / 3) and n["recall"] == pytest.approx(2 / 3)
    assert f["precision"] == pytest.approx(1.0) and f["recall"] == pytest.approx(1 / 3)  # NMS kept (1, 3) only
    assert n["f1_protein"] == pytest.approx(1.0) and n["recall_DNA"] == pytest.approx(0.5)
    assert keep_best([(0, 2, "a", 0.5), (1, 3, "b", 0.9), (3, 4, "c", 0.1)]) == [(1, 3, "b", 0.9), (3, 4, "c", 0.1)]


@pytest.mark.slow
def test_a_span_head_learns_nested_entities_and_predicts_them(tmp_path):
    torch.manual_seed(0)
    head = SpanClassification(TYPES, max_span_width=4, nested=True)
    model = BertModule(head, pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2")
    lines = [line for line in (Path(head.sample_files()["train"]).read_text().splitlines())][:16]
    examples = head.read(write(tmp_path / "train.jsonl", *lines))
    batch = pad_batch(head.featurize(examples, model.tokenizer, 48), pad_values=head.pad_values)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        loss = model(batch)["loss"]
        optimizer.zero_grad(), loss.backward(), optimizer.step()
    model.eval()
    with torch.no_grad():
        outputs = model(batch)
    outputs = model.head.decode(outputs, batch)
    model.head.update_metrics("val", outputs, batch)
    scores = model.head.metrics["val"].compute()
    assert scores["f1"] > 0.9, scores  # the training batch, learnt
    records = head.format_predictions(examples, head.predict(model.head.feature_predictions(outputs, batch)))
    nested = [
        r
        for r in records
        if any(
            a["words"][0] <= b["words"][0] and b["words"][1] <= a["words"][1] and a != b
            for a in r["entities"]
            for b in r["entities"]
        )
    ]
    assert nested and "tags" not in records[0]  # nested output: entities inside entities, no IOB2 tags
    first = records[0]["entities"][0]
    assert first["text"] == records[0]["text"][first["start"] : first["end"]] and 0 < first["score"] <= 1
