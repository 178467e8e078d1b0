"""What a wheel of bertkit holds: every package and data file of the source tree. An editable
install reads the tree itself, so a package missing from ``pyproject.toml``'s explicit list is
found only by a user who installs the wheel (``.ci/extras`` does)."""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath

import tomllib

from tests.conftest import ROOT

SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _tree() -> dict[str, PurePosixPath]:
    """Each folder of the installed packages, by its package name."""
    return {name: PurePosixPath(folder) for name, folder in SETUPTOOLS["package-dir"].items()}


def test_every_package_of_the_tree_is_in_the_wheel() -> None:
    found = set()
    for name, folder in _tree().items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            if "__pycache__" not in parts and "fixtures" not in parts:
                found.add(".".join((name, *parts)))
    assert found - set(SETUPTOOLS["packages"]) == set(), "add them to [tool.setuptools] packages"
    assert set(SETUPTOOLS["packages"]) - found == set(), "packages listed that the tree does not hold"


def test_every_data_file_of_the_tree_is_in_the_wheel() -> None:
    data = SETUPTOOLS["package-data"]
    for name, folder in _tree().items():
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(ROOT / folder)
            package = ".".join((name, *relative.parts[:1])) if len(relative.parts) > 1 else name
            inside = PurePosixPath(*relative.parts[1:]) if len(relative.parts) > 1 else relative
            patterns = data.get(package, [])
            assert any(fnmatch.fnmatch(str(inside), p) for p in patterns), f"{path}: not in package-data of {package}"
