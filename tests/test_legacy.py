"""Checkpoints and export folders written by release 0.1 (``tests/fixtures/legacy``, one per
built-in head, made by its ``make.py``) load in this release and compute what they computed
then: the module's outputs on the recorded batch, and ``Predictor`` records from the checkpoint
and from the export folder."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from bertkit.utils.deprecation import BertkitRemovedIn03Warning
from tests.conftest import ROOT

LEGACY = ROOT / "tests" / "fixtures" / "legacy"
NAMES = ["token", "token_crf", "span", "sequence", "qa", "mlm", "pretraining", "electra", "multitask"]


@pytest.fixture(autouse=True)
def _from_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoints name their pretrained encoder by a path relative to the repository root."""
    monkeypatch.chdir(ROOT)


def same(got: Any, want: Any, where: str = "") -> None:
    """``got`` equals ``want`` (JSON values), floats to 1e-5 relative (1e-6 absolute)."""
    if isinstance(want, float) and isinstance(got, (int, float)):
        assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6), f"{where}: {got} != {want}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            same(a, b, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("name", NAMES)
def test_a_release_0_1_checkpoint_computes_what_it_computed(name: str) -> None:
    from bertkit.training.module import BertModule

    model = BertModule.load_from_checkpoint(LEGACY / f"{name}.ckpt", map_location="cpu").eval()
    batch = json.loads((LEGACY / f"{name}.batch.json").read_text(encoding="utf-8"))
    batch = {k: torch.tensor(v) for k, v in batch.items()}
    if name == "multitask":
        batch["task"] = ["ner"] * len(batch["input_ids"])
    batch["example_index"] = torch.arange(len(batch["input_ids"]))
    with torch.inference_mode():
        outputs = model(batch)
    want = load_file(str(LEGACY / f"{name}.outputs.safetensors"))
    assert set(want) <= set(outputs), f"{name}: outputs {sorted(outputs)} lack {sorted(set(want) - set(outputs))}"
    for key, tensor in want.items():
        torch.testing.assert_close(outputs[key], tensor, rtol=1e-5, atol=1e-6, msg=f"{name}: {key}")


@pytest.mark.parametrize("name", [n for n in NAMES if n != "multitask"])
def test_a_release_0_1_checkpoint_and_export_predict_the_recorded_records(name: str) -> None:
    from bertkit.inference.predictor import Predictor

    recorded = json.loads((LEGACY / f"{name}.records.json").read_text(encoding="utf-8"))
    same(Predictor.from_checkpoint(LEGACY / f"{name}.ckpt").predict(recorded["inputs"]), recorded["checkpoint"], name)
    if "export" in recorded:
        same(Predictor.from_export(LEGACY / name).predict(recorded["inputs"]), recorded["export"], f"{name} export")


def test_every_head_has_a_fixture() -> None:
    written = json.loads((LEGACY / "written.json").read_text(encoding="utf-8"))
    assert len(written["commit"]) == 40
    for name in NAMES:
        assert (LEGACY / f"{name}.ckpt").is_file() and (LEGACY / name / "config.json").is_file()
    assert {Path(p).stem for p in LEGACY.glob("*.ckpt")} == set(NAMES)


@pytest.mark.parametrize(
    ("old", "name"),
    [("bertkit.heads", "Head"), ("bertkit.encoders", "EncoderFamily"), ("bertkit.io", "text_lines"),
     ("bertkit.model", "BertEncoder"), ("bertkit.data", "pad_batch"), ("bertkit.inference", "Predictor")],
)  # fmt: skip
def test_release_0_1_module_paths_import_with_a_warning_naming_the_new_one(old: str, name: str) -> None:
    import importlib
    import sys

    from bertkit.utils.moved import MOVED

    if old in MOVED:  # a stand-in for a moved module warns when it is imported
        sys.modules.pop(old, None)
    with pytest.warns(
        BertkitRemovedIn03Warning, match=r"(moved to|it is) bertkit\.\w+\.\w+.*release 0\.1.s name.*removed in 0\.3"
    ):
        value = getattr(importlib.import_module(old), name)
    assert callable(value)


