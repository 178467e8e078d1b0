"""The built-in commands, a plugin of the bertkit distribution registered exactly as a third
party's (entry point ``commands``): ``bertkit embed``, ``export``, ``serve``, ``stream`` and ``tune``. Each is
a module here whose function's signature and docstring are the command's options and help; the
registration names them by import path, so ``bertkit --help`` imports none of them."""

from collections.abc import Callable

from bertkit.api.app import hookimpl


@hookimpl
def register_commands(register: Callable) -> None:
    for name in ("embed", "export", "serve", "stream", "tune"):
        register(name, f"bertkit.commands.{name}:{name}")
