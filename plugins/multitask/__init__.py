"""Built-in plugin: registers the core's ``MultiTaskHead`` (several heads on one encoder), so a
recipe can name it ``class_path: MultiTaskHead`` and ``bertkit plugins`` lists it."""

from collections.abc import Callable

import bertkit


@bertkit.hookimpl
def register_heads(register: Callable) -> None:
    register("bertkit.tasks.multitask:MultiTaskHead")