MOVED_PATHS = sorted(__import__("bertkit.utils.moved", fromlist=["MOVED"]).MOVED)


def _deprecated_uses() -> list[tuple[str, Any]]:
    """Every kind of release-0.1 use (a callable that makes one), by name."""
    import bertkit
    from bertkit.plugins import deprecated_names

    def subclass_head() -> None:
        from bertkit.tasks.legacy import Head

        type("Old", (Head,), {})

    def model_head() -> None:
        from bertkit_plugins.token_tagging import TokenClassification

        from bertkit.training.module import BertModule

        BertModule(
            head=TokenClassification(entity_types=["PER"]),
            pretrained=None,
            preset="tiny",
            vocab_file="all-MiniLM-L6-v2",
        )

    def packed() -> None:
        from bertkit.model.bert import EncoderOutput

        EncoderOutput(last_hidden_state=torch.zeros(1, 1, 2)).packed  # noqa: B018

    def init_weights() -> None:
        from bertkit.model.bert import BertModel
        from bertkit.model.config import BertConfig

        model = BertModel(BertConfig(vocab_size=8, hidden_size=4, num_hidden_layers=1, num_attention_heads=1,
                                     intermediate_size=4))  # fmt: skip
        model._init_weights(model.pooler.dense)

    def old_class() -> None:
        from bertkit_plugins.token_tagging.task import TokenTaggingHead

        TokenTaggingHead(entity_types=["PER"])

    def register_heads() -> None:
        from bertkit import hookimpl
        from bertkit.plugins import plugin_manager

        class Old:
            @hookimpl
            def register_heads(self, register: Any) -> None:
                pass

        manager = plugin_manager()
        manager.register(Old(), name="old-heads")
        manager.unregister(name="old-heads")

    uses = [("bertkit.Head subclass", subclass_head), ("model.head", model_head), ("EncoderOutput.packed", packed),
            ("BertModel._init_weights", init_weights), ("TokenTaggingHead(…)", old_class), ("register_heads hook", register_heads),
            ("bertkit.BertEncoder", lambda: bertkit.BertEncoder)]  # fmt: skip
    uses += [(f"bertkit.{n}", lambda n=n: getattr(bertkit, n)) for n in sorted(deprecated_names("register_tasks"))]
    return uses


@pytest.mark.parametrize("name", [*MOVED_PATHS, "uses"])
def test_every_release_0_1_name_warns_a_future_warning_with_its_removal_release(name: str) -> None:
    """Each member of the class (every moved module path; every kind of old name, class, setting
    and hook): one ``BertkitRemovedIn03Warning``, a ``FutureWarning`` (shown by default, unlike a
    ``DeprecationWarning``), saying the release that removes it."""
    import importlib
    import sys
    import warnings

    uses = _deprecated_uses() if name == "uses" else [(name, lambda: importlib.import_module(name))]
    assert name != "uses" or len(uses) > 8  # the registered old task names are among them
    for label, use in uses:
        sys.modules.pop(label, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            use()
        ours = [w for w in caught if issubclass(w.category, BertkitRemovedIn03Warning)]
        assert len(ours) == 1 and issubclass(ours[0].category, FutureWarning), (label, [str(w.message) for w in caught])
        assert "removed in 0.3" in str(ours[0].message), label
        assert not [w for w in caught if w.category is DeprecationWarning and "bertkit" in str(w.message)], label


def test_bertkit_warns_deprecations_only_through_the_policy() -> None:
    """No ``warnings.warn(…, DeprecationWarning)`` in bertkit or its plugins: every deprecation goes
    through ``bertkit.utils.deprecation`` (its class and removal release)."""
    import ast

    found = []
    for path in [*(ROOT / "bertkit").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and node.id in ("DeprecationWarning", "PendingDeprecationWarning"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found
