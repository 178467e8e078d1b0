"""The documentation site builds in strict mode (a broken link, page or API reference fails),
its Results page is what the result files give, and the README stays short and points into it."""

from __future__ import annotations

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


def test_readme_is_short_and_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 300
    for target in [part.split(")")[0] for part in readme.split("](")[1:]]:
        if not target.startswith("http"):
            assert (ROOT / target.split("#")[0]).exists(), target
