"""The declared plugin API: every name ``bertkit.api`` lists resolves, and nothing else does; the
built-in plugins import nothing else of bertkit (``.importlinter`` checks it in CI; here the
source files are read, so that the suite says it too)."""

from __future__ import annotations

import ast

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
