"""``bertkit --help``, ``bertkit plugins`` and every command's ``--help`` answer without importing
torch or Lightning (what makes them take seconds); recipe and command-line mistakes are reported
before Lightning is imported. Timings are measured by ``benchmarks/cli_startup.py``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

HEAVY = ("torch", "pytorch_lightning", "lightning_fabric", "transformers")


def imported_after(args: list[str]) -> tuple[int, str, list[str]]:
    """Run ``bertkit.cli.main(args)`` in a fresh interpreter: exit code, stdout, heavy modules imported."""
    code = (
        "import json, sys, contextlib, io\n"
        "from bertkit.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):\n"
        "    try:\n"
        f"        rc = main({args!r})\n"
        "    except SystemExit as stop:\n"
        "        rc = stop.code\n"
        f"print(json.dumps([rc, out.getvalue(), [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rc, out, heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    return rc, out, heavy


@pytest.mark.parametrize(
    "args, says",
    [
        (["--help"], "recipes/ner.yaml"),
        (["plugins"], "TokenClassification"),
        (["plugins", "--json"], '"QuestionAnswering"'),
        (["fit", "--help"], "--help-all"),
        (["predict", "-h"], "the checkpoint to predict with"),
        (["export", "--help"], "Export a bertkit fit checkpoint for inference: a transformers directory"),
        (["embed", "--help"], "--pooling {mean,cls,tokens}"),
        (["prepare", "--help"], "--documents_per_shard"),
        (["vocab", "--help"], "--vocab_size"),
    ],
)
def test_help_and_plugins_import_neither_torch_nor_lightning(args: list[str], says: str) -> None:
    rc, out, heavy = imported_after(args)
    assert rc == 0, out
    assert says in out
    assert heavy == []


@pytest.mark.parametrize(
    "args, says",
    [
        (["fit"], "no recipe given for `bertkit fit`"),
        (["fit", "--config", "recipes/nope.yaml"], "recipes/nope.yaml: config file not found"),
        (
            ["fit", "--config", "recipes/ner.yaml", "--model.task", "TokenClasification"],
            "did you mean TokenClassification?",
        ),
    ],
)
def test_recipe_mistakes_are_reported_before_lightning_is_imported(args: list[str], says: str) -> None:
    rc, out, heavy = imported_after(args)
    assert rc == 2
    assert says in out and out.startswith("bertkit: error:")
    assert "pytorch_lightning" not in heavy


@pytest.mark.slow
@pytest.mark.system  # a new interpreter imports torch and Lightning
def test_help_all_is_lightning_clis_full_help() -> None:
    rc, out, heavy = imported_after(["fit", "--help-all"])
    assert rc == 0
    assert "--trainer.max_epochs" in out and "--model.task" in out and "--data.batch_size" in out
    assert "pytorch_lightning" in heavy


def test_plugin_packages_export_their_classes_on_first_use() -> None:
    from bertkit_plugins import pretraining, token_tagging

    from bertkit.tasks.task import Task

    assert issubclass(token_tagging.TokenClassification, Task)
    assert pretraining.NgramMasking.__module__ == "bertkit_plugins.pretraining.masking"
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        token_tagging.Nope  # noqa: B018
