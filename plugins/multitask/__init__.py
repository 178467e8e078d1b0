"""Built-in plugin: several tasks on one encoder (``MultiTask``), each with its own data files,
head, loss weight, metrics and records."""

from bertkit.api.task import PluginExports

exports = PluginExports(__name__, {".task": ["MultiTask", "MultiTaskHead"], ".head": ["MultiTaskHeads"]})
__all__, __getattr__ = exports.names, exports.getattr
# deprecated: release 0.1's names of the tasks
register_tasks = exports.tasks("MultiTask", deprecated=("MultiTaskHead",))
