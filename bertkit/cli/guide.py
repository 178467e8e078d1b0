"""What ``bertkit`` checks and says before LightningCLI builds its parser (which takes seconds and
answers mistakes with pages of usage): the command overview of ``bertkit --help``, a missing
recipe, and an unknown class name in the recipe's task with the known ones and the closest match."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from bertkit.plugins import Lazy
from bertkit.utils.io import check_no_nul

LIGHTNING_COMMANDS = {
    "fit": "train a recipe (and validate each epoch)",
    "validate": "score a checkpoint on the validation split",
    "test": "score a checkpoint on the test split",
    "predict": "write predictions of a checkpoint (PredictionWriter)",
}


def _first_line(obj: Any) -> str:
    """The first sentence of a docstring (read from the source for a ``Lazy``), on one line,
    without reST markup."""
    doc = obj.doc() if isinstance(obj, Lazy) else inspect.getdoc(obj)
    paragraph = " ".join((doc or "").split("\n\n", 1)[0].split())
    return paragraph.replace("``", "").split(": ", 1)[0].split(". ", 1)[0].rstrip(".")


def description(obj: Any) -> str:
    """The first paragraph of a docstring, on one line, without reST markup: what ``bertkit
    COMMAND --help`` says before the options (jsonargparse would show its first line only)."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n", 1)[0].split()).replace("``", "")


def overview(commands: dict[str, Any], recipes: Iterable[Path]) -> str:
    """The text of ``bertkit --help``: every command, plugin commands included, and the recipes
    found under ``./recipes``."""
    rows = {**LIGHTNING_COMMANDS, "plugins": "list plugins, their tasks, encoders and commands (--json)"}
    rows |= {name: _first_line(fn) for name, fn in sorted(commands.items())}
    width = max(map(len, rows))
    lines = ["usage: bertkit COMMAND [options]   (bertkit COMMAND --help for a command's options)", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in rows.items()]
    found = sorted(str(p) for p in recipes)
    if found:
        lines += ["", "recipes (bertkit fit --config RECIPE):", *(f"  {r}" for r in found)]
    lines += ["", "example: bertkit fit --config recipes/ner.yaml"]
    return "\n".join(lines)


CKPT_PATH = {
    "fit": "resume: last, or a .ckpt file of this run",
    "validate": "the checkpoint to score: best, last or a .ckpt file",
    "test": "the checkpoint to score: best, last or a .ckpt file",
    "predict": "the checkpoint to predict with: best, last or a .ckpt file",
}


def command_help(command: str, recipes: Iterable[Path]) -> str:
    """The text of ``bertkit fit|validate|test|predict --help``: the options a run is steered
    with, without importing Lightning (``--help-all`` lists every key with its type and docs)."""
    rows = {
        "-c, --config RECIPE": "a recipe (YAML); repeat it to overlay files, later ones win",
        "--KEY VALUE": "any recipe key by its dotted name: --model.learning_rate 3e-5, --data.batch_size 16, "
        "--trainer.max_epochs 1",
        "--ckpt_path PATH": CKPT_PATH[command],
        **({"--overwrite true": "start a new run over an earlier run's checkpoints"} if command == "fit" else {}),
        "--print_config": "print the resolved recipe (every key and value) and exit",
        "--help-all": "every key with its type, default and documentation (imports Lightning: seconds)",
    }
    width = max(map(len, rows))
    lines = [f"usage: bertkit {command} --config RECIPE [--config OVERLAY ...] [--KEY VALUE ...]", ""]
    lines += [LIGHTNING_COMMANDS[command], "", "options:", *(f"  {k:<{width}}  {v}" for k, v in rows.items())]
    found = sorted(str(p) for p in recipes)
    if found:
        lines += ["", "recipes:", *(f"  {r}" for r in found)]
    return "\n".join(lines)


def option_values(args: list[str], *names: str) -> list[str]:
    """The values of every ``NAME VALUE`` or ``NAME=VALUE`` in ``args`` for the given option
    names, in order."""
    values = []
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.partition("=")[0] in names and "=" in arg:
            values.append(arg.partition("=")[2])
    return values


def option_value(args: list[str], option: str) -> str | None:
    """The value of the last ``--option VALUE`` or ``--option=VALUE`` in ``args``."""
    return (option_values(args, option) or [None])[-1]


def config_files(args: list[str]) -> list[str]:
    """The files of every ``--config``/``-c`` in ``args``, in order."""
    return option_values(args, "--config", "-c")


class RecipeLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last
    silently: a second ``trainer:`` block would drop the first) and aliases (``*name``): a few
    lines of nested aliases expand to gigabytes before anything can check them (the "billion
    laughs"), and a recipe has no need of them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"an alias (*{event.anchor}): recipes do not expand aliases; write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)


def _mapping_once(loader: RecipeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in first and key != "<<":
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice (first on line {first[key] + 1})", key_node.start_mark
            )
        first[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep)


RecipeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_once)


