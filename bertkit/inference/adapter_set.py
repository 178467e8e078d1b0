"""Several LoRA adapter checkpoints over one base model, answered by one encoder in memory
(``bertkit serve --adapters``): the first checkpoint's model is loaded whole; every other
checkpoint's adapters are added to its encoder under their own name (peft's multi-adapter layers,
``peft.functional.inject_adapter_in_model``), and its head stays its own. Before a batch runs,
the adapter of the predictor running it is made the active one (``peft.functional.set_adapter``),
so one encoder serves every task, and a batch of one adapter never runs with another's update.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.inference.predictor import MAX_TOKENS, Predictor
from bertkit.model.adapters import Adapter, add_adapter, is_adapter_key, require_peft
from bertkit.tasks.task import Batch
from bertkit.training.module import BertModule
from bertkit.training.trained import load_trained

DEFAULT = "default"
"""The name of the first checkpoint's adapter (``bertkit serve --model``'s), peft's own name for a
model's first adapter."""


class AdapterSwitch:
    """Which of an encoder's adapters is active; ``select`` changes it only when another is asked
    for (peft's ``set_adapter`` walks every layer)."""

    def __init__(self, encoder: nn.Module, peft_names: Mapping[str, str]) -> None:
        self.encoder, self.peft_names = encoder, dict(peft_names)
        self.active: str | None = None

    def select(self, name: str) -> None:
        if name != self.active:
            from peft.functional import set_adapter

            set_adapter(self.encoder, self.peft_names[name], inference_mode=True)
            self.active = name


class AdaptedForward:
    """A ``BertModule``'s forward pass with its adapter selected first (``Predictor.forward``)."""

    def __init__(self, switch: AdapterSwitch, name: str, model: BertModule) -> None:
        self.switch, self.name, self.model = switch, name, model

    def __call__(self, batch: Batch) -> dict[str, torch.Tensor]:
        self.switch.select(self.name)
        return self.model(batch)


class AdaptedEncoder(nn.Module):
    """The shared encoder with one adapter selected before each call (``Predictor.encoder``, which
    ``embed`` runs)."""

    def __init__(self, switch: AdapterSwitch, name: str) -> None:
        super().__init__()
        self.switch, self.name, self.inner = switch, name, switch.encoder

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.switch.select(self.name)
        return self.inner(*args, **kwargs)


def load_adapters(
    paths: Mapping[str, str | Path], max_tokens: int = MAX_TOKENS, device: str = "cpu", prepack: bool = True
) -> dict[str, Predictor]:
    """A predictor per adapter checkpoint (``bertkit fit`` with ``model.adapter``), all over one
    encoder: ``paths`` maps each name to its checkpoint; the first one's base model is loaded,
    and each checkpoint keeps its own task, head and ``model.max_length``. The predictors run in
    float32 (their linear layers pre-packed on the CPU; ``prepack=False``: predictors that pickle,
    to hand to another process, where ``Predictor.prepack`` of any one of them packs the shared
    encoder): bf16, int8 and compile would convert the encoder every adapter shares, and are not
    offered here.

    Raises:
        ImportError: peft is not installed (the ``lora`` extra).
        ValueError: no paths; a checkpoint that holds a whole model, not adapters; adapters
            trained over other base weights than the first checkpoint's (both fingerprints
            named). FileNotFoundError: see ``load_trained``.
    """
    require_peft()
    if not paths:
        raise ValueError("load_adapters: no checkpoints")
    loaded = {name: _adapter_model(path, device) for name, path in paths.items()}
    (first_name, (first, _)), *others = loaded.items()
    shared = first.encoder
    peft_names = {first_name: DEFAULT}
    for i, (name, (model, _)) in enumerate(others, 1):
        if model.base_fingerprint != first.base_fingerprint:
            raise ValueError(
                f"{paths[name]}: its adapters were trained over other base weights (fingerprint "
                f"{model.base_fingerprint}) than {paths[first_name]}'s ({first.base_fingerprint}); one server shares one base"
            )
        peft_names[name] = f"adapter_{i}"
        add_adapter(shared, Adapter(**model.hparams["adapter"]), (), peft_names[name])
        weights = {
            _renamed(key, peft_names[name]): v for key, v in model.encoder.state_dict().items() if is_adapter_key(key)
        }
        unread = shared.load_state_dict(weights, strict=False).unexpected_keys  # the adapters only
        if unread:
            raise ValueError(f"{paths[name]}: adapter weights with no layer to go to: {unread[:3]}")
        model.encoder = shared
        model.head.attach(shared)
    switch = AdapterSwitch(shared, peft_names)
    switch.select(first_name)
    predictors = {}
    for name, (model, max_length) in loaded.items():
        plain = Predictor.from_model(model, max_length, max_tokens)
        predictors[name] = Predictor(
            plain.task, plain.head, plain.tokenizer, AdaptedForward(switch, name, model),
            {**plain.description, "adapter": name}, max_length, max_tokens, AdaptedEncoder(switch, name), plain.device,
        )  # fmt: skip
    if prepack:
        predictors[first_name].prepack()  # the shared encoder's base layers, which every predictor runs
    return predictors


def _adapter_model(path: str | Path, device: str) -> tuple[BertModule, int]:
    """A checkpoint's model (``load_trained``) and ``model.max_length``.

    Raises:
        ValueError: the checkpoint holds a whole model (trained without ``model.adapter``), or
            is an export folder."""
    model, max_length = load_trained(path, device, BertModule)
    if model.base_fingerprint is None:
        raise ValueError(
            f"{path}: a whole model, not adapters over a base (a checkpoint of a run with model.adapter); serve it alone"
        )
    return model.eval(), max_length


def _renamed(key: str, name: str) -> str:
    """An adapter weight's key (``….lora_A.default.weight``) under the adapter ``name``."""
    head, _, tail = key.rpartition(f".{DEFAULT}.")
    return f"{head}.{name}.{tail}"
