"""Question answering training: the head learns to find answers in later windows of long
passages, and the SQuAD v2.0 recipe runs fit -> predict through the CLI (abstentions, tuned
threshold restored from the checkpoint)."""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.question_answering import QuestionAnswering
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertkit import BertDataModule, BertModule
from tests.conftest import ROOT, fit_between_validations, run_bertkit

WORDS = ["apple", "river", "candle", "garden", "window", "silver", "market", "forest", "pencil", "harbor"]
PLACES = ["Paris", "Rome", "Oslo", "Lima", "Cairo", "Delhi"]
FILLER = [
    "Nothing of note happened in the quiet village that year.",
    "The farmers worked the fields from dawn until dusk.",
    "Travellers rarely stopped on the long road to the coast.",
]


def toy_squad(n: int, rng: random.Random, impossible_share: float = 0.0) -> dict:
    """Passages of filler with a sentence that answers "What is the secret word?" late in them
    (beyond the first 64-token window); some questions ask about what no passage says."""
    paragraphs = []
    for i in range(n):
        word, place = rng.choice(WORDS), rng.choice(PLACES)
        before = " ".join(rng.choice(FILLER) for _ in range(rng.randint(4, 6)))
        context = f"{before} The secret word is {word}. It was hidden in {place}. {rng.choice(FILLER)}"
        if rng.random() < impossible_share:
            qas = [{"id": f"q{i}", "question": "What is the secret number?", "answers": [], "is_impossible": True}]
        else:
            start = context.index(f"is {word}") + 3
            qas = [
                {
                    "id": f"q{i}",
                    "question": "What is the secret word?",
                    "answers": [{"text": word, "answer_start": start}],
                }
            ]
        paragraphs.append({"context": context, "qas": qas})
    return {"version": "toy", "data": [{"title": "toy", "paragraphs": paragraphs}]}


@pytest.mark.slow
def test_head_learns_answers_in_later_windows(tmp_path: Path) -> None:
    rng = random.Random(0)
    (tmp_path / "train.json").write_text(json.dumps(toy_squad(48, rng)))
    (tmp_path / "eval.json").write_text(json.dumps(toy_squad(16, rng)))
    pl.seed_everything(0)
    # MiniLM's first two layers: what is tested is reading answers across windows, which they learn as the six do
    model = BertModule(
        QuestionAnswering(doc_stride=24), learning_rate=3e-4, warmup_ratio=0.0, num_layers=2, max_length=64
    )
    data = BertDataModule(data_dir=str(tmp_path), train_file="train.json", validation_file="eval.json", batch_size=8)
    before, after = fit_between_validations(model, data, max_epochs=3)
    features = data.features["validation"]
    windows: dict[int, list[dict]] = {}
    for f in features:
        windows.setdefault(f["example_index"], []).append(f)
    assert all(len(w) > 1 for w in windows.values())  # every passage needs several windows
    later = [next(k for k, f in enumerate(w) if f["start_positions"] > 0) > 0 for w in windows.values()]
    assert sum(later) >= len(later) / 2  # the answer is mostly beyond the first window
    assert after["val/f1"] >= 90.0 and before["val/f1"] < 30.0, (before, after)
    assert after["val/loss"] < 0.2 * before["val/loss"]


@pytest.mark.system
def test_squad_v2_recipe_fits_and_predicts_through_the_cli(tmp_path: Path) -> None:
    rng = random.Random(1)
    (tmp_path / "train.json").write_text(json.dumps(toy_squad(40, rng, impossible_share=0.3)))
    (tmp_path / "dev.json").write_text(json.dumps(toy_squad(12, rng, impossible_share=0.3)))
    questions = [
        {
            "id": "a",
            "question": "What is the secret word?",
            "context": "The secret word is candle. It was hidden in Rome.",
        },
        {"question": "What is the secret number?", "context": "The farmers worked the fields from dawn until dusk."},
    ]
    (tmp_path / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in questions) + "\n")
    settings = [
        "--config", str(ROOT / "recipes" / "squad_v2.yaml"),
        f"--data.data_dir={tmp_path}", "--data.train_file=train.json", "--data.validation_file=dev.json",
        "--model.max_length=64", "--data.batch_size=8", "--model.task.init_args.doc_stride=24",
        "--trainer.enable_progress_bar=false",
    ]  # fmt: skip
    run_bertkit("fit", *settings, "--trainer.max_epochs=1", cwd=tmp_path)
    checkpoint = torch.load(tmp_path / "runs/squad_v2/checkpoints/last.ckpt", weights_only=True)
    tuned = float(checkpoint["state_dict"]["head.tuned_threshold"])
    assert tuned == tuned  # tune_threshold: a threshold was adopted on validation (not NaN)
    run_bertkit("predict", *settings, "--ckpt_path=last", "--data.predict_file=questions.jsonl", cwd=tmp_path)
    records = [json.loads(line) for line in (tmp_path / "runs/squad_v2/predictions.jsonl").read_text().splitlines()]
    assert records[0]["id"] == "a" and records[1]["id"].endswith("questions.jsonl:2")
    for record, question in zip(records, questions, strict=True):
        assert set(record) >= {"answer", "start", "end", "score", "abstained", "null_score_diff", "n_best"}
        assert record["abstained"] == (record["null_score_diff"] > tuned)
        if not record["abstained"]:
            assert question["context"][record["start"] : record["end"]] == record["answer"] != ""
        assert record["n_best"] and abs(sum(c["probability"] for c in record["n_best"]) - 1) < 1e-6


