"""Built-in plugin: sequence classification and regression on single texts and text pairs."""

from bertkit.api.task import PluginExports

exports = PluginExports(
    __name__, {".task": ["SequenceClassification", "SequenceClassificationHead"], ".head": ["PooledClassificationHead"]}
)
__all__, __getattr__ = exports.names, exports.getattr
# deprecated: release 0.1's names of the tasks
register_tasks = exports.tasks("SequenceClassification", deprecated=("SequenceClassificationHead",))
