"""Plugin loading and the registries (pluggy; entry-point group ``bertkit``).

Built-in plugins are entry points of the bertkit distribution itself and
load exactly like third-party ones; they always load. Third-party entry points are narrowed by
``BERTKIT_LOAD_PLUGINS`` (comma-separated entry-point names; empty = none), as ``LLM_LOAD_PLUGINS``.
A plugin that fails to import or implements an unknown hook is skipped with a warning naming it;
with ``BERTKIT_STRICT_PLUGINS=1`` it is an error instead.

A registration may name its object by import path (``register("pkg.module:Class")``, or
``register(name, "pkg.module:attribute")``): it is imported when a registry is read
(``registered``), not to list names (``bertkit plugins``, ``bertkit --help``), so listing plugins
does not import torch.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from importlib.util import find_spec
from pathlib import Path
from types import ModuleType

import pluggy

from bertkit import hookspecs

GROUP = "bertkit"
LOAD_ENV = "BERTKIT_LOAD_PLUGINS"
STRICT_ENV = "BERTKIT_STRICT_PLUGINS"


class PluginError(RuntimeError):
    """A plugin could not be loaded or registered (strict mode), or a registry name clashed."""


class PluginWarning(UserWarning):
    """A plugin was skipped; the message names it and says why."""


@dataclass
class PluginInfo:
    """What ``bertkit plugins`` shows for one plugin."""

    name: str
    module: str
    distribution: str | None
    version: str | None
    hooks: list[str]
    registered: dict[str, list[str]] = field(default_factory=dict)
    deprecated: dict[str, list[str]] = field(default_factory=dict)
    """Names registered for compatibility with an earlier release (``register(…, deprecated=True)``)."""


@dataclass(frozen=True)
class Lazy:
    """An object registered by its import path, ``"package.module:attribute"``."""

    path: str

    @property
    def attribute(self) -> str:
        return self.path.rpartition(":")[2]

    def load(self) -> object:
        """Import the module and return the attribute.

        Raises:
            PluginError: the module cannot be imported or lacks the attribute; names the path.
        """
        module, _, attribute = self.path.partition(":")
        try:
            return getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as err:
            raise PluginError(
                f"registered object {self.path!r} cannot be imported: {type(err).__name__}: {err}"
            ) from err

    def doc(self) -> str | None:
        """The attribute's docstring, read from the module's source without importing it."""
        module, _, attribute = self.path.partition(":")
        spec = find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None
        for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == attribute:
                return ast.get_docstring(node)
        return None


def lazy_exports(module: str, exports: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` (PEP 562) that imports each of ``exports`` (name -> import path)
    on first access: a plugin package re-exports its classes without importing them when loaded.
    """

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return Lazy(exports[name]).load()

    return __getattr__


class PluginExports:
    """A plugin package's public names, each imported on first use, and the registration hooks
    that name them: what a plugin's ``__init__.py`` would otherwise spell out (a table of import
    paths, ``__all__``, ``__getattr__`` and one hook function per registry)::

        exports = PluginExports(__name__, {".task": ["QuestionAnswering"], ".head": ["AnswerSpanHead"]})
        __all__, __getattr__ = exports.names, exports.getattr
        register_tasks = exports.tasks("QuestionAnswering")

    Args:
        package: the plugin package's ``__name__``.
        modules: each module (relative to ``package``, ``.task``; or absolute) -> the public names
            it defines.
    """

    def __init__(self, package: str, modules: dict[str, list[str]]) -> None:
        self.paths = {
            name: f"{package + module if module.startswith('.') else module}:{name}"
            for module, names in modules.items()
            for name in names
        }
        self.names = list(self.paths)
        self.getattr = lazy_exports(package, self.paths)

    def tasks(self, *names: str, deprecated: Iterable[str] = ()) -> Callable[[Callable], None]:
        """A ``register_tasks`` hook registering ``names`` and, under an earlier release's name,
        ``deprecated`` (resolved, not offered as choices)."""
        return self._registering(names, tuple(deprecated))

    def encoders(self, **families: str) -> Callable[[Callable], None]:
        """A ``register_encoders`` hook: each registered name (``model.encoder``, the model
        type) -> the exported ``EncoderFamily`` class's name."""

        @hookspecs.hookimpl
        def register_encoders(register: Callable) -> None:
            for key, name in families.items():
                register(key, self.paths[name])

        return register_encoders

    def masking(self, *names: str) -> Callable[[Callable], None]:
        """A ``register_masking`` hook registering the exported ``MaskingStrategy`` classes ``names``."""
        return self._registering(names, ())

    def _registering(self, names: tuple[str, ...], deprecated: tuple[str, ...]) -> Callable[[Callable], None]:
        """A hook (pluggy knows it by the module attribute it is assigned to) registering the
        exported ``names`` by import path, and ``deprecated`` ones as such."""

        @hookspecs.hookimpl
        def hook(register: Callable) -> None:
            for name in names:
                register(self.paths[name])
            for name in deprecated:
                register(self.paths[name], deprecated=True)

        return hook


