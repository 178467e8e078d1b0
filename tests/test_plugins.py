"""Plugins: entry-point discovery of a separately installed distribution, listing, narrowing,
broken plugins, misspelled hooks, inline registration, and a recipe naming a third-party head."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import bertkit
import bertkit.api.task
from bertkit.plugins import PluginError, PluginWarning, register_plugin, registered, unregister_plugin
from tests.conftest import FAST, RECIPE, ROOT, TINY, run_bertkit

FIXTURES = ROOT / "tests" / "fixtures"
BUILTIN = {
    "commands",
    "pretrained",
    "token_tagging",
    "sequence_classification",
    "question_answering",
    "pretraining",
    "multitask",
    "electra",
    "roberta",
    "modernbert",
}  # bertkit's own entry points


def pip_install_target(project: Path, target: Path) -> None:
    """Install a fixture distribution into ``target`` (used via PYTHONPATH; the test env stays
    clean), built from a copy: test processes running at once never share a build folder."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = shutil.copytree(project, Path(tmp) / project.name, ignore=shutil.ignore_patterns("build", "*.egg-info"))
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
        ]
        subprocess.run([*cmd, str(copy)], check=True, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    pip_install_target(FIXTURES / "bertkit-demo-head", target)
    pip_install_target(FIXTURES / "bertkit-broken", target)
    return target


def env_with(site: Path, **extra: str) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), **extra}


@pytest.mark.slow
def test_entry_point_plugin_is_found_and_listed(site, tmp_path):
    proc = run_bertkit("plugins", "--json", cwd=tmp_path, env=env_with(site))
    infos = {p["name"]: p for p in json.loads(proc.stdout)}
    demo = infos["demo_head"]
    assert demo["distribution"] == "bertkit-demo-head" and demo["version"] == "0.3.1"
    assert demo["hooks"] == ["register_tasks"] and demo["registered"] == {"tasks": ["MLPTokenClassification"]}
    assert infos["token_tagging"]["registered"] == {
        "tasks": ["SpanClassification", "TokenClassification"],
        "commands": ["augment"],
    }
    assert infos["token_tagging"]["deprecated"] == {"tasks": ["SpanHead", "TokenTaggingHead"]}  # release 0.1's
    assert infos["pretrained"]["registered"] == {"pretrained": ["all-MiniLM-L6-v2"]}
    assert infos["electra"]["registered"] == {"tasks": ["ReplacedTokenDetection"], "encoders": ["electra"]}
    # The broken ones are skipped with a warning that names them; the command still works.
    assert "broken_import" not in infos and "misspelled" not in infos
    assert "bertkit plugin 'broken_import'" in proc.stderr and "needs a package that is not installed" in proc.stderr
    assert "bertkit plugin 'misspelled'" in proc.stderr and "register_head" in proc.stderr


@pytest.mark.slow
def test_load_env_narrows_third_party_plugins(site, tmp_path):
    proc = run_bertkit("plugins", "--json", cwd=tmp_path, env=env_with(site, BERTKIT_LOAD_PLUGINS="demo_head"))
    names = {p["name"] for p in json.loads(proc.stdout)}
    assert names == BUILTIN | {"demo_head"} and "broken_import" not in proc.stderr
    proc = run_bertkit("plugins", "--json", cwd=tmp_path, env=env_with(site, BERTKIT_LOAD_PLUGINS=""))
    assert {p["name"] for p in json.loads(proc.stdout)} == BUILTIN


def test_strict_mode_makes_a_broken_plugin_an_error(site, tmp_path):
    proc = run_bertkit("plugins", cwd=tmp_path, env=env_with(site, BERTKIT_STRICT_PLUGINS="1"), check=False)
    assert proc.returncode != 0 and "PluginError" in proc.stderr and "broken_import" in proc.stderr


