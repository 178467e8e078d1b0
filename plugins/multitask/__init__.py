"""Built-in plugin: several tasks on one encoder (``MultiTask``), each with its own data files,
head, loss weight, metrics and records."""

from collections.abc import Callable

from bertkit.api import hookimpl, lazy_exports

EXPORTS = {
    "MultiTask": "bertkit_plugins.multitask.task:MultiTask",
    "MultiTaskHeads": "bertkit_plugins.multitask.head:MultiTaskHeads",
    "MultiTaskHead": "bertkit_plugins.multitask.task:MultiTaskHead",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@hookimpl
def register_tasks(register: Callable) -> None:
    register(EXPORTS["MultiTask"])
    register(EXPORTS["MultiTaskHead"], deprecated=True)  # release 0.1's name