# Registries whose objects are named by an attribute of their own (else by ``__name__``).
NAME_ATTRIBUTE = {"register_encoders": "name"}  # EncoderFamily.name: "electra", as recipes say it

_pm: pluggy.PluginManager | None = None
_sources: dict[str, EntryPoint | None] = {}
_deprecated: set[tuple[str, str]] = set()  # (hook, name) registered with deprecated=True


def _new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    pm.hook.add_hookspecs.call_historic(kwargs={"register": pm.add_hookspecs})  # each plugin's, as it registers
    return pm


def _fail(message: str) -> None:
    if os.environ.get(STRICT_ENV, "") not in ("", "0"):
        raise PluginError(message)
    warnings.warn(message, PluginWarning, stacklevel=3)


def register_plugin(
    plugin: ModuleType | object, name: str, source: EntryPoint | None = None, check: bool = True
) -> bool:
    """Register one plugin object (its ``add_hookspecs`` runs now) and, with ``check``, validate
    its hooks; return whether it was kept.

    Raises:
        PluginError: in strict mode, when the plugin has a hook no spec defines.
    """
    pm = plugin_manager()
    if pm.has_plugin(name):
        return True
    try:
        pm.register(plugin, name)
    except pluggy.PluginValidationError as err:  # an implementation that does not match its spec
        _fail(f"bertkit plugin {name!r} was not loaded: {err}")
        return False
    _sources[name] = source
    return _validated(pm, name) if check else True


def _validated(pm: pluggy.PluginManager, name: str) -> bool:
    """Keep the plugin ``name`` if each hook it implements is declared (by bertkit or a plugin's
    ``add_hookspecs``); otherwise unregister it and say which hooks (``_fail``)."""
    plugin = pm.get_plugin(name)
    unknown = sorted(
        caller.name
        for caller in pm.get_hookcallers(plugin) or []
        if caller.spec is None and any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls())
    )
    if not unknown:
        return True
    unregister_plugin(name)
    _fail(
        f"bertkit plugin {name!r} was not loaded: it implements {', '.join(unknown)}, which no hook specification "
        "declares (bertkit's, or a loaded plugin's add_hookspecs): a misspelled hook name?"
    )
    return False


def plugin_hooks() -> pluggy.HookRelay:
    """The loaded plugins' hooks, to call one a plugin declared (``add_hookspecs``):
    ``plugin_hooks().my_hook(name=value)`` returns each implementation's result, as pluggy does."""
    return plugin_manager().hook


def unregister_plugin(name: str) -> None:
    """Remove a plugin registered under ``name`` (tests register inline plugins and remove them)."""
    pm = plugin_manager()
    if pm.has_plugin(name):
        pm.unregister(name=name)
    _sources.pop(name, None)


