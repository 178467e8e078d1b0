"""The declared plugin API: every name ``bertkit.api`` lists resolves, and nothing else does; the
built-in plugins import nothing else of bertkit (``.importlinter`` checks it in CI; here the
source files are read, so that the suite says it too)."""

from __future__ import annotations

import ast
import inspect

import pytest

import bertkit.api
from tests.conftest import ROOT


def test_every_api_name_resolves_and_nothing_else_does() -> None:
    for name in bertkit.api.__all__:
        assert getattr(bertkit.api, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute .BertModule."):
        bertkit.api.BertModule  # noqa: B018 - a user's class, not a plugin's


def test_built_in_plugins_import_only_the_api_of_bertkit() -> None:
    found = {}
    for path in (ROOT / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            modules += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for module in modules:
                if module == "bertkit" or module.startswith("bertkit."):
                    found.setdefault(module, set()).add(path.relative_to(ROOT).as_posix())
    assert set(found) == {"bertkit.api"}, found


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
