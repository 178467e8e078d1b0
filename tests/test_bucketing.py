"""Bucketed padding (``data.pad_to_multiple_of``): batches take a few lengths only, the keys a task
declares as running over the tokens (``Task.token_keys``) are padded with ``input_ids``, other
lists as before, and every recipe's scores and predictions are those of unbucketed batches."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import compose
from bertkit.data.collate import pad_batch, padded_length
from tests.conftest import ROOT


@settings(max_examples=200, deadline=None)
@given(longest=st.integers(1, 300), m=st.integers(1, 64), max_length=st.integers(8, 256))
def test_padded_lengths_are_multiples_or_the_maximum(longest, m, max_length):
    T = padded_length(longest, m, max_length)
    assert T >= longest and T - longest < m
    assert T % m == 0 or T == max_length
    if longest <= max_length:
        assert T <= max_length
    assert padded_length(longest, None, max_length) == longest


@st.composite
def features(draw):
    """Features with a token key, a fixed-width list (multi-hot labels) and a per-feature list."""
    width = draw(st.integers(1, 6))
    out = []
    for i, n in enumerate(draw(st.lists(st.integers(1, 20), min_size=1, max_size=6))):
        out.append(
            {
                "input_ids": draw(st.lists(st.integers(1, 99), min_size=n, max_size=n)),
                "token_type_ids": [0] * n,
                "word_index": draw(st.lists(st.integers(-1, 5), min_size=n, max_size=n)),
                "labels": draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=width, max_size=width)),
                "spans": draw(st.lists(st.integers(0, 9), max_size=4)),
                "example_index": i,
            }
        )
    return out


@settings(max_examples=100, deadline=None)
@given(features=features(), m=st.integers(1, 16), max_length=st.integers(20, 40))
def test_token_keys_pad_with_the_tokens_and_other_lists_as_before(features, m, max_length):
    plain = pad_batch(features, 0, {"spans": -1})
    bucketed = pad_batch(features, 0, {"spans": -1}, m, {"word_index"}, max_length)
    longest = plain["input_ids"].shape[1]
    T = padded_length(longest, m, max_length)
    for key, pad in (("input_ids", 0), ("token_type_ids", 0), ("word_index", -1), ("attention_mask", 0)):
        assert bucketed[key].shape == (len(features), T)
        assert torch.equal(bucketed[key][:, :longest], plain[key])
        assert (bucketed[key][:, longest:] == pad).all()
    for key in ("labels", "spans", "example_index"):  # not over the tokens: as without buckets
        assert torch.equal(bucketed[key], plain[key])


def test_a_token_key_of_another_length_is_an_error_naming_it():
    features = [{"input_ids": [1, 2, 3], "word_index": [0, 1], "example_index": 4}]
    with pytest.raises(ValueError, match="example 4: token key 'word_index' has 2 entries for 3 tokens"):
        pad_batch(features, 0, None, 8, {"word_index"})


def test_undeclared_token_keys_are_refused_when_lists_could_be_either():
    """Multi-hot labels as long as the tokens cannot be told from per-token ones."""
    features = [{"input_ids": [1, 2, 3], "labels": [0.0, 1.0, 1.0], "example_index": 0}]
    with pytest.raises(ValueError, match="feature key 'labels' holds lists, and the task does not declare"):
        pad_batch(features, 0, None, 8, None)
    only_tokens = pad_batch([{"input_ids": [1, 2, 3], "example_index": 0}], 0, None, 8, None)
    assert only_tokens["input_ids"].shape == (1, 8)


class Lengths(pl.Callback):
    """The padded lengths of the batches a run evaluates or predicts."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0) -> None:
        self.seen.add(batch["input_ids"].shape[1])

    on_predict_batch_start = on_validation_batch_start


def _run(recipes: tuple[str, ...], tmp_path, extra: dict, m: int | None):
    run = compose(
        *(ROOT / "recipes" / recipe for recipe in recipes),
        overrides={
            "model.pretrained": None, "model.preset": "tiny", "model.vocab_file": "all-MiniLM-L6-v2",
            "model.unpad": False, "data.dataset": None, "data.pad_to_multiple_of": m, "data.eval_batch_size": 5,
            "trainer.default_root_dir": str(tmp_path / str(m)), "trainer.logger": False, **extra,
        },
    )  # fmt: skip
    run.trainer.callbacks.append(lengths := Lengths())
    run.datamodule.setup("fit")  # the training file: the labels a task learns from it
    if run.model.head is None:
        run.model.build_head()
    return run, lengths


