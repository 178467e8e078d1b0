"""The ``bertkit`` command: LightningCLI subcommands (fit, validate, test, predict), ``plugins``,
and commands plugins register (``bertkit prepare``, ``bertkit vocab``). Errors a user can fix
(bad files, settings, Lightning's misconfiguration) end as one ``bertkit: error:`` line, exit 2.

Plugins (entry points and a recipe's ``plugins:`` list) are loaded *before* the parser is built,
so short ``class_path`` names of plugin heads resolve.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from bertkit.cli.extras import check_extras, check_run_folder
from bertkit.cli.guide import (
    LIGHTNING_COMMANDS,
    check_task,
    check_task_flags,
    command_help,
    config_files,
    description,
    overview,
    read_recipe,
    require_recipe,
)
from bertkit.plugins import (
    PluginError,
    deprecated_names,
    describe,
    entries,
    import_classes,
    load_modules,
    loaded,
    owners,
    plugin_manager,
)
from bertkit.utils.optional import broken_torchvision_hint

DEBUG_ENV = "BERTKIT_DEBUG"


def recipe_plugins(args: list[str]) -> list[str]:
    """The ``plugins:`` lists of every ``--config`` file named in ``args``.

    Raises:
        FileNotFoundError: a named config file does not exist.
        ValueError: a config file is not a YAML mapping, or ``plugins`` is not a list.
    """
    names: list[str] = []
    for name in config_files(args):
        listed = read_recipe(name).get("plugins") or []
        if not isinstance(listed, list):
            raise ValueError(f"{name}: 'plugins' must be a list of module names, got {listed!r}")
        names += [n for n in listed if n not in names]
    return names


def take_plugins(args: list[str]) -> tuple[list[str], list[str]]:
    """``args`` without their ``--plugins MODULE[,MODULE]`` options (repeatable, ``=`` or a space),
    and the modules named: what a registered command (``export``, ``serve``, ``embed``, ``tune``)
    imports before it reads a checkpoint whose task a plugin module adds.

    Raises:
        ValueError: ``--plugins`` with no module after it.
    """
    kept, modules = [], []
    rest = iter(args)
    for arg in rest:
        flag, eq, value = arg.partition("=")
        if flag != "--plugins":
            kept.append(arg)
            continue
        value = value if eq else next(rest, "")
        if not value or value.startswith("-"):
            raise ValueError("--plugins: expected a module name (or several, comma-separated), e.g. --plugins my_head")
        modules += [m.strip() for m in value.split(",") if m.strip()]
    return kept, modules


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
        for kind, names in info.deprecated.items():
            print(f"  {kind}, release 0.1 names (deprecated): {', '.join(names)}")
    return 0


# jsonargparse's message for a value outside a Literal (also inside an Optional, or as a class_path's argument)
PARSER_KEY = re.compile(r'Parser key "([^"]+)"')
LITERAL = re.compile(r"Expected a typing\.Literal\[(.*?)\]")
UNION_ERROR = re.compile(
    r"Does not validate against any of the Union subtypes .*?Errors: - (.*?) - Expected a <class 'NoneType'>"
)
GIVEN = re.compile(r"(?:Got|Given) value: (.*?)(?: - |$)")  # up to the next Union branch's error


def one_line(message: str) -> str:
    """An error message on one line; a value outside a setting's choices as bertkit says it
    everywhere else: ``model.head.tag_scheme='IOB3': expected one of IOB1, IOB2, BIOES``; of
    jsonargparse's errors for an optional class (``model.task``), the class's own alone."""
    message = " ".join(message.split())
    choices, given = LITERAL.search(message), GIVEN.search(message)
    if choices is None or given is None:
        own = UNION_ERROR.search(message)
        return message if own is None else own[1]
    key = ".".join(PARSER_KEY.findall(message))
    allowed = ", ".join(c.strip(" '\"") for c in choices[1].split(","))
    return f"{key}={given[1]!r}: expected one of {allowed}"


def _user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that end as one ``bertkit: error:`` line: bertkit's own, and Lightning's and
    jsonargparse's configuration errors once those libraries are imported."""
    errors: list[type[BaseException]] = [OSError, ValueError, ImportError, PluginError, FloatingPointError]
    if "lightning_fabric" in sys.modules:
        from lightning_fabric.utilities.exceptions import MisconfigurationException

        errors.append(MisconfigurationException)
    if "jsonargparse" in sys.modules:
        from jsonargparse import ArgumentError

        errors.append(ArgumentError)
    return tuple(errors)


