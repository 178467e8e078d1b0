"""Built-in plugin: ELECTRA (Clark et al. 2020) — a second encoder family and its pre-training.

``model.encoder: electra`` builds ELECTRA's encoder (BERT's blocks, optionally narrower
embeddings with a projection, no pooler; transformers ``ElectraModel`` keys), and pretrained
directories whose ``config.json`` says ``model_type: electra`` load as one. The
``ReplacedTokenDetectionHead`` pre-trains it as a discriminator against a small generator
(``recipes/pretrain_electra.yaml``); fine-tuning heads work on it as on BERT.
"""

from collections.abc import Callable

from bertkit_plugins.electra.encoder import ElectraConfig, ElectraEncoder, ElectraFamily
from bertkit_plugins.electra.head import ReplacedTokenDetectionHead

import bertkit

__all__ = ["ElectraConfig", "ElectraEncoder", "ElectraFamily", "ReplacedTokenDetectionHead"]


@bertkit.hookimpl
def register_encoders(register: Callable) -> None:
    register(ElectraFamily)


@bertkit.hookimpl
def register_heads(register: Callable) -> None:
    register(ReplacedTokenDetectionHead)
