"""Hook specifications: what a bertkit plugin may implement.

A plugin is a module (or object) with functions marked ``@bertkit.hookimpl`` whose names match
these specs. Registration hooks receive a ``register`` callback (the simonw/llm style); the core
owns the registries. A plugin may declare hooks of its own (``add_hookspecs``); an implementation
of a hook that neither bertkit nor a loaded plugin declares (a misspelled name) is refused.

A registration may say ``deprecated=True``: the name is an earlier release's (a class's former
name); it still resolves, and ``bertkit plugins`` lists it apart.

Every registration may give an import path instead of the object — ``register("pkg.mod:Class")``,
or ``register(name, "pkg.mod:function")`` where a name is given — so that the plugin's module
imports nothing heavy and ``bertkit plugins`` / ``bertkit --help`` stay fast; the object is
imported when a run needs the registry (``bertkit.plugins.registered``).
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

from bertkit.utils.deprecation import deprecation

hookspec = pluggy.HookspecMarker("bertkit")
hookimpl = pluggy.HookimplMarker("bertkit")


@hookspec
def register_tasks(register: Callable[[type], None]) -> None:
    """Register tasks and pre-training objectives: call ``register(TaskSubclass)`` for each
    (``bertkit.api.Task``; it builds its ``Head``).

    Every implementation is called (no ``firstresult``); names must be unique across plugins.
    """


@hookspec(warn_on_impl=deprecation("register_heads is release 0.1's hook: implement register_tasks"))
def register_heads(register: Callable[[type], None]) -> None:
    """Release 0.1's ``register_tasks`` (its heads were tasks and modules at once); deprecated."""


@hookspec
def register_pretrained(register: Callable[[str, Callable[[], str]], None]) -> None:
    """Register named pretrained checkpoints: ``register(name, locate)``.

    ``locate()`` returns the path of a Hugging Face format directory or raises
    ``FileNotFoundError`` saying how to install it; a ``hub_id`` attribute on it (``org/name``)
    names the Hub repository its files are a copy of, which model cards and PEFT adapter
    configs name as the base model. Every implementation is called.
    """


@hookspec
def register_masking(register: Callable[[type], None]) -> None:
    """Register masked-LM masking strategies (``MaskingStrategy`` subclasses): ``register(cls)``.

    Every implementation is called; names must be unique across plugins.
    """


@hookspec
def register_commands(register: Callable[[str, Callable], None]) -> None:
    """Register ``bertkit NAME`` sub-commands: ``register(name, function)``. The function's
    type-hinted signature and docstring become the command's options and help (jsonargparse)."""


@hookspec
def register_encoders(register: Callable[[type], None]) -> None:
    """Register encoder families (``bertkit.model.families.EncoderFamily`` subclasses): ``register(cls)``,
    or ``register(name, "pkg.mod:Family")`` by import path.
    Each is chosen by its ``name`` (``model.encoder``, or a pretrained ``config.json``'s
    ``model_type``). Every implementation is called; names must be unique."""


@hookspec(historic=True)
def add_hookspecs(register: Callable[[object], None]) -> None:
    """Declare hooks of the plugin's own, which other plugins implement (pytest's
    ``pytest_addhooks``): ``register(namespace)``, a module or class whose functions are marked
    ``@hookspec`` (``bertkit.api.task.hookspec``). Called for each plugin as it is registered, so a
    plugin may implement a hook whose declaring plugin loads after it; an implementation of a hook
    that no loaded plugin declares is refused as a misspelled one is. A registration hook in
    bertkit's style (one ``register`` argument) is read with ``bertkit.api.task.registered(name)``;
    any other is called with ``bertkit.api.task.plugin_hooks()``: ``plugin_hooks().NAME(...)``."""
