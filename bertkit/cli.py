"""The ``bertkit`` command: LightningCLI subcommands (fit, validate, test, predict), ``plugins``,
and commands plugins register (``bertkit prepare``, ``bertkit vocab``).

Plugins (entry points and a recipe's ``plugins:`` list) are loaded *before* the parser is built,
so short ``class_path`` names of plugin heads resolve.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import CLI
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.cli import LightningCLI

from bertkit.data import BertDataModule
from bertkit.module import BertModule
from bertkit.plugins import PluginError, describe, load_modules, plugin_manager, registered

DEBUG_ENV = "BERTKIT_DEBUG"


def recipe_plugins(args: list[str]) -> list[str]:
    """The ``plugins:`` lists of every ``--config`` file named in ``args``.

    Raises:
        FileNotFoundError: a named config file does not exist.
        ValueError: a config file is not a YAML mapping, or ``plugins`` is not a list.
    """
    files = []
    for i, arg in enumerate(args):
        if arg in ("--config", "-c") and i + 1 < len(args):
            files.append(args[i + 1])
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
    names: list[str] = []
    for name in files:
        path = Path(name)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: config file not found")
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(config, dict):
            raise ValueError(f"{path}: expected a YAML mapping at the top level")
        listed = config.get("plugins") or []
        if not isinstance(listed, list):
            raise ValueError(f"{path}: 'plugins' must be a list of module names, got {listed!r}")
        names += [n for n in listed if n not in names]
    return names


def newest_last(checkpoint: ModelCheckpoint) -> Path | None:
    """The newest ``last*.ckpt`` (``last.ckpt``, ``last-v1.ckpt`` …) in a checkpoint directory."""
    found = sorted(Path(checkpoint.dirpath or ".").glob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _best_from_last(checkpoint: ModelCheckpoint) -> str | None:
    """``best_model_path`` recorded in the newest last checkpoint of an earlier run."""
    last = newest_last(checkpoint)
    if last is None:
        return None
    state = torch.load(last, map_location="cpu", weights_only=True).get("callbacks", {})
    for key, value in state.items():
        if key.startswith("ModelCheckpoint") and value.get("best_model_path"):
            return value["best_model_path"]
    return None


class BertkitCLI(LightningCLI):
    """LightningCLI with a ``plugins`` key and ``--ckpt_path best|last`` across processes."""

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.add_argument(
            "--plugins", type=list[str], default=[], help="Plugin modules to import before parsing (by dotted name)."
        )

    def _resolve_ckpt_path(self) -> None:
        config = self.config_init[self.subcommand]
        wanted = config.get("ckpt_path")
        checkpoint = self.trainer.checkpoint_callback
        if wanted not in ("best", "last") or checkpoint is None or checkpoint.best_model_path:
            return
        path = _best_from_last(checkpoint) if wanted == "best" else newest_last(checkpoint)
        if path is None or not Path(path).is_file():
            raise FileNotFoundError(
                f"--ckpt_path {wanted}: no checkpoint found in {checkpoint.dirpath} (run `bertkit fit` with this recipe first)"
            )
        config["ckpt_path"] = str(path)

    def before_validate(self) -> None:
        self._resolve_ckpt_path()

    def before_test(self) -> None:
        self._resolve_ckpt_path()

    def before_predict(self) -> None:
        self._resolve_ckpt_path()


def cli_kwargs() -> dict[str, Any]:
    return dict(
        model_class=BertModule,
        datamodule_class=BertDataModule,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
    )


def print_plugins(args: list[str]) -> int:
    """``bertkit plugins [--json]``: name, version, hooks and registered names of every plugin."""
    infos = describe()
    if "--json" in args:
        print(json.dumps([info.__dict__ for info in infos], indent=2))
        return 0
    for info in infos:
        origin = f"{info.distribution} {info.version}" if info.distribution else "registered at run time"
        print(f"{info.name}  ({info.module}; {origin})")
        print(f"  hooks: {', '.join(info.hooks) or '-'}")
        for kind, names in info.registered.items():
            print(f"  {kind}: {', '.join(names)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bertkit`` console script."""
    args = sys.argv[1:] if argv is None else list(argv)
    plugin_manager()
    if args[:1] == ["plugins"]:
        return print_plugins(args[1:])
    commands = registered("register_commands")
    try:
        if args and args[0] in commands:
            CLI(commands[args[0]], args=args[1:], prog=f"bertkit {args[0]}")
            return 0
        load_modules(recipe_plugins(args))
        BertkitCLI(args=argv, **cli_kwargs())
    except (FileNotFoundError, ValueError, PluginError) as err:
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        print(f"bertkit: error: {err}\n(set {DEBUG_ENV}=1 for the traceback)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