def _no_gpu_hint(err: BaseException) -> str:
    if "gpu" not in str(err) or "torch" not in sys.modules or type(err).__name__ != "MisconfigurationException":
        return ""
    import torch

    return "" if torch.cuda.is_available() else " (this machine has no CUDA GPU: --trainer.accelerator cpu or auto)"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bertkit`` console script. ``--help`` of every command, ``plugins``
    and errors in the command line or a recipe come before torch and Lightning are imported."""
    args = sys.argv[1:] if argv is None else list(argv)
    plugin_manager()
    if args[:1] == ["plugins"]:
        return print_plugins(args[1:])
    try:
        commands = registered_commands()
    except PluginError as err:
        return _error(err)
    if not args or args[0] in ("-h", "--help"):
        print(overview(commands, Path("recipes").glob("*.yaml")))
        return 0 if args else 2
    if args[0] in LIGHTNING_COMMANDS and {"-h", "--help"} & set(args[1:]):
        print(command_help(args[0], Path("recipes").glob("*.yaml")))
        return 0
    try:
        if args[0] in commands:
            from jsonargparse import CLI

            args, modules = take_plugins(args)
            load_modules(modules)  # a checkpoint of a task a plugin module adds (fit's recipe listed it)

            function = loaded(commands[args[0]])
            config = getattr(function, "config_argument", None)  # jsonargparse keeps --config for itself
            if config:
                args = [re.sub(r"^--config(?==|$)", f"--{config}", a) for a in args]
            code = CLI(
                function,
                args=args[1:],
                prog=f"bertkit {args[0]}",
                exit_on_error=False,
                description=description(function),
            )
            return code if isinstance(code, int) else 0  # a command may return its exit code
        if args[0] in LIGHTNING_COMMANDS:
            require_recipe(args[0], args[1:])
        load_modules(recipe_plugins(args))
        tasks = [*entries("register_tasks"), *entries("register_heads")]
        old = deprecated_names("register_tasks") | deprecated_names("register_heads")
        check_task(args, [t for t in tasks if t not in old], entries("register_masking"), old)
        check_task_flags(args)
        check_extras(args)
        check_run_folder(args)
        return run_lightning(args)
    except _user_errors() as err:
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        return _error(err)


def _error(err: BaseException) -> int:
    """Say ``err`` on one ``bertkit: error:`` line; the exit code 2."""
    print(
        f"bertkit: error: {one_line(str(err))}{_no_gpu_hint(err)}\n(set {DEBUG_ENV}=1 for the traceback)",
        file=sys.stderr,
    )
    return 2


def registered_commands() -> dict[str, object]:
    """The commands plugins register (``register_commands``; the built-in ``embed``, ``export``,
    ``serve`` and ``tune`` among them), by name, not imported.

    Raises:
        PluginError: two plugins register one name, or a plugin registers one of the commands
            bertkit runs itself (``fit`` … ``plugins``); the message names the plugins.
    """
    commands = entries("register_commands")
    taken = sorted(set(commands) & {*LIGHTNING_COMMANDS, "plugins"})
    if taken:
        who = owners("register_commands")
        raise PluginError(
            "; ".join(f"plugin {who[n]!r} registers the command {n!r}, one of bertkit's own" for n in taken)
        )
    return commands


def run_lightning(args: list[str]) -> int:
    """``bertkit fit|validate|test|predict``: LightningCLI (``BertkitCLI``); ``--help-all`` is
    its full ``--help``. Returns the exit code (128 + the signal's number for a stopped run)."""
    from bertkit.cli.console import quiet

    try:
        from bertkit.cli.lightning import BertkitCLI, Interrupted, cli_kwargs
    except RuntimeError as err:  # raised inside an installed package's import (a torchvision for another torch)
        first = (str(err).strip().splitlines() or [""])[0]
        raise ImportError(f"Lightning cannot be imported ({first}){broken_torchvision_hint(err)}") from None

    import_classes()
    quiet()
    full = [("--help" if a == "--help-all" else a) for a in args]
    try:
        BertkitCLI(args=None if full == sys.argv[1:] else full, recipe_args=args, **cli_kwargs())
    except Interrupted as stop:
        print(stop, file=sys.stderr, flush=True)
        return stop.code
    return 0


if __name__ == "__main__":
    sys.exit(main())
