"""bertkit's built-in plugins, installed as ``bertkit_plugins`` and loaded through entry points."""