def _allowed(ep: EntryPoint) -> bool:
    if ep.dist is not None and ep.dist.name == "bertkit":
        return True
    wanted = os.environ.get(LOAD_ENV)
    if wanted is None:
        return True
    return ep.name in {n.strip() for n in wanted.split(",") if n.strip()}


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    for ep in sorted(entry_points(group=GROUP), key=lambda e: (e.dist is None or e.dist.name != "bertkit", e.name)):
        if not _allowed(ep):
            continue
        origin = f"{ep.value} from {ep.dist.name if ep.dist else 'an unknown distribution'}"
        try:
            module = ep.load()
        except Exception as err:  # a broken plugin must not break unrelated commands
            _fail(f"bertkit plugin {ep.name!r} ({origin}) failed to import: {type(err).__name__}: {err}")
            continue
        register_plugin(module, ep.name, ep, check=False)
    for name in [n for n, _ in pm.list_name_plugin()]:  # every plugin's hooks declared by now
        _validated(pm, name)


def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, entry points loaded on first use."""
    global _pm
    if _pm is None:
        _pm = _new_manager()
        _load_entry_points(_pm)
    return _pm


def load_modules(names: Iterable[str]) -> None:
    """Import and register plugin modules by dotted name (a recipe's ``plugins:`` list).

    Raises:
        PluginError: a module cannot be imported; the message names it.
    """
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception as err:
            raise PluginError(
                f"plugin module {name!r} listed in the recipe or --plugins cannot be imported: "
                f"{type(err).__name__}: {err}"
            ) from err
        register_plugin(module, name)


def _collect(hook_name: str) -> dict[str, dict[str, object]]:
    """Run a registration hook; return {plugin name: {registered name: object}}."""
    pm = plugin_manager()
    found: dict[str, dict[str, object]] = {}
    owner: dict[str, str] = {}
    for impl in getattr(pm.hook, hook_name).get_hookimpls():
        plugin_name = pm.get_name(impl.plugin)
        items = found.setdefault(plugin_name, {})

        def register(
            obj: object,
            locate: Callable | str | None = None,
            deprecated: bool = False,
            _items=items,
            _plugin=plugin_name,
        ) -> None:
            if isinstance(obj, str) and locate is None and ":" in obj:
                obj = locate = Lazy(obj)
                name = obj.attribute
            elif isinstance(obj, str):
                name = obj
                locate = Lazy(locate) if isinstance(locate, str) else locate
            else:
                name = getattr(obj, NAME_ATTRIBUTE.get(hook_name, "__name__"))
            if name in owner and owner[name] != _plugin:
                raise PluginError(f"{hook_name}: {name!r} registered by both {owner[name]!r} and {_plugin!r}")
            owner[name] = _plugin
            _items[name] = locate if locate is not None else obj
            if deprecated:
                _deprecated.add((hook_name, name))

        impl.function(register=register)
    return found


def owners(hook_name: str) -> dict[str, str]:
    """The plugin that registered each name through ``hook_name``."""
    return {name: plugin for plugin, found in _collect(hook_name).items() for name in found}


def deprecated_names(hook_name: str) -> set[str]:
    """The names registered through ``hook_name`` for compatibility with an earlier release (a
    class's former name): they still resolve, but are not offered as choices."""
    _collect(hook_name)
    return {name for hook, name in _deprecated if hook == hook_name}


def entries(hook_name: str) -> dict[str, object]:
    """What each name was registered with through ``hook_name``, by name; an object registered
    by import path stays a ``Lazy`` (not imported)."""
    return {k: v for items in _collect(hook_name).values() for k, v in items.items()}


def registered(hook_name: str) -> dict[str, object]:
    """All objects registered through ``hook_name`` (e.g. ``register_heads``), by name; those
    registered by import path are imported.

    Raises:
        PluginError: an import path cannot be imported.
    """
    return {k: loaded(v) for k, v in entries(hook_name).items()}


def loaded(entry: object) -> object:
    """A registry entry as an object: a ``Lazy`` imported, anything else as it is."""
    return entry.load() if isinstance(entry, Lazy) else entry


def registered_tasks() -> dict[str, object]:
    """The registered tasks by name: ``register_tasks``, and release 0.1's ``register_heads``
    (deprecated; its heads are tasks too).

    Raises:
        PluginError: an import path cannot be imported, or a name is registered by both hooks.
    """
    tasks = registered("register_tasks")
    heads = registered("register_heads")
    both = sorted(set(tasks) & set(heads))
    if both:
        raise PluginError(f"register_tasks and register_heads both register {both}")
    return {**tasks, **heads}


def import_classes() -> None:
    """Import every registered task, masking strategy and encoder family, so that recipes may
    name them by class name alone (jsonargparse resolves names among imported subclasses).

    Raises:
        PluginError: a registered import path cannot be imported.
    """
    registered_tasks()
    for hook_name in ("register_masking", "register_encoders"):
        registered(hook_name)


def import_class(class_path: str, base: type) -> type:
    """The class at a dotted ``class_path`` the user gave (a recipe, the command line), checked
    to subclass ``base``. Imports its module.

    Raises:
        ValueError: it cannot be imported or is not a subclass of ``base``.
    """
    module_name, _, class_name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"class_path {class_path!r} cannot be imported: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"class_path {class_path!r} is not a {base.__module__}.{base.__qualname__}")
    return cls


def full_name(cls: type) -> str:
    """``module.QualifiedName`` of a class: the full path untrusted class paths are compared with."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _known(registry: Mapping[str, object]) -> Iterator[type]:
    """The registered classes and their subclasses (deprecated aliases among them)."""
    for cls in registry.values():
        if isinstance(cls, type):
            yield cls
            yield from cls.__subclasses__()


def stored_class(class_path: str, base: type, registry: Mapping[str, object], source: str) -> type:
    """The class named by a file bertkit reads but the user did not write (a checkpoint's
    hyper-parameters, a model directory's ``config.json``), without importing anything.

    A stored name can only select: a registered class (by its registered name, its full path or
    a former class path it lists in ``aliases``, as files of earlier releases name it), or a
    ``base`` subclass in a module that is already imported (one the user's recipe, ``plugins:``
    list, installed entry points or own code imported). A module is never imported because a
    file names it, so a crafted checkpoint cannot run a ``.py`` file lying beside it.

    Args:
        class_path: the stored name.
        base: the class it must subclass.
        registry: the registered classes by name (``registered_tasks()``, ``register_encoders`` …).
        source: the file and field, for errors.

    Raises:
        ValueError: anything else (the message names ``source`` and how to make the class known).
    """
    if class_path in registry:
        return registry[class_path]  # type: ignore[return-value]
    for cls in _known(registry):
        if class_path == full_name(cls) or class_path in vars(cls).get("aliases", ()):
            return cls
    module_name, _, class_name = class_path.rpartition(".")
    module = sys.modules.get(module_name) if module_name else None
    cls = getattr(module, class_name, None) if module is not None else None
    if not (isinstance(cls, type) and issubclass(cls, base) and full_name(cls) == class_path):
        module_hint = module_name or class_path
        raise ValueError(
            f"{source}: {class_path!r} is not a registered {base.__qualname__} nor one in a module already imported; "
            "bertkit does not import code a checkpoint or model directory names. If you trust it, load its plugin: "
            f"--plugins {module_hint} (any bertkit command), the recipe's plugins: list, or import it before loading"
        )
    return cls


def describe() -> list[PluginInfo]:
    """One ``PluginInfo`` per registered plugin, for ``bertkit plugins``."""
    pm = plugin_manager()
    by_hook = {
        spec: _collect(spec)
        for spec in (
            "register_tasks",
            "register_heads",
            "register_encoders",
            "register_masking",
            "register_pretrained",
            "register_commands",
        )
    }
    infos = []
    for name, plugin in pm.list_name_plugin():
        ep = _sources.get(name)
        dist = ep.dist if ep is not None else None
        hooks = sorted(caller.name for caller in pm.get_hookcallers(plugin) or [])
        info = PluginInfo(
            name=name,
            module=getattr(plugin, "__name__", type(plugin).__name__),
            distribution=dist.name if dist else None,
            version=dist.version if dist else None,
            hooks=hooks,
        )
        for spec, found in by_hook.items():
            names = sorted(found.get(name) or [])
            old = [n for n in names if (spec, n) in _deprecated]
            if names != old:
                info.registered[spec.removeprefix("register_")] = [n for n in names if n not in old]
            if old:
                info.deprecated[spec.removeprefix("register_")] = old
        infos.append(info)
    return infos
