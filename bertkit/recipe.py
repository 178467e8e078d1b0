"""Build a recipe from Python, without argv: the notebook entry point."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from bertkit.callbacks import prediction_records
from bertkit.cli import BertkitCLI, cli_kwargs, recipe_plugins
from bertkit.data import BertDataModule
from bertkit.module import BertModule
from bertkit.plugins import load_modules, plugin_manager


@dataclass
class Composed:
    """What ``compose`` returns: call ``trainer.fit(model, datamodule)`` and friends on it."""

    model: BertModule
    datamodule: BertDataModule
    trainer: pl.Trainer

    def predict(self, path: str | Path) -> list[dict[str, Any]]:
        """Predict on a file (a ``.txt`` file: one example per line) and return the records.

        Raises:
            FileNotFoundError: no such file.
        """
        self.datamodule.hparams.predict_file = str(Path(path).resolve())
        self.datamodule.forget("predict")
        batches = self.trainer.predict(self.model, datamodule=self.datamodule)
        return prediction_records(self.model, self.datamodule, batches)


def _override(key: str, value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return f"--{key}={text}"


def compose(*configs: str | Path, overrides: dict[str, Any] | None = None) -> Composed:
    """Instantiate model, data and trainer from recipe files, exactly as ``bertkit fit`` would.

    Args:
        configs: recipe files, later ones overriding earlier ones (like repeated ``--config``).
        overrides: dotted keys to values, e.g. ``{"trainer.max_epochs": 1, "data.batch_size": 16}``.

    Raises:
        FileNotFoundError: a recipe file is missing.
        jsonargparse.ArgumentError: a key or value the recipe schema rejects (the message names it).
    """
    args: list[str] = []
    for config in configs:
        args += ["--config", str(config)]
    args += [_override(k, v) for k, v in (overrides or {}).items()]
    plugin_manager()  # entry points first: short class_path names must resolve
    load_modules(recipe_plugins(args))
    cli = BertkitCLI(args=args, run=False, **cli_kwargs())
    cli.datamodule.attach(cli.model)  # datamodule.setup() works before any trainer call
    return Composed(cli.model, cli.datamodule, cli.trainer)
