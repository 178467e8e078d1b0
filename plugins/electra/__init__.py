"""Built-in plugin: ELECTRA (Clark et al. 2020) — a second encoder family and its pre-training.

``model.encoder: electra`` builds ELECTRA's encoder (BERT's blocks, optionally narrower
embeddings with a projection, no pooler; transformers ``ElectraModel`` keys), and pretrained
directories whose ``config.json`` says ``model_type: electra`` load as one. The
``ReplacedTokenDetection`` task pre-trains it as a discriminator against a small generator
(``recipes/pretrain_electra.yaml``); fine-tuning tasks work on it as on BERT.
"""

from bertkit.api.task import PluginExports

exports = PluginExports(
    __name__,
    {
        ".encoder": ["ElectraConfig", "ElectraModel", "ElectraEncoder", "ElectraFamily"],
        ".task": ["ReplacedTokenDetection", "ReplacedTokenDetectionHead"],
        ".head": ["ElectraPreTrainingHeads"],
    },
)
__all__, __getattr__ = exports.names, exports.getattr
# deprecated: release 0.1's names of the tasks
register_tasks = exports.tasks("ReplacedTokenDetection", deprecated=("ReplacedTokenDetectionHead",))
register_encoders = exports.encoders(electra="ElectraFamily")
