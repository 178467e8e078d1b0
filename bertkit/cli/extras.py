"""Optional extras a run needs, found in its recipes and command line before LightningCLI starts
(which takes seconds, minutes on a loaded machine): a setting whose package is missing is one
error naming the setting, where it was given and the ``pip install`` that adds it."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

from bertkit.cli.guide import config_files, option_value, read_recipe

# What a recipe names -> (modules any one of which serves, the install command).
LOGGERS = {
    "TensorBoardLogger": (("tensorboard", "tensorboardX"), "pip install 'bertkit[track]'"),
    "MLFlowLogger": (("mlflow",), "pip install 'bertkit[track]'"),
    "WandbLogger": (("wandb",), "pip install wandb"),
}
DATASETS = (("datasets",), "pip install 'bertkit[datasets]'")


def _loggers(value: Any) -> list[str]:
    """The class names of a ``trainer.logger`` value (one spec, a list of them, or a bool)."""
    specs = value if isinstance(value, list) else [value]
    paths = [s.get("class_path") if isinstance(s, dict) else s for s in specs]
    return [p.rpartition(".")[2] for p in paths if isinstance(p, str)]


def check_extras(args: list[str]) -> None:
    """Every package the run's ``data.hf_dataset`` and ``trainer.logger`` need is installed (the
    last value given wins, as in the run: a later recipe or the command line may unset one).

    Raises:
        ImportError: one is not; the message names the setting, where it was given and the
            install command.
    """
    hf_dataset, loggers = ("", False), ("", [])  # (where, value) as given last
    for name in config_files(args):
        recipe = read_recipe(name)
        data, trainer = recipe.get("data") or {}, recipe.get("trainer") or {}
        if "hf_dataset" in data:
            hf_dataset = (name, bool(data["hf_dataset"]))
        if "logger" in trainer:
            loggers = (name, _loggers(trainer["logger"]))
    given = option_value(args, "--data.hf_dataset")
    if given is not None:
        hf_dataset = ("the command line", given not in ("", "null", "None"))
    needs = [(hf_dataset[0], "data.hf_dataset", DATASETS)] if hf_dataset[1] else []
    needs += [(loggers[0], f"trainer.logger {n}", LOGGERS[n]) for n in loggers[1] if n in LOGGERS]
    for where, setting, (modules, install) in needs:
        if all(find_spec(m) is None for m in modules):
            raise ImportError(f"{where}: {setting} needs {' or '.join(modules)}, which is not installed: {install}")