RECIPES = {
    "crf": (("ner.yaml",), {}),
    "softmax-tagger": (
        ("ner.yaml",),
        {"model.task.init_args.crf": False, "model.task.init_args.emission_loss_weight": 0},
    ),
    "span": (("ner_nested.yaml",), {}),
    "sentence": (("sst2.yaml",), {}),
    "pair": (("mrpc.yaml",), {}),
    "squad": (("squad.yaml",), {}),
    "multitask": (("multitask.yaml",), {}),
    "mlm-nsp": (("pretrain_bert.yaml",), {}),
    "electra": (("pretrain_bert.yaml", "pretrain_electra.yaml"), {}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_scores_and_predicts_the_same_with_buckets(name, tmp_path, monkeypatch):
    """The padded encoder on batches bucketed to multiples of 7: the same validation loss and
    scores (1e-5) and the same predictions as on batches padded to their longest feature. Each
    task's ``predict`` reads plain Python values alone (``Head.feature_predictions``)."""
    recipes, extra = RECIPES[name]
    plain, plain_lengths = _run(recipes, tmp_path, extra, None)
    bucketed, lengths = _run(recipes, tmp_path, extra, 7)
    bucketed.model.load_state_dict(plain.model.state_dict())
    scores = []
    for run in (plain, bucketed):
        torch.manual_seed(0)  # ELECTRA's generator samples its replacements
        scores.append(run.trainer.validate(run.model, datamodule=run.datamodule, verbose=False)[0])
    assert scores[0].keys() == scores[1].keys() and scores[0]
    for key in scores[0]:
        assert scores[1][key] == pytest.approx(scores[0][key], rel=1e-5, abs=1e-5), key
    max_length = bucketed.datamodule.max_length
    assert all(n % 7 == 0 or n == max_length for n in lengths.seen), lengths.seen
    assert lengths.seen != plain_lengths.seen  # the buckets padded past the longest feature
    if recipes[0].startswith("pretrain"):
        return  # corpus tasks predict per-token rows of the padded batch: compared through their scores
    task_class = type(plain.model.task)
    predict = task_class.predict

    def plain_only(self, predictions):
        assert_plain(predictions, f"{task_class.__name__}.predict's input")
        return predict(self, predictions)

    monkeypatch.setattr(task_class, "predict", plain_only)
    records = [run.trainer.predict(run.model, datamodule=run.datamodule) for run in (plain, bucketed)]
    flat = [[r for part in rs for r in part] for rs in records]
    assert_close(flat[0], flat[1])


def assert_plain(value, where: str) -> None:
    """``value`` is plain Python: dicts, lists and tuples of numbers, strings, booleans and None."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert_plain(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            assert_plain(item, f"{where}[{i}]")
    else:
        assert value is None or type(value) in (bool, int, float, str), f"{where}: {type(value).__name__}"


def assert_close(a, b, where: str = "") -> None:
    """``a == b``, floats within 1e-5 (scores summed over more padded positions round apart)."""
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_close(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-5, abs=1e-5), where
    else:
        assert a == b, where


def test_a_padded_token_budget_counts_the_bucketed_length(tmp_path):
    run, _ = _run(("ner.yaml",), tmp_path, {"data.max_tokens": 200, "data.batch_size": 4, "model.pretrained": None}, 16)
    shapes = [tuple(batch["input_ids"].shape) for batch in run.datamodule.train_dataloader()]
    assert all(b * t <= 200 and t % 16 == 0 for b, t in shapes), shapes
    assert any(b * t > 200 - 16 for b, t in shapes)  # the budget is filled, by padded lengths


def test_reduce_overhead_needs_the_padded_encoder():
    with pytest.raises(ValueError, match="set model.unpad false"):
        compose(ROOT / "recipes" / "ner.yaml", overrides={"model.compile": "reduce-overhead", "model.pretrained": None,
                                                          "model.preset": "tiny", "model.vocab_file": "all-MiniLM-L6-v2"})  # fmt: skip


@pytest.mark.system  # inductor compiles the blocks for each bucket length: a toolchain run
def test_reduce_overhead_blocks_compute_what_eager_ones_do(tmp_path):
    """``model.compile reduce-overhead`` (static shapes; CUDA graphs on a GPU, inductor alone on
    the CPU): on bucketed batches of two lengths, and the first seen again, the logits and loss of
    eager blocks (1e-4), and the state-dict keys unchanged. Gradients are not compared: a
    compiled backward is inductor's own work and costs it tens of seconds on a 2-core CPU."""
    runs = []
    for compiled in (False, "reduce-overhead"):
        run, _ = _run(("ner.yaml",), tmp_path, {"model.compile": compiled}, 8)
        runs.append(run)
    runs[1].model.load_state_dict(runs[0].model.state_dict())
    assert all(block._compiled_call_impl is not None for block in runs[1].model.encoder.blocks)
    assert torch._dynamo.config.recompile_limit >= 64  # every bucket compiles, not only the first 8 shapes
    assert runs[0].model.state_dict().keys() == runs[1].model.state_dict().keys()
    loader = runs[0].datamodule.val_dataloader()
    everything = list(loader)  # longest first
    batches = [everything[0], everything[-1], everything[0]]  # each compiled shape costs seconds of inductor
    assert len({b["input_ids"].shape[1] for b in batches}) > 1  # more than one compiled shape
    models = [run.model.eval() for run in runs]  # dropout off: inductor draws its own random numbers
    for batch in batches:
        with torch.no_grad():
            (logits, loss), (c_logits, c_loss) = ((o["logits"], o["loss"]) for o in (m(batch) for m in models))
        assert torch.allclose(logits, c_logits, atol=1e-4) and torch.allclose(loss, c_loss, atol=1e-5)
