"""Optional extras a run needs, found in its recipes and command line before LightningCLI starts
(which takes seconds, minutes on a loaded machine): a setting whose package is missing is one
error naming the setting, where it was given and the ``pip install`` that adds it."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import Any

from bertkit.cli.guide import config_files, option_value, read_recipe
from bertkit.data.streaming import INDEX, STREAM_INSTALL, is_remote
from bertkit.utils.runs import earlier_run

# What a recipe names -> (modules any one of which serves, the install command).
LOGGERS = {
    "TensorBoardLogger": (("tensorboard", "tensorboardX"), "pip install 'bertkit[track]'"),
    "MLFlowLogger": (("mlflow",), "pip install 'bertkit[track]'"),
    "WandbLogger": (("wandb",), "pip install wandb"),
}
DATASETS = (("datasets",), "pip install 'bertkit[datasets]'")
STREAM = (("litdata",), STREAM_INSTALL)
LORA = (("peft",), "pip install 'bertkit[lora]'")


def _loggers(value: Any) -> list[str]:
    """The class names of a ``trainer.logger`` value (one spec, a list of them, or a bool)."""
    specs = value if isinstance(value, list) else [value]
    paths = [s.get("class_path") if isinstance(s, dict) else s for s in specs]
    return [p.rpartition(".")[2] for p in paths if isinstance(p, str)]


def _last(args: list[str], section: str | None, key: str) -> tuple[str, Any]:
    """(where, value) of ``section.key`` (``key`` itself for section None: a top-level setting,
    ``overwrite`` …) as given last: in a recipe or on the command line."""
    where, value = "", None
    for name in config_files(args):
        recipe = read_recipe(name)
        recipe = recipe if section is None else recipe.get(section) or {}
        if key in recipe:
            where, value = name, recipe[key]
    given = option_value(args, f"--{key}" if section is None else f"--{section}.{key}")
    if given is not None:
        where, value = "the command line", None if given in ("", "null", "None") else given
    return where, value


def _streamed_files(args: list[str]) -> list[tuple[str, str]]:
    """(where, setting) of each split file that names streamed data (litdata chunks: an object
    store's URL, or a folder with ``index.json``, as given or in ``data.data_dir``)."""
    _, data_dir = _last(args, "data", "data_dir")
    found = []
    for split in ("train", "validation", "test"):
        where, name = _last(args, "data", f"{split}_file")
        if isinstance(name, str) and name:
            folders = [Path(name).expanduser()] + ([Path(str(data_dir)).expanduser() / name] if data_dir else [])
            if is_remote(name) or any((f / INDEX).is_file() for f in folders):
                found.append((where, f"data.{split}_file {name}"))
    return found


def check_extras(args: list[str]) -> None:
    """Every package the run's ``data.hf_dataset``, streamed split files (``data.*_file`` naming
    litdata chunks), ``model.adapter`` and ``trainer.logger`` need is installed (the last value given wins, as in
    the run: a later recipe or the command line may unset one).

    Raises:
        ImportError: one is not; the message names the setting, where it was given and the
            install command.
    """
    hf_where, hf_dataset = _last(args, "data", "hf_dataset")
    loggers = ("", [])
    for name in config_files(args):
        trainer = read_recipe(name).get("trainer") or {}
        if "logger" in trainer:
            loggers = (name, _loggers(trainer["logger"]))
    needs = [(hf_where, "data.hf_dataset", DATASETS)] if hf_dataset else []
    needs += [(where, setting, STREAM) for where, setting in _streamed_files(args)]
    adapter_where, adapter = _last(args, "model", "adapter")
    if any(a.startswith("--model.adapter.") for a in args):
        adapter_where, adapter = "the command line", True
    needs += [(adapter_where, "model.adapter", LORA)] if adapter else []
    needs += [(loggers[0], f"trainer.logger {n}", LOGGERS[n]) for n in loggers[1] if n in LOGGERS]
    for where, setting, (modules, install) in needs:
        if all(find_spec(m) is None for m in modules):
            raise ImportError(f"{where}: {setting} needs {' or '.join(modules)}, which is not installed: {install}")


def check_run_folder(args: list[str]) -> None:
    """``bertkit fit`` starting a new run (no ``--ckpt_path``, no ``--overwrite true``) over the
    checkpoints of an earlier run in ``<default_root_dir>/checkpoints`` (where bertkit puts them
    when no recipe names a ``dirpath``) is refused before torch and Lightning are imported: what
    the run folder's claim refuses when the run starts, seconds sooner.

    Raises:
        ValueError: names the folder, its checkpoints and the ways on.
    """
    if args[:1] != ["fit"] or _last(args, None, "ckpt_path")[1] is not None:
        return
    if str(_last(args, None, "overwrite")[1]).lower() in ("true", "1", "yes"):
        return
    _, root = _last(args, "trainer", "default_root_dir")
    named = any("dirpath" in a for a in args) or any(
        "dirpath" in str(read_recipe(name).get("trainer") or {}) for name in config_files(args)
    )
    if root is None or named:
        return
    taken = earlier_run(Path(str(root)) / "checkpoints")
    if taken:
        raise ValueError(taken)
