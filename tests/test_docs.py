"""The documentation site builds in strict mode (a broken link, page or API reference fails),
its Results page is what the result files give, and the README stays short and points into it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_site_builds_strictly(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    mkdocs = Path(sys.executable).with_name("mkdocs")
    proc = subprocess.run(
        [str(mkdocs), "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    api = (tmp_path / "site/api/index.html").read_text()
    assert "load_checkpoint" in api and "read_text_lines" in api  # the API page is read from the docstrings
    for name in ("cli.recipe.compose", "cli.recipe.Composed", "training.module.BertModule", "tasks.head.Head"):
        assert f'<h3 id="bertkit.{name}"' in api, name  # each object has its heading (and signature)


def test_results_page_is_generated_from_the_result_files():
    proc = subprocess.run([sys.executable, "docs/gen_results.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_results_check_refuses_a_file_that_does_not_state_its_provenance(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_results", ROOT / "docs" / "gen_results.py")
    gen_results = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_results)
    full = {"command": "python benchmarks/x.py", "commit": "abc1234", "date": "2026-11-26", "machine": {"gpu": None}}
    (tmp_path / "seeds" / "ner").mkdir(parents=True)
    (tmp_path / "complete.json").write_text(json.dumps({**full, "repeats": 1}))
    (tmp_path / "seeds/ner/short.json").write_text(json.dumps({**full, "repeats": 3, "commit": ""}))
    (tmp_path / "bare.json").write_text(json.dumps({"runs": []}))
    monkeypatch.setattr(gen_results, "RESULTS", tmp_path)
    monkeypatch.setattr(gen_results, "ROOT", tmp_path)
    assert gen_results.unstated() == [
        "bare.json: no command, commit, date, machine, repeats",
        "seeds/ner/short.json: no commit",
    ]


def test_readme_is_short_and_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 300
    for target in [part.split(")")[0] for part in readme.split("](")[1:]]:
        if not target.startswith("http"):
            assert (ROOT / target.split("#")[0]).exists(), target
