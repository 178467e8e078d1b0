"""``EncoderAdapters``: ``model.adapter``'s LoRA layers on a model's encoder, as a model transform.

Checked when the model is built (a bad target or a missing peft stops before any trainer starts),
put on in ``configure_model`` (Lightning's hook for model transforms, which ``fit``, ``test`` and
``load_from_checkpoint`` call), and kept apart in checkpoints: a checkpoint holds the adapters
and the head only, with a fingerprint of the frozen base weights, which come from
``model.pretrained`` again when it is read.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch
from torch import nn

from bertkit.model.adapters import Adapter, adapter_targets, add_adapter, frozen_fingerprint, is_adapter_key

BASE_WEIGHTS = "adapter_base_weights"
"""The checkpoint key of the base weights' fingerprint (``frozen_fingerprint``)."""


class EncoderAdapters:
    """LoRA adapters (``Adapter``) for one encoder.

    Args:
        adapter: the adapters' settings.
        encoder: the encoder they go on; its targeted linear layers are checked here.
        default_targets: the encoder family's targets (``EncoderFamily.adapter_targets``).

    Raises:
        ImportError: peft (the ``lora`` extra) is not installed.
        ValueError: a target names no linear layer of the encoder.
    """

    def __init__(self, adapter: Adapter, encoder: nn.Module, default_targets: tuple[str, ...]) -> None:
        self.adapter, self.default_targets = adapter, default_targets
        self.targets = adapter_targets(encoder, adapter, default_targets)
        self.fingerprint: str | None = None
        """The base weights' fingerprint once the adapters are on (``put_on``), else None."""

    @property
    def spec(self) -> dict[str, Any]:
        """The settings as plain values, with the targeted layer names (the model's hparams)."""
        return {**asdict(self.adapter), "target_modules": self.targets}

    def put_on(self, encoder: nn.Module) -> bool:
        """Put the LoRA layers on ``encoder`` unless they are on (``add_adapter``), their initial
        weights drawn from torch's last seed in a forked generator, a stream of their own (the
        same adapters in one process or under DDP), then take the base weights' fingerprint.
        Returns whether they went on now."""
        if self.fingerprint is not None:
            return False
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(torch.initial_seed() + 1)
            add_adapter(encoder, self.adapter, self.default_targets)
        self.fingerprint = frozen_fingerprint(encoder)
        return True

    def strip(self, checkpoint: dict[str, Any]) -> None:
        """Keep the adapters and the head only in a checkpoint being saved, with the fingerprint
        of the base weights they train over."""
        state = checkpoint["state_dict"]
        for key in [k for k in state if k.startswith("encoder.") and not is_adapter_key(k)]:
            del state[key]
        checkpoint[BASE_WEIGHTS] = self.fingerprint


def fill_base_weights(
    checkpoint: dict[str, Any], adapters: EncoderAdapters | None, model: nn.Module, pretrained: Any
) -> None:
    """Give a checkpoint of adapters and head only the base weights of the ``model`` reading it
    (``adapters``, its adapters; ``pretrained``, its ``model.pretrained``, for messages).

    Raises:
        ValueError: the checkpoint's adapters were trained over other base weights, or the
            checkpoint has adapters and the model none (or the reverse).
    """
    trained_on, fingerprint = checkpoint.get(BASE_WEIGHTS), adapters.fingerprint if adapters else None
    if trained_on is None and fingerprint is None:
        return
    if trained_on is None or fingerprint is None:
        raise ValueError(
            "the checkpoint holds a whole model but model.adapter is set"
            if trained_on is None
            else "the checkpoint holds adapters (model.adapter), but this model has none: give the same model.adapter"
        )
    if trained_on != fingerprint:
        raise ValueError(
            f"the checkpoint's adapters were trained over other base weights (fingerprint {trained_on}) than "
            f"model.pretrained={pretrained!r} holds ({fingerprint})"
        )
    state = checkpoint["state_dict"]
    for key, value in model.state_dict().items():
        if key.startswith("encoder.") and not is_adapter_key(key):
            state.setdefault(key, value)
