"""Numbers checked in the precision they are used in, and sizes against their bounds, before
anything is built: each setting's bad values are generated (hypothesis), none trains a model.

A float64 setting passes a plain Python check where float32, in which bertkit computes, sees 0
(``1e-320``) or infinity (``1e308``); a size of 0 divides by zero in a sampler; a config's
``pad_token_id`` past the vocabulary fails an assert deep inside; a config's layer count can
ask for more memory than the machine has. Every member must be one ``ValueError`` naming the
setting (and the file, for a ``config.json``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from bertkit_plugins.electra import ReplacedTokenDetection
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import TokenClassification
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from bertkit import BertDataModule, BertModule
from bertkit.model.adapters import Adapter
from bertkit.model.bert import BertModel
from bertkit.model.config import BertConfig
from bertkit.model.weights import pretrained_encoder
from bertkit.training.distillation import Teacher
from bertkit.utils.precision import check_float32

NOT_FLOAT32 = st.one_of(
    st.floats(min_value=3.5e38, max_value=1.7e308),  # finite in float64, infinite in float32
    st.floats(min_value=5e-324, max_value=7e-46),  # not 0 in float64, 0 in float32
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
)
"""Numbers a float64 check accepts and float32 arithmetic does not (or no check should)."""


def _module(**kw: Any) -> Any:
    return BertModule(TokenClassification(["PER"]), pretrained=None, preset="tiny", **kw)


FLOAT_SETTINGS: dict[str, Callable[[float], Any]] = {
    "model.learning_rate": lambda v: _module(learning_rate=v),
    "model.weight_decay": lambda v: _module(weight_decay=v),
    "model.adam_epsilon": lambda v: _module(adam_epsilon=v),
    "model.warmup_ratio": lambda v: _module(warmup_ratio=v),
    "model.attention_dropout": lambda v: _module(attention_dropout=v),
    "model.teacher.temperature": lambda v: Teacher(path="teacher.ckpt", temperature=v),
    "model.teacher.alpha": lambda v: Teacher(path="teacher.ckpt", alpha=v),
    "model.teacher.hidden_weight": lambda v: Teacher(path="teacher.ckpt", hidden_weight=v),
    "model.adapter.alpha": lambda v: Adapter(alpha=v),
    "model.adapter.dropout": lambda v: Adapter(dropout=v),
    "model.task.class_weights[0]": lambda v: SequenceClassification(labels=["a", "b"], class_weights=[v, 1.0]),
    "model.task.threshold": lambda v: SequenceClassification(threshold=v, problem_type="multi_label"),
    "model.task.emission_loss_weight": lambda v: TokenClassification(["PER"], crf=True, emission_loss_weight=v),
    "model.task.crf_learning_rate": lambda v: TokenClassification(["PER"], crf=True, crf_learning_rate=v),
    "model.task.classifier_dropout": lambda v: TokenClassification(["PER"], classifier_dropout=v),
    "model.task.discriminator_weight": lambda v: ReplacedTokenDetection(discriminator_weight=v),
    "model.task.temperature": lambda v: ReplacedTokenDetection(temperature=v),
    "model.task.generator_size": lambda v: ReplacedTokenDetection(generator_size=v),
    "data.validation_split": lambda v: BertDataModule(validation_split=v),
    "hidden_dropout_prob": lambda v: BertConfig(hidden_dropout_prob=v),
    "layer_norm_eps": lambda v: BertConfig(layer_norm_eps=v),
    "initializer_range": lambda v: BertConfig(initializer_range=v),
}


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(sorted(FLOAT_SETTINGS)), value=NOT_FLOAT32, sign=st.sampled_from([1.0, -1.0]))
def test_a_number_float32_cannot_hold_is_refused_naming_its_setting(field, value, sign):
    with pytest.raises(ValueError, match=re.escape(field) + "[=:]"):
        FLOAT_SETTINGS[field](sign * value)


@settings(max_examples=40, deadline=None)
@given(weights=st.lists(st.floats(min_value=5e-324, max_value=7e-46) | st.just(0.0), min_size=2, max_size=2))
def test_class_weights_that_are_all_zero_in_float32_are_refused(weights):
    with pytest.raises(ValueError, match="class_weights"):
        SequenceClassification(labels=["a", "b"], class_weights=weights)


@settings(max_examples=60, deadline=None)
@given(value=st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_every_float32_number_in_range_passes_unchanged(value):
    assert check_float32(value, "x") == value
    assert check_float32(abs(value), "x", low=0.0) == abs(value)


SIZES: dict[str, tuple[Callable[[int], Any], int, int | None]] = {
    "data.batch_size": (lambda v: BertDataModule(batch_size=v), 1, None),
    "data.eval_batch_size": (lambda v: BertDataModule(eval_batch_size=v), 1, None),
    "data.num_workers": (lambda v: BertDataModule(num_workers=v), 0, None),
    "data.max_length": (lambda v: BertDataModule(max_length=v), 8, 1 << 20),
    "data.pad_to_multiple_of": (lambda v: BertDataModule(pad_to_multiple_of=v), 1, 1 << 20),
    "data.max_tokens": (lambda v: BertDataModule(max_tokens=v), 1, None),
    "data.predict_chunk_size": (lambda v: BertDataModule(predict_chunk_size=v), 0, None),
    "model.adapter.r": (lambda v: Adapter(r=v), 1, None),
    "vocab_size": (lambda v: BertConfig(vocab_size=v), 1, None),
    "hidden_size": (lambda v: BertConfig(hidden_size=v), 1, None),
    "num_hidden_layers": (lambda v: BertConfig(num_hidden_layers=v), 1, None),
    "num_attention_heads": (lambda v: BertConfig(num_attention_heads=v), 1, None),
    "intermediate_size": (lambda v: BertConfig(intermediate_size=v), 1, None),
    "max_position_embeddings": (lambda v: BertConfig(max_position_embeddings=v), 1, None),
    "type_vocab_size": (lambda v: BertConfig(type_vocab_size=v), 1, None),
    "pad_token_id": (lambda v: BertConfig(vocab_size=100, pad_token_id=v), 0, 99),
}


@st.composite
def outside(draw: Any) -> tuple[str, int]:
    field = draw(st.sampled_from(sorted(SIZES)))
    _, low, high = SIZES[field]
    below = st.integers(max_value=low - 1, min_value=low - 10**6)
    return field, draw(below if high is None else below | st.integers(min_value=high + 1, max_value=high + 10**6))


@settings(max_examples=80, deadline=None)
@given(case=outside())
def test_a_size_outside_its_bounds_is_refused_naming_it(case):
    field, value = case
    with pytest.raises(ValueError, match=rf"{field}[= ]"):
        SIZES[field][0](value)


@settings(max_examples=20, deadline=None)
@given(field=st.sampled_from(["num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size"]))
def test_a_config_json_too_large_for_memory_is_refused_before_allocating(tmp_path_factory, field):
    folder = tmp_path_factory.mktemp("big")
    sizes = {"hidden_size": 64, "num_attention_heads": 1, "intermediate_size": 64, "vocab_size": 100}
    sizes[field] = 10**6 if field == "num_hidden_layers" else 10**12 // 64  # terabytes of weights
    (folder / "config.json").write_text(json.dumps(sizes), encoding="utf-8")
    with pytest.raises(ValueError, match=r"config.json: .*the weights alone take .* GB in float32, more than"):
        BertConfig.from_pretrained(folder)


def test_a_config_json_pad_token_past_the_vocabulary_names_file_and_field(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 100, "pad_token_id": 100}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"config.json: pad_token_id=100: expected an integer in \[0, 99\]"):
        BertConfig.from_pretrained(tmp_path)


@settings(max_examples=15, deadline=None)
@given(value=st.floats(min_value=3.5e38, max_value=1.7e308) | st.just(float("nan")), at=st.integers(0, 15))
def test_weights_not_finite_in_the_models_precision_are_refused_naming_the_tensor(tmp_path_factory, value, at):
    folder = tmp_path_factory.mktemp("weights")
    encoder = BertModel(BertConfig.preset("tiny", vocab_size=50), add_pooling_layer=False)
    state = {f"bert.{k}": v.double() for k, v in encoder.state_dict().items()}
    name = sorted(state)[at]
    state[name].view(-1)[0] = value
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=rf"model.safetensors: tensors that are not finite in float32.*{name[5:]}"):
        pretrained_encoder(lambda: encoder, folder)
    assert torch.isfinite(encoder.embeddings.word_embeddings.weight).all()