@pytest.mark.slow
def test_recipe_uses_third_party_task_by_short_name(site, tmp_path):
    recipe = tmp_path / "mlp.yaml"
    recipe.write_text(
        "model:\n  task:\n    class_path: MLPTokenClassification\n    init_args:\n"
        "      entity_types: [PER, LOC, ORG, MISC]\n      hidden_units: 16\n"
    )
    args = ["fit", "--config", str(RECIPE), "--config", str(recipe), *TINY, *FAST, "--trainer.limit_val_batches=0"]
    run_bertkit(*args, cwd=tmp_path, env=env_with(site, BERTKIT_LOAD_PLUGINS="demo_head"))
    import torch

    ckpt = torch.load(tmp_path / "runs/ner/checkpoints/last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["task"]["class_path"] == "bertkit_demo_head.MLPTokenClassification"
    assert "head.classifier.2.weight" in ckpt["state_dict"]


@pytest.mark.slow
def test_recipe_plugins_list_is_loaded_before_parsing(site, tmp_path):
    recipe = tmp_path / "listed.yaml"
    recipe.write_text(
        "plugins: [bertkit_demo_head]\nmodel:\n  task:\n    class_path: MLPTokenClassification\n    init_args:\n      entity_types: [PER]\n"
    )
    proc = run_bertkit(
        "fit", "--config", str(recipe), "--print_config", cwd=tmp_path, env=env_with(site, BERTKIT_LOAD_PLUGINS="")
    )
    assert "class_path: bertkit_demo_head.MLPTokenClassification" in proc.stdout
    # the checkpoint of a task a listed plugin adds: commands that read it take --plugins
    env = env_with(site, BERTKIT_LOAD_PLUGINS="")
    recipe.write_text(recipe.read_text().replace("[PER]", "[PER, LOC, ORG, MISC]"))
    fit = ["fit", "--config", str(RECIPE), "--config", str(recipe), *TINY, *FAST, "--trainer.limit_val_batches=0"]
    run_bertkit(*fit, cwd=tmp_path, env=env)
    last = str(tmp_path / "runs/ner/checkpoints/last.ckpt")
    # a new process, which has not imported the plugin (this one has, for the fit)
    proc = run_bertkit("export", last, "out", "--onnx", "false", cwd=tmp_path, env=env, check=False, fresh_process=True)
    assert proc.returncode == 2 and "--plugins bertkit_demo_head (any bertkit command)" in proc.stderr
    run_bertkit("export", last, "out", "--onnx", "false", "--plugins", "bertkit_demo_head", cwd=tmp_path, env=env)
    assert (tmp_path / "out/config.json").is_file()
    missing = tmp_path / "missing.yaml"
    missing.write_text("plugins: [no_such_plugin_module]\n")
    proc = run_bertkit("fit", "--config", str(missing), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "'no_such_plugin_module' listed in the recipe or --plugins cannot" in proc.stderr


class InlinePlugin:
    @bertkit.hookimpl
    def register_pretrained(self, register):
        register("tiny-local", lambda: "/nowhere")


class Misspelled:
    @bertkit.hookimpl
    def register_pretrianed(self, register):
        pass


def test_inline_registration_and_check_pending(monkeypatch):
    register_plugin(InlinePlugin(), "inline")
    try:
        assert registered("register_pretrained")["tiny-local"]() == "/nowhere"
    finally:
        unregister_plugin("inline")
    assert "tiny-local" not in registered("register_pretrained")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert register_plugin(Misspelled(), "typo") is False
    assert any(issubclass(w.category, PluginWarning) and "register_pretrianed" in str(w.message) for w in caught)
    monkeypatch.setenv("BERTKIT_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="typo"):
        register_plugin(Misspelled(), "typo")


def test_registry_name_clash_is_an_error():
    class Clash:
        @bertkit.hookimpl
        def register_pretrained(self, register):
            register("all-MiniLM-L6-v2", lambda: "/elsewhere")

    register_plugin(Clash(), "clash")
    try:
        with pytest.raises(PluginError, match="registered by both"):
            registered("register_pretrained")
    finally:
        unregister_plugin("clash")


class ExportAgain:
    @bertkit.hookimpl
    def register_commands(self, register):
        register("export", lambda: None)


class FitAgain:
    @bertkit.hookimpl
    def register_commands(self, register):
        register("fit", lambda: None)


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (ExportAgain, "'export' registered by both 'commands' and 'again'"),
        (FitAgain, "plugin 'again' registers the command 'fit', one of bertkit's own"),
    ],
)
def test_a_command_name_taken_is_an_error_naming_both(plugin, message, capsys):
    """The built-in commands register like a third party's, so a plugin's command of the same name
    is refused, never silently replacing one."""
    from bertkit.cli import main

    register_plugin(plugin(), "again")
    try:
        assert main(["export", "--help"]) == 2
    finally:
        unregister_plugin("again")
    assert message in capsys.readouterr().err


def test_a_family_named_by_registration_is_the_registered_class_alone():
    """``registered_family``: another plugin's family to subclass, by its registered name; the
    core's ``bert``; a name nobody registered, or a registration that is not a family, named."""
    from bertkit_plugins.roberta import RobertaFamily

    from bertkit.api import EncoderFamily, registered_family

    assert registered_family("roberta") is RobertaFamily and registered_family("bert") is EncoderFamily

    class NotAFamily:
        @bertkit.hookimpl
        def register_encoders(self, register):
            register("odd", "collections:OrderedDict")

    with pytest.raises(ValueError, match=r"registered_family\('camembert'\): no such encoder family; registered: "):
        registered_family("camembert")
    register_plugin(NotAFamily(), "odd")
    try:
        with pytest.raises(ValueError, match="registered as 'odd', is not an EncoderFamily subclass"):
            registered_family("odd")
        assert registered_family("roberta") is RobertaFamily  # resolving one never loads the others
    finally:
        unregister_plugin("odd")


def test_plugin_exports_import_on_first_use_and_register_what_they_name():
    """``PluginExports``: names by module (relative to the package, or absolute), imported when
    first read; the hooks it makes register exactly the names given, old names as deprecated."""
    from bertkit.api import PluginExports

    exports = PluginExports("tests", {"collections": ["OrderedDict", "Counter"], ".conftest": ["FAST"]})
    assert exports.names == ["OrderedDict", "Counter", "FAST"]
    assert exports.paths["FAST"] == "tests.conftest:FAST" and exports.getattr("FAST") == FAST
    with pytest.raises(AttributeError, match="module 'tests' has no attribute 'deque'"):
        exports.getattr("deque")
    calls = []
    exports.tasks("OrderedDict", deprecated=("Counter",))(register=lambda *a, **k: calls.append((a, k)))
    exports.encoders(ordered="OrderedDict")(register=lambda *a, **k: calls.append((a, k)))
    exports.masking("Counter")(register=lambda *a, **k: calls.append((a, k)))
    assert calls == [
        (("collections:OrderedDict",), {}),
        (("collections:Counter",), {"deprecated": True}),
        (("ordered", "collections:OrderedDict"), {}),
        (("collections:Counter",), {}),
    ]


class ColourSpecs:
    """Hooks a plugin declares: a registration hook in bertkit's style and a plain one."""

    @bertkit.api.task.hookspec
    def register_colours(register):
        """Register colours: ``register(name, hex_code)``, a function giving the colour's hex code."""

    @bertkit.api.task.hookspec
    def colour_of(word):
        """A word's colour, or None."""


class DeclaresColours:
    @bertkit.hookimpl
    def add_hookspecs(self, register):
        register(ColourSpecs)


class PaintsColours:
    @bertkit.hookimpl
    def register_colours(self, register):
        register("teal", lambda: "#008080")

    @bertkit.hookimpl
    def colour_of(self, word):
        return "red" if word == "rose" else None


class ShadesColours:
    @bertkit.hookimpl
    def colour_of(self, word, shade):
        return shade


DECLARES, PAINTS = DeclaresColours(), PaintsColours()


def test_a_plugin_declares_hooks_that_a_plugin_loaded_before_it_implements(monkeypatch):
    """Entry points load in name order, so the implementer registers before the declarer: both are
    kept, the declared registry reads as bertkit's own, and the plain hook answers; an entry point
    implementing a hook nobody declares is still refused, naming the hook."""
    import bertkit.plugins
    from bertkit.plugins import entry_points

    ours = [
        EntryPoint("a_paints", f"{__name__}:PAINTS", "bertkit"),
        EntryPoint("b_declares", f"{__name__}:DECLARES", "bertkit"),
        EntryPoint("c_typo", f"{__name__}:Misspelled", "bertkit"),
    ]
    monkeypatch.setattr(bertkit.plugins, "entry_points", lambda group: [*entry_points(group=group), *ours])
    monkeypatch.setattr(bertkit.plugins, "_pm", None)
    monkeypatch.setattr(bertkit.plugins, "_sources", {})
    monkeypatch.delenv("BERTKIT_LOAD_PLUGINS", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm = bertkit.plugins.plugin_manager()
    assert pm.has_plugin("a_paints") and pm.has_plugin("b_declares") and not pm.has_plugin("c_typo")
    assert [str(w.message) for w in caught if "c_typo" in str(w.message)] == [
        "bertkit plugin 'c_typo' was not loaded: it implements register_pretrianed, which no hook specification "
        "declares (bertkit's, or a loaded plugin's add_hookspecs): a misspelled hook name?"
    ]
    colours = registered("register_colours")
    assert list(colours) == ["teal"] and colours["teal"]() == "#008080"
    assert bertkit.api.task.plugin_hooks().colour_of(word="rose") == ["red"]
    assert "register_tasks" in dir(bertkit.api.task.plugin_hooks())  # bertkit's own hooks beside them
    with pytest.warns(PluginWarning, match=r"'shades' was not loaded(.|\n)*'shade'"):  # not in the declared hook
        assert register_plugin(ShadesColours(), "shades") is False
    assert not pm.has_plugin("shades")
