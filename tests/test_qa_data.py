"""Question answering data: SQuAD/JSONL readers, Google's windows, labels and post-processing."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from bertkit_plugins.question_answering.postprocess import answer, window_candidates
from bertkit_plugins.question_answering.readers import EXACT, NOT_FOUND, RELOCATED, read_qa
from bertkit_plugins.question_answering.task import QuestionAnswering
from bertkit_plugins.question_answering.windows import doc_spans
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.data.collate import pad_batch
from bertkit.data.windows import max_context_window
from bertkit.model.config import BertConfig
from bertkit.model.tokenizer import BertTokenizer
from tests.conftest import DATA, need

FILLER = "Nothing of note happened in the quiet village that year."


def squad_file(path: Path, paragraphs: list[dict], version: str = "1.1") -> Path:
    path.write_text(json.dumps({"version": version, "data": [{"title": "T", "paragraphs": paragraphs}]}))
    return path


def qa(qid: str, question: str, answers: list[tuple[str, int]], impossible: bool = False) -> dict:
    record = {"id": qid, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers]}
    return record | ({"is_impossible": True} if impossible else {})


@pytest.fixture(scope="module")
def tokenizer(minilm_dir: Path) -> BertTokenizer:
    return BertTokenizer.from_pretrained(minilm_dir)


# ----- readers -----
def test_answer_start_mismatch_is_counted_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    context = "The cat sat on the mat. The dog sat on the rug."
    path = squad_file(
        tmp_path / "d.json",
        [
            {
                "context": context,
                "qas": [
                    qa("ok", "Where did the cat sit?", [("the mat", 15)]),
                    qa("moved", "Where did the dog sit?", [("the rug", 30)]),  # really at 39
                    qa("absent", "Where did the bird sit?", [("the tree", 3), ("the rug", 39)]),
                ],
            }
        ],
    )
    with caplog.at_level(logging.WARNING):
        examples = QuestionAnswering().read(path)
    assert [e.answer_status for e in examples] == [[EXACT], [RELOCATED], [NOT_FOUND, EXACT]]
    assert (examples[1].answers[0].start, examples[1].answers[0].end) == (39, 46)
    assert examples[2].answers[0].start is None and examples[2].answers[0].text == "the tree"
    assert "2 of 4 answers are not at their answer_start: 1 moved" in caplog.text
    assert "1 not in the passage" in caplog.text and "moved (" in caplog.text


def test_relocation_picks_the_nearest_occurrence() -> None:
    from bertkit_plugins.question_answering.readers import locate

    context = "ab ab ab ab"
    assert locate(context, "ab", 7) == (6, RELOCATED)
    assert locate(context, "ab", 4) == (3, RELOCATED)  # 1 away; 6 is 2 away
    assert locate("ab  ab", "ab", 2) == (0, RELOCATED)  # a tie (0 and 4): the earlier
    assert locate(context, "ab", 3) == (3, EXACT)
    assert locate(context, "zz", 0) == (None, NOT_FOUND)


def test_reader_errors_name_the_place(tmp_path: Path) -> None:
    path = squad_file(tmp_path / "d.json", [{"context": "c", "qas": [qa("a", "q?", []), {"id": "b", "answers": []}]}])
    with pytest.raises(ValueError, match=r"d.json: data\[0\].paragraphs\[0\].qas\[1\].question: missing"):
        read_qa(path)
    (tmp_path / "x.json").write_text('{"data": [}')
    with pytest.raises(ValueError, match=r"x.json:1: not valid JSON"):
        read_qa(tmp_path / "x.json")
    (tmp_path / "y.jsonl").write_text('{"question": "q?", "context": "c"}\n')
    with pytest.raises(ValueError, match=r"y.jsonl:1: no 'answers'"):
        read_qa(tmp_path / "y.jsonl")
    assert read_qa(tmp_path / "y.jsonl", labelled=False)[0].id == f"{tmp_path / 'y.jsonl'}:1"


def test_v1_refuses_unanswerable_questions(tmp_path: Path) -> None:
    path = squad_file(tmp_path / "d.json", [{"context": "c", "qas": [qa("n", "q?", [], impossible=True)]}], "v2.0")
    with pytest.raises(ValueError, match="version_2_with_negative: true"):
        QuestionAnswering().read(path)
    assert QuestionAnswering(version_2_with_negative=True).read(path)[0].is_impossible


def test_jsonl_takes_both_answer_layouts(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    lines = [
        {"id": 7, "question": "Who?", "context": "Ann met Bob.", "answers": [{"text": "Bob", "answer_start": 8}]},
        {"question": "Who met?", "context": "Ann met Bob.", "answers": {"text": ["Ann"], "answer_start": [0]}},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    a, b = read_qa(path)
    assert (a.id, a.answers[0].start, a.answers[0].end) == ("7", 8, 11)
    assert (b.id, b.answers[0].text, b.answer_status) == (f"{path}:2", "Ann", [EXACT])


def test_real_squad_dev_is_read_completely() -> None:
    path = need(DATA / "qa" / "squad" / "dev-v1.1.json")
    examples = read_qa(path)
    assert len(examples) == 10570  # the data README's count
    assert len({e.id for e in examples}) == 10570
    assert sum(len(e.answers) for e in examples) == 34726
    assert all(s == EXACT for e in examples for s in e.answer_status)


# ----- windows (google-research/bert run_squad.py, verbatim loops) -----
def google_doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    doc_spans = []
    start_offset = 0
    while start_offset < num_tokens:
        length = num_tokens - start_offset
        if length > max_tokens_for_doc:
            length = max_tokens_for_doc
        doc_spans.append((start_offset, length))
        if start_offset + length == num_tokens:
            break
        start_offset += min(length, doc_stride)
    return doc_spans


def google_check_is_max_context(doc_spans: list[tuple[int, int]], cur_span_index: int, position: int) -> bool:
    best_score = None
    best_span_index = None
    for span_index, (start, length) in enumerate(doc_spans):
        end = start + length - 1
        if position < start:
            continue
        if position > end:
            continue
        num_left_context = position - start
        num_right_context = end - position
        score = min(num_left_context, num_right_context) + 0.01 * length
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index
    return cur_span_index == best_span_index


@settings(deadline=None, max_examples=60)
@given(st.integers(1, 120), st.integers(1, 150), st.data())
def test_doc_spans_and_max_context_match_google(room: int, stride: int, data: st.DataObject) -> None:
    # at most about 20 windows: Google's check is cubic in them (a 300-token passage at stride 1
    # has 300), and 20 already puts each position in several
    num_tokens = data.draw(st.integers(1, min(300, room + 20 * stride)), label="num_tokens")
    spans = doc_spans(num_tokens, room, stride)
    assert spans == google_doc_spans(num_tokens, room, stride)
    for position in range(num_tokens):
        theirs = [k for k in range(len(spans)) if google_check_is_max_context(spans, k, position)]
        assert [max_context_window([(s, s + n) for s, n in spans], position)] == theirs  # exactly one window


# ----- features and post-processing -----
def long_example(tmp_path: Path) -> tuple[Path, str, int]:
    """A passage far longer than 64 tokens whose answer sits near its end."""
    context = " ".join([FILLER] * 8) + " The treasure is buried under the old lighthouse. " + FILLER
    start = context.index("the old lighthouse")
    path = squad_file(
        tmp_path / "long.json",
        [{"context": context, "qas": [qa("q1", "Where is the treasure buried?", [("the old lighthouse", start)])]}],
    )
    return path, context, start


def test_answer_in_a_later_window_is_labelled_and_found(tmp_path: Path, tokenizer: BertTokenizer) -> None:
    path, context, start = long_example(tmp_path)
    head = QuestionAnswering(doc_stride=16)
    examples = head.read(path)
    features = head.featurize(examples, tokenizer, max_length=64)
    assert len(features) >= 3 and all(len(f["input_ids"]) <= 64 for f in features)
    labelled = [k for k, f in enumerate(features) if f["start_positions"] > 0]
    assert labelled and labelled[0] >= 1  # not in the first window
    assert all(features[k]["start_positions"] == 0 for k in range(len(features)) if k not in labelled)
    for k in labelled:
        f = features[k]
        assert (
            context[f["char_start"][f["start_positions"]] : f["char_end"][f["end_positions"]]] == "the old lighthouse"
        )
        assert f["token_type_ids"][f["start_positions"]] == 1
    # Logits that point at the answer in its window (and at [CLS] elsewhere) recover its text.
    batch = pad_batch(features, pad_values=head.pad_values)
    start_logits = torch.zeros(batch["input_ids"].shape)
    end_logits = torch.zeros(batch["input_ids"].shape)
    rows = torch.arange(len(features))
    start_logits[rows, batch["start_positions"]] = 8.0
    end_logits[rows, batch["end_positions"]] = 8.0
    layers = head.build_head(BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size), tokenizer)
    windows = layers.feature_predictions({"start_logits": start_logits, "end_logits": end_logits}, batch)
    (record,) = head.format_predictions(examples, head.predict(windows))
    assert (record["answer"], record["start"], record["end"]) == ("the old lighthouse", start, start + 18)
    assert record["score"] == pytest.approx(16.0)
    assert "abstained" not in record and record["n_best"][0]["text"] == "the old lighthouse"
    assert sum(c["probability"] for c in record["n_best"]) == pytest.approx(1.0)


def test_v2_impossible_questions_label_cls_everywhere(tmp_path: Path, tokenizer: BertTokenizer) -> None:
    path = squad_file(
        tmp_path / "v2.json",
        [{"context": " ".join([FILLER] * 6), "qas": [qa("n", "Where is the treasure?", [], impossible=True)]}],
        "v2.0",
    )
    head = QuestionAnswering(version_2_with_negative=True, doc_stride=16)
    features = head.featurize(head.read(path), tokenizer, max_length=48)
    assert len(features) > 1
    assert all((f["start_positions"], f["end_positions"]) == (0, 0) for f in features)


def test_unfound_answer_gives_no_training_signal(tmp_path: Path, tokenizer: BertTokenizer) -> None:
    path = squad_file(tmp_path / "d.json", [{"context": "Ann met Bob.", "qas": [qa("x", "Who?", [("Carl", 0)])]}])
    head = QuestionAnswering()
    (feature,) = head.featurize(head.read(path), tokenizer, max_length=32)
    assert (feature["start_positions"], feature["end_positions"]) == (-100, -100)


def test_window_candidates_respect_the_rules() -> None:
    T = 8
    start_logits = torch.tensor([[9.0, 1, 2, 3, 0, 0, 7, 0]])  # index 0 is [CLS]
    end_logits = torch.tensor([[9.0, 0, 5, 0, 4, 0, 0, 6]])
    may_start = torch.tensor([[0, 1, 1, 1, 1, 1, 0, 1]]).bool()  # 6: not max context
    may_end = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1]]).bool()
    scores, starts, ends = window_candidates(start_logits, end_logits, may_start, may_end, 20, max_answer_length=3)
    pairs = {
        (s, e): v for s, e, v in zip(starts[0].tolist(), ends[0].tolist(), scores[0].tolist(), strict=True) if v > -1e30
    }
    assert max(pairs, key=pairs.get) == (3, 4)  # 3+4; (6, 7) would be 13 but 6 may not start
    assert all(s <= e <= s + 2 and s != 6 and s >= 1 for s, e in pairs)
    assert len(pairs) == sum(1 for s in range(1, T) for e in range(1, T) if may_start[0, s] and s <= e <= s + 2)


def test_v2_abstains_by_null_score_difference() -> None:
    windows = [
        {"null_score": 5.0, "spans": [[3.0, 0, 3], [1.0, 4, 7]]},
        {"null_score": 2.5, "spans": [[2.0, 4, 7]]},
    ]
    context = "Ann met Bob"
    kept = answer(context, windows, 20, version_2=True, null_score_diff_threshold=0.0)
    assert kept["null_score_diff"] == pytest.approx(-0.5)  # min null 2.5 - best span 3.0
    assert (kept["answer"], kept["abstained"]) == ("Ann", False)
    assert [c["text"] for c in kept["n_best"]] == ["Ann", "", "met"]  # de-duplicated by text, null listed
    strict = answer(context, windows, 20, version_2=True, null_score_diff_threshold=-1.0)
    assert (strict["answer"], strict["start"], strict["abstained"], strict["best_span"]) == ("", None, True, "Ann")
    v1 = answer(context, windows, 20, version_2=False, null_score_diff_threshold=-1.0)
    assert (v1["answer"], v1["abstained"]) == ("Ann", False)