def load_yaml(path: Path) -> Any:
    """The YAML value of ``path`` (a recipe or a search space), read by ``RecipeLoader``.

    Raises:
        ValueError: not UTF-8 (a UTF-16 file …), not YAML, a key given twice or an alias (file
            and line).
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        encoding = " (UTF-16: save it as UTF-8)" if path.read_bytes()[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise ValueError(
            f"{path}: not UTF-8 text{encoding} (byte 0x{err.object[err.start]:02x} at {err.start})"
        ) from None
    for number, line in enumerate(text.splitlines(), start=1):
        check_no_nul(line, f"{path}:{number}")
    try:
        return yaml.load(text, Loader=RecipeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise ValueError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', err)})") from None


def read_recipe(name: str) -> dict[str, Any]:
    """A recipe file's top-level mapping.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: as ``load_yaml``, or not a mapping at the top level.
    """
    path = Path(name)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: config file not found")
    config = load_yaml(path) or {}
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a YAML mapping at the top level")
    return config


def require_recipe(command: str, args: list[str]) -> None:
    """A Lightning command needs a recipe (or the task on the command line).

    Raises:
        ValueError: neither ``--config`` nor ``--model.task`` is given; the message lists the
            recipes under ``./recipes``.
    """
    if any(
        a in ("-h", "--help", "--help-all", "-c")
        or a.startswith(("--config", "--model.task", "--model.head", "--print_config"))
        for a in args
    ):
        return
    found = sorted(str(p) for p in Path("recipes").glob("*.yaml"))
    hint = f" (here: {', '.join(found)})" if found else ""
    raise ValueError(f"no recipe given for `bertkit {command}`; pass --config RECIPE, e.g. recipes/ner.yaml{hint}")


TASK_KEYS = ("task", "head")  # model.head: release 0.1's name of model.task


def _class_paths(spec: Any, where: str) -> list[tuple[str, str]]:
    """``(class path, where)`` of a spec and of every spec nested in its ``init_args`` (the named
    tasks of a multi-task task, a masking strategy …)."""
    if isinstance(spec, str):
        return [(spec, where)]
    if not isinstance(spec, dict) or not isinstance(spec.get("class_path"), str):
        return []
    found = [(spec["class_path"], f"{where}.class_path")]
    args = spec.get("init_args")
    for key, value in args.items() if isinstance(args, dict) else []:
        if isinstance(value, dict) and "class_path" in value:
            found += _class_paths(value, f"{where}.init_args.{key}")
        elif isinstance(value, dict):  # named specs (tasks by name)
            found += [p for name, v in value.items() for p in _class_paths(v, f"{where}.init_args.{key}.{name}")]
    return found


def last_task_key(args: list[str]) -> str:
    """``task`` or ``head`` (release 0.1's name of ``model.task``): whichever the recipes and the
    command line give last, as a setting given twice takes its last value."""
    last = "task"
    for i, arg in enumerate(args):
        if arg in ("--config", "-c") and i + 1 < len(args) or arg.startswith("--config="):
            model = read_recipe(arg.partition("=")[2] or args[i + 1]).get("model") or {}
            last = next((key for key in reversed(TASK_KEYS) if model.get(key) is not None), last)
        elif arg.startswith(("--model.task", "--model.head")):
            last = "task" if arg.startswith("--model.task") else "head"
    return last


def check_task_flags(args: list[str]) -> None:
    """Refuse a command-line setting inside ``model.head`` where the recipes name their task
    ``model.task`` (or the reverse): release 0.1's name and the new one are one setting, and
    jsonargparse would otherwise fail with "bertkit.Task is abstract".

    Raises:
        ValueError: names the flag given and the one to pass.
    """
    key = None
    for name in config_files(args):
        model = read_recipe(name).get("model") or {}
        key = next((k for k in reversed(TASK_KEYS) if model.get(k) is not None), key)
    for arg in args:
        flag = arg.partition("=")[0]
        for given in TASK_KEYS:
            if key is not None and given != key and flag.startswith(f"--model.{given}."):
                new = f"--model.{key}.{flag.removeprefix(f'--model.{given}.')}"
                raise ValueError(
                    f"{flag}: the recipe names its task model.{key} (model.head is release 0.1's name of model.task); "
                    f"pass {new}"
                )


def _task_names(args: list[str]) -> list[tuple[str, str]]:
    """``(class name, where it was given)`` of the recipes' and the command line's task and the
    classes nested in it; the last task given wins."""
    given: list[tuple[str, str]] = []
    for name in config_files(args):
        model = read_recipe(name).get("model") or {}
        for key in TASK_KEYS:
            if model.get(key) is not None:
                given = _class_paths(model[key], f"{name}: model.{key}")
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if key in ("--model.task", "--model.task.class_path", "--model.head", "--model.head.class_path"):
            if not eq and i + 1 < len(args):
                value = args[i + 1]
            if value and not value.lstrip().startswith(("{", "class_path")):
                given = [(value, key)]
    return given


def check_task(
    args: list[str], tasks: Iterable[str], others: Iterable[str] = (), former: Iterable[str] = ()
) -> str | None:
    """The task a run names (its ``class_path``) is a registered task (``tasks``: the registered
    names; ``former``: earlier releases' names, accepted but not suggested) or an importable
    ``Task`` subclass, and every class named inside it (the named tasks of a multi-task task, a
    masking strategy) a registered task or one of ``others`` (masking strategies …) or an
    importable class.

    Returns:
        The task's class name as given (None when neither the recipes nor the command line name one).

    Raises:
        ValueError: one is not; the message names where it was given, the closest registered
            name and all registered names.
    """
    tasks, others, former = set(tasks), set(others), set(former)
    given = _task_names(args)
    for depth, (name, where) in enumerate(given):
        known = tasks if depth == 0 else tasks | others
        if name in known or name in former:
            continue
        if "." in name:
            from bertkit.plugins import import_class

            try:
                if depth == 0:
                    from bertkit.tasks.task import Task

                    import_class(name, Task)
                else:
                    import_class(name, object)
                continue
            except ValueError as err:
                reason = str(err)
        else:
            reason = f"unknown {'task' if depth == 0 else 'class'} {name!r}"
        close = difflib.get_close_matches(name.rpartition(".")[2], list(known), n=1)
        suggestion = f" (did you mean {close[0]}?)" if close else ""
        kind = "tasks" if depth == 0 else "tasks and strategies"
        raise ValueError(f"{where}: {reason}{suggestion}; known {kind}: {', '.join(sorted(known))}")
    return given[0][0] if given else None
