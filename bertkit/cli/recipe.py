"""Build a recipe from Python, without argv: the notebook entry point."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from bertkit.cli import recipe_plugins
from bertkit.cli.console import quiet
from bertkit.cli.lightning import BertkitCLI, cli_kwargs
from bertkit.data.datamodule import BertDataModule
from bertkit.plugins import import_classes, load_modules, plugin_manager
from bertkit.training.callbacks import prediction_records
from bertkit.training.module import BertModule


@dataclass
class Composed:
    """What ``compose`` returns: call ``trainer.fit(model, datamodule)`` and friends on it."""

    model: BertModule
    datamodule: BertDataModule
    trainer: pl.Trainer
    config: dict[str, Any] = field(default_factory=dict)
    """The parsed recipe, every setting by its dotted name's parts (``config["model"]["learning_rate"]``)."""

    def predict(self, path: str | Path, task: str | None = None) -> list[dict[str, Any]]:
        """Predict on a file (a ``.txt`` file: one example per line) and return the records.

        Args:
            path: the file.
            task: with ``data.tasks``, the named task that reads and predicts the file (the
                other tasks' ``predict_file`` settings are cleared).

        Raises:
            FileNotFoundError: no such file.
            ValueError: ``task`` is not one of ``data.tasks`` (or given without tasks).
        """
        hp, file = self.datamodule.hparams, str(Path(path).resolve())
        if (task is None) != (not hp.tasks) or (task is not None and task not in hp.tasks):
            raise ValueError(
                f"predict: task={task!r}; expected one of {sorted(hp.tasks)}"
                if hp.tasks
                else f"predict: task={task!r} given, but the recipe has no data.tasks"
            )
        for name, files in hp.tasks.items():
            files["predict_file"] = file if name == task else None
        if task is None:
            hp.predict_file = file
        self.datamodule.forget("predict")
        batches = self.trainer.predict(self.model, datamodule=self.datamodule)
        return prediction_records(self.model, self.datamodule, batches)


def _override(key: str, value: Any) -> str:
    if isinstance(value, float) and math.isinf(value):  # JSON has no infinity; YAML's is .inf
        text = ".inf" if value > 0 else "-.inf"
    else:
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
    import_classes()
    quiet()
    cli = BertkitCLI(args=args, run=False, **cli_kwargs())  # the data module has the model's task and tokenizer
    return Composed(cli.model, cli.datamodule, cli.trainer, cli.config.as_dict())
