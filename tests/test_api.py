"""The declared API and its tiers: every name each tier lists resolves, and nothing else does; the
built-in plugins import only their tier of bertkit, the built-in commands only the application
tier (``.importlinter`` checks it in CI; here the source files are read, so that the suite says it
too)."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bertkit.api
from bertkit.api.task import Task
from tests.conftest import ROOT

TIERS = ("bertkit.api", "bertkit.api.task", "bertkit.api.encoder", "bertkit.api.app")


@pytest.mark.parametrize("tier", TIERS)
def test_every_name_of_a_tier_resolves_and_nothing_else_does(tier: str) -> None:
    module = importlib.import_module(tier)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert sorted(dir(module)) == sorted(module.__all__)
    with pytest.raises(AttributeError, match="no attribute .read_state_dict."):
        module.read_state_dict  # noqa: B018 - an internal of bertkit.model.weights


def test_the_plugin_api_is_the_task_and_encoder_tiers_and_the_commands_get_theirs() -> None:
    import bertkit.api.app
    import bertkit.api.encoder
    import bertkit.api.task

    assert set(bertkit.api.__all__) == set(bertkit.api.task.__all__) | set(bertkit.api.encoder.__all__)
    with pytest.raises(AttributeError, match="no attribute .BertModule."):
        bertkit.api.BertModule  # noqa: B018 - a command's class, not a plugin's
    assert bertkit.api.app.BertModule.__name__ == "BertModule" and bertkit.api.app.DEFAULT_ADAPTER == "default"
    shared = set(bertkit.api.task.__all__) & set(bertkit.api.encoder.__all__) & set(bertkit.api.app.__all__)
    assert {"hookimpl", "PluginExports", "read_json", "Schema"} <= shared


def _bertkit_imports(folder: Path) -> dict[str, set[str]]:
    """Each ``bertkit…`` module the Python files under ``folder`` import -> those files."""
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            modules += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for module in modules:
                if module == "bertkit" or module.startswith("bertkit."):
                    found.setdefault(module, set()).add(path.relative_to(ROOT).as_posix())
    return found


@pytest.mark.parametrize(
    ("folder", "tiers"),
    [
        ("token_tagging", {"bertkit.api.task"}),
        ("sequence_classification", {"bertkit.api.task"}),
        ("question_answering", {"bertkit.api.task"}),
        ("multitask", {"bertkit.api.task"}),
        ("pretraining", {"bertkit.api.task"}),
        ("roberta", {"bertkit.api.encoder"}),
        ("modernbert", {"bertkit.api.encoder"}),
        ("electra", {"bertkit.api.task", "bertkit.api.encoder"}),  # a task and the family it trains
    ],
)
def test_built_in_plugins_import_only_their_tier_of_bertkit(folder: str, tiers: set[str]) -> None:
    assert set(_bertkit_imports(ROOT / "plugins" / folder)) <= tiers


def test_built_in_commands_import_only_the_application_tier() -> None:
    found = {m for m in _bertkit_imports(ROOT / "bertkit" / "commands") if not m.startswith("bertkit.commands")}
    assert found == {"bertkit.api.app"}, found


def test_an_encoder_family_must_implement_the_encoder_protocol() -> None:
    from torch import nn

    from bertkit.model.encoder import Encoder
    from bertkit.model.families import encoder_families
    from bertkit.plugins import register_plugin, unregister_plugin

    class HalfEncoder(nn.Module):
        def forward(self, input_ids):
            return input_ids

    class HalfFamily(bertkit.api.EncoderFamily):
        name = "half"
        encoder_class = HalfEncoder

    class Plugin:
        @bertkit.api.hookimpl
        def register_encoders(self, register):
            register(HalfFamily)

    register_plugin(Plugin(), "half")
    try:
        with pytest.raises(ValueError, match="HalfEncoder lacks optional_weights, blocks, set_attention_dropout"):
            encoder_families()
    finally:
        unregister_plugin("half")
    assert all(issubclass(f.encoder_class, nn.Module) for f in encoder_families().values())
    model = encoder_families()["bert"].encoder_class(bertkit.api.BertConfig.preset("tiny", vocab_size=64))
    assert isinstance(model, Encoder)


def test_every_registered_task_records_exactly_its_own_settings() -> None:
    """A task's hyper-parameters (what checkpoints store and rebuild it from) are its own
    ``__init__`` arguments: a subclass never records a parent's setting it does not take, which
    would make a saved task unloadable (``got an unexpected keyword argument``)."""
    from bertkit.plugins import deprecated_names, registered
    from bertkit.tasks.task import Task

    former = deprecated_names("register_tasks")  # release 0.1's names: they convert 0.1's settings
    for name, cls in registered("register_tasks").items():
        if name in former or "tasks" in inspect.signature(cls).parameters:
            continue  # a multi-task task holds other tasks: their settings are theirs
        assert isinstance(cls, type) and issubclass(cls, Task), name
        own = set(inspect.signature(cls.__init__).parameters) - {"self"}
        given = {"entity_types": ["PER"]} if "entity_types" in own else {}
        task = cls(**given)
        assert set(task.hparams) <= own, (name, sorted(set(task.hparams) - own))
        assert type(task)(**dict(task.hparams)).hparams == task.hparams, name  # rebuilt as a checkpoint does


class NoData(Task):
    """A task that reads and builds nothing: for tests of ``Task``'s own members."""

    def read(self, path, labelled=True):
        return []

    def featurize(self, examples, tokenizer, max_length):
        return []

    def build_head(self, config, tokenizer):
        raise NotImplementedError


