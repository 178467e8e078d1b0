"""Built-in plugin: ELECTRA (Clark et al. 2020) — a second encoder family and its pre-training.

``model.encoder: electra`` builds ELECTRA's encoder (BERT's blocks, optionally narrower
embeddings with a projection, no pooler; transformers ``ElectraModel`` keys), and pretrained
directories whose ``config.json`` says ``model_type: electra`` load as one. The
``ReplacedTokenDetection`` task pre-trains it as a discriminator against a small generator
(``recipes/pretrain_electra.yaml``); fine-tuning tasks work on it as on BERT.
"""

from collections.abc import Callable

from bertkit.api import hookimpl, lazy_exports

EXPORTS = {
    "ElectraConfig": "bertkit_plugins.electra.encoder:ElectraConfig",
    "ElectraModel": "bertkit_plugins.electra.encoder:ElectraModel",
    "ElectraEncoder": "bertkit_plugins.electra.encoder:ElectraEncoder",  # release 0.1's name
    "ElectraFamily": "bertkit_plugins.electra.encoder:ElectraFamily",
    "ReplacedTokenDetection": "bertkit_plugins.electra.task:ReplacedTokenDetection",
    "ElectraPreTrainingHeads": "bertkit_plugins.electra.head:ElectraPreTrainingHeads",
    "ReplacedTokenDetectionHead": "bertkit_plugins.electra.task:ReplacedTokenDetectionHead",
}
__all__ = list(EXPORTS)
__getattr__ = lazy_exports(__name__, EXPORTS)


@hookimpl
def register_encoders(register: Callable) -> None:
    register("electra", EXPORTS["ElectraFamily"])


@hookimpl
def register_tasks(register: Callable) -> None:
    register(EXPORTS["ReplacedTokenDetection"])
    register(EXPORTS["ReplacedTokenDetectionHead"], deprecated=True)  # release 0.1's name
