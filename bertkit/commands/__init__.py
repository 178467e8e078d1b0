"""The built-in commands: ``bertkit embed``, ``export``, ``serve`` and ``tune`` (each a module here whose
function's signature and docstring are the command's options and help)."""