def test_a_task_records_the_settings_of_the_init_that_calls_save_hyperparameters() -> None:
    import functools
    import pickle
    import subprocess
    import sys

    class Base(NoData):
        def __init__(self, size: int = 2, name: str = "a", **extra) -> None:
            size = size * 10  # the value when it is called is what is recorded
            self.save_hyperparameters()
            self.seen = dict(self.hparams)

    def logged(init):
        @functools.wraps(init)
        def wrapper(self, *args, **kwargs):
            init(self, *args, **kwargs)

        return wrapper

    class Child(Base):
        @logged
        def __init__(self, width: int = 3, helper: object = None) -> None:
            super().__init__(size=1, colour="red")
            self.save_hyperparameters(ignore=["helper"])

    assert Base(colour="blue").hparams == {"size": 20, "name": "a", "colour": "blue"}
    child = Child(width=5, helper=object())
    assert child.seen == {"size": 10, "name": "a", "colour": "red"}  # the base's, recorded first
    assert child.hparams == {"size": 10, "name": "a", "colour": "red", "width": 5}  # the child's added, helper not
    assert child.spec()["init_args"] == {"width": 5}  # what rebuilds a Child
    assert child.hparams.width == 5 and pickle.loads(pickle.dumps(child.hparams)) == child.hparams
    with pytest.raises(AttributeError, match="no setting 'depth'; the task's settings are \\['colour', 'name'"):
        child.hparams.depth  # noqa: B018
    with pytest.raises(RuntimeError, match="call it from the task's __init__"):
        child.save_hyperparameters()
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, bertkit.api.task as t; t.Task; print(sorted({'torch', "
         "'pytorch_lightning'} & set(sys.modules)))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert loaded.strip() == "[]"  # the task contract is plain Python


def test_the_export_is_an_optional_protocol_of_a_head() -> None:
    """A head that exports nothing implements nothing of ``TransformersExport`` and reads as its
    defaults; one with some of its members (a third party's, written before the protocol) keeps
    them; one that declares it is its own export."""
    from bertkit_plugins.token_tagging.head import TokenClassificationHead

    from bertkit.api.app import exported
    from bertkit.api.task import Head, TransformersExport

    assert not {"hf_state_dict", "hf_architecture", "onnx_outputs"} & set(dir(Head))

    class Plain(Head):
        pass

    class Partial(Head):
        hf_architecture = "BertForSequenceClassification"

        def hf_state_dict(self):
            return {"classifier.bias": 1}

    plain, partial = exported(Plain()), exported(Partial())
    assert (plain.hf_state_dict(), plain.hf_architecture, plain.onnx_outputs) == ({}, "BertModel", ())
    assert (partial.hf_state_dict(), partial.hf_architecture, partial.hf_config()) == (
        {"classifier.bias": 1}, "BertForSequenceClassification", {},
    )  # fmt: skip
    assert issubclass(TokenClassificationHead, TransformersExport)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=4),
    pad=st.integers(0, 3),
    classes=st.integers(1, 3),
)
def test_default_feature_predictions_give_each_feature_its_own_tokens_of_declared_outputs(
    lengths, pad, classes
) -> None:
    """A (B, T, C) output named in ``token_outputs`` comes back with each feature's own tokens
    (its attention_mask), padding left out; a (B, C) output whose C equals T, not named, whole;
    losses never. A named output of another shape, or none, is an error naming it."""
    import torch

    from bertkit.api.task import Head

    class Tagger(Head):
        token_outputs = ("logits",)

    longest = max(lengths) + pad
    mask = torch.tensor([[1] * n + [0] * (longest - n) for n in lengths])
    batch = {"attention_mask": mask, "example_index": torch.arange(len(lengths)) + 10}
    logits = torch.randn(len(lengths), longest, classes)
    scores = torch.randn(len(lengths), longest)  # (B, C) with C == T: not per token
    outputs = {"logits": logits, "scores": scores, "loss": torch.tensor(1.0), "crf_loss": torch.tensor(2.0)}
    predicted = Tagger().feature_predictions(outputs, batch)
    assert [p["example_index"] for p in predicted] == [10 + i for i in range(len(lengths))]
    for i, (p, n) in enumerate(zip(predicted, lengths, strict=True)):
        assert p.keys() == {"example_index", "logits", "scores"}
        assert p["logits"] == logits[i, :n].tolist() and len(p["logits"]) == n
        assert p["scores"] == scores[i].tolist()
    for wrong in ({"scores": scores}, {"logits": logits[:, : longest - 1] if longest > 1 else logits[:, :0]}):
        with pytest.raises(ValueError, match=r"Tagger\.token_outputs names 'logits': expected a head output of shape"):
            Tagger().feature_predictions(wrong, batch)


@pytest.mark.parametrize(
    "signature", ["self, outputs, batch", "self", "self, outputs, batch, extra=None", "self, *, predictions"]
)
def test_a_predict_that_does_not_take_the_plain_predictions_is_refused_where_the_class_is_defined(signature):
    """``Task.predict`` takes one argument, the head's plain per-feature predictions: a task
    written for tensors (``predict(outputs, batch)``) is told at its class statement where that
    work goes, not by a TypeError from inside a prediction run."""
    namespace: dict = {}
    exec(f"def predict({signature}):\n    return []", namespace)
    with pytest.raises(
        TypeError, match=r"Tagger\.predict\(.*\): Task\.predict takes one argument.*feature_predictions"
    ):
        type("Tagger", (NoData,), {"predict": namespace["predict"]})


def test_a_predict_of_the_plain_predictions_is_accepted():
    class Tagger(NoData):
        def predict(self, predictions, extra=None):
            return predictions

    assert Tagger().predict([{"example_index": 0}]) == [{"example_index": 0}]