def test_padding_stays_out_of_the_span_softmax_unless_asked(minilm_dir) -> None:
    """By default a window's loss does not depend on how far its batch pads it; with
    ``softmax_over_padding`` (transformers' and Google's loss) padding joins the softmax and the
    same window's loss grows."""
    import torch.nn.functional as F

    from bertkit.data.collate import PAD_VALUES, pad_batch

    losses = {}
    for over_padding in (False, True):
        torch.manual_seed(0)
        head = QuestionAnswering(doc_stride=24, softmax_over_padding=over_padding)
        model = BertModule(head, pretrained=None, preset="tiny", vocab_file=str(minilm_dir / "vocab.txt")).eval()
        feature = {
            "input_ids": model.tokenizer.encode_batch(["Where is it ?"], max_length=16)[0].input_ids,
            "start_positions": 1,
            "end_positions": 2,
        }
        feature["token_type_ids"] = [0] * len(feature["input_ids"])
        for key in head.pad_values:
            feature[key] = [1] * len(feature["input_ids"])
        values = {**PAD_VALUES, "input_ids": model.tokenizer.pad_token_id, "attention_mask": 0, **head.pad_values}
        tight = pad_batch([feature], model.tokenizer.pad_token_id, head.pad_values)
        padded = {k: F.pad(v, (0, 20), value=values[k]) if k in values else v for k, v in tight.items()}
        with torch.no_grad():
            losses[over_padding] = (model(tight)["loss"].item(), model(padded)["loss"].item())
    assert losses[False][0] == pytest.approx(losses[False][1], abs=1e-6)
    assert losses[True][0] == pytest.approx(losses[False][0], abs=1e-6)  # the same on a tight batch
    assert losses[True][1] > losses[True][0] + 1e-3


@functools.cache
def _qa_model(vocab: str) -> BertModule:
    torch.manual_seed(0)
    return BertModule(QuestionAnswering(doc_stride=24), pretrained=None, preset="tiny", vocab_file=vocab).eval()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(labelled=st.lists(st.booleans(), min_size=1, max_size=5))
def test_the_span_loss_is_the_mean_over_labelled_windows_and_zero_without_one(minilm_dir, labelled) -> None:
    """Any mix of windows with an answer and windows labelled -100 (none, some, all): the loss
    is the mean of the labelled windows' start and end cross-entropies, and 0 with a gradient
    when no window has one (computed the same way every time: no branch reads the batch)."""
    import torch.nn.functional as F

    from bertkit.data.collate import pad_batch

    model = _qa_model(str(minilm_dir / "vocab.txt"))
    head = model.task
    model.zero_grad()
    features = []
    for i, has in enumerate(labelled):
        ids = model.tokenizer.encode_batch([f"Where is it {i} ?"], max_length=16)[0].input_ids
        feature = {"input_ids": ids, "token_type_ids": [0] * len(ids), "start_positions": 1 if has else -100}
        feature["end_positions"] = 2 if has else -100
        features.append(feature | {key: [1] * len(ids) for key in head.pad_values})
    batch = pad_batch(features, model.tokenizer.pad_token_id, head.pad_values)
    out = model(batch)
    expected = [
        (
            F.cross_entropy(out["start_logits"][b], torch.tensor(1))
            + F.cross_entropy(out["end_logits"][b], torch.tensor(2))
        )
        / 2
        for b, has in enumerate(labelled)
        if has
    ]
    want = torch.stack(expected).mean() if expected else torch.tensor(0.0)
    assert torch.allclose(out["loss"], want, atol=1e-5)
    out["loss"].backward()
    grad = model.head.qa_outputs.weight.grad
    assert grad is not None and grad.isfinite().all()
