"""Low-rank adapters on the encoder (``model.adapter``; the ``lora`` extra): LoRA (Hu et al. 2021,
"LoRA: Low-Rank Adaptation of Large Language Models") through the ``peft`` library, whose
``inject_adapter_in_model`` replaces the targeted linear layers of the encoder with LoRA layers
in place and leaves only the adapters trainable. The task's head is not part of the encoder: it
trains fully. A checkpoint then holds the adapters and the head; the frozen base weights come
from ``model.pretrained`` again, checked against the fingerprint the checkpoint records.
"""

from __future__ import annotations

import copy
import hashlib
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

import torch
from torch import nn

from bertkit.utils.optional import require_module
from bertkit.utils.precision import check_float32

LORA_INSTALL = "pip install 'bertkit[lora]'"
AdapterMethod = Literal["lora"]


@dataclass
class Adapter:
    """``model.adapter``: train low-rank adapters in place of the encoder's weights.

    Args:
        method: ``lora`` (LoRA, Hu et al. 2021; peft's ``LoraConfig``).
        r: the rank of each adapter's update B·A (Hu et al. §7.2: ranks 4-8 already suffice; 8
            is peft's default).
        alpha: the update's scale is alpha / r (peft's ``lora_alpha``; 16 = 2r, the common
            setting for BERT-size encoders).
        dropout: dropout on each adapter's input (peft's ``lora_dropout``; 0.1 as in peft's
            sequence-classification examples).
        target_modules: names of the encoder's linear layers that get adapters (peft's
            ``target_modules``: a name matches a module whose dotted path ends with it); None:
            the family's ``EncoderFamily.adapter_targets`` (every linear layer of the blocks:
            for BERT ``query``, ``key``, ``value`` and ``dense``, which on CoNLL-2003 NER came
            level with full fine-tuning where query and value alone lost 4.3 F1,
            ``benchmarks/results/lora_parity.json`` and ``lora_ablation.json``).
        use_rslora: scale the update by alpha / sqrt(r) instead of alpha / r (rank-stabilised
            LoRA, Kalajdzievski 2023; peft's ``use_rslora``).

    Raises:
        ValueError: ``r`` below 1, ``alpha`` not positive or ``dropout`` outside [0, 1).
    """

    method: AdapterMethod = "lora"
    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.1
    target_modules: list[str] | None = None
    use_rslora: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"model.adapter.r={self.r!r}: expected an integer >= 1")
        check_float32(self.alpha, "model.adapter.alpha", low=0.0, low_open=True)
        check_float32(self.dropout, "model.adapter.dropout", low=0.0, high=1.0, high_open=True)


def require_peft() -> ModuleType:
    """The ``peft`` module.

    Raises:
        ImportError: it is not installed; the message names the extra that adds it.
    """
    return require_module("peft", "model.adapter (LoRA)", LORA_INSTALL)


def adapter_targets(encoder: nn.Module, adapter: Adapter, default_targets: tuple[str, ...]) -> list[str]:
    """The names of ``encoder``'s linear layers ``adapter`` targets (its ``target_modules``, else
    the family's ``default_targets``), checked before any layer is changed.

    Raises:
        ImportError: peft is not installed.
        ValueError: no layer of the encoder matches a target (names the targets and the
            encoder's linear layers).
    """
    require_peft()
    targets = list(adapter.target_modules or default_targets)
    linear = sorted({path.rpartition(".")[2] for path, m in encoder.named_modules() if _adaptable(path, m)})
    missing = [t for t in targets if t.rpartition(".")[2] not in linear]
    if missing:
        raise ValueError(
            f"model.adapter.target_modules: {missing} name no linear layer of the encoder (its linear layers: {linear})"
        )
    return targets


def add_adapter(
    encoder: nn.Module, adapter: Adapter, default_targets: tuple[str, ...], name: str = "default"
) -> list[str]:
    """Put LoRA layers on ``encoder``'s targeted linear layers, in place (peft's
    ``inject_adapter_in_model``, the adapter called ``name``: another name adds a second adapter
    beside the first, as ``bertkit.inference.adapter_set`` does); every other encoder weight is
    frozen. Returns the targeted layer names.

    Raises:
        ImportError, ValueError: as ``adapter_targets``.
    """
    targets = adapter_targets(encoder, adapter, default_targets)
    peft = require_peft()
    config = peft.LoraConfig(
        r=adapter.r,
        lora_alpha=adapter.alpha,
        lora_dropout=adapter.dropout,
        target_modules=targets,
        use_rslora=adapter.use_rslora,
    )
    with warnings.catch_warnings():  # a second adapter beside the first is the point here
        warnings.filterwarnings("ignore", "Already found a `peft_config` attribute", UserWarning)
        peft.inject_adapter_in_model(config, encoder, adapter_name=name)
    return targets


def _adaptable(path: str, module: nn.Module) -> bool:
    """Whether a module is a linear layer of the encoder: an ``nn.Linear``, or one that already
    carries an adapter (peft's tuner layer), not the layers inside it."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    inside = ".lora_" in path or path.endswith(".base_layer")
    return isinstance(module, BaseTunerLayer) or (isinstance(module, nn.Linear) and not inside)


def is_adapter_key(key: str) -> bool:
    """Whether a state-dict key is an adapter weight (``lora_A``, ``lora_B`` …)."""
    return ".lora_" in key


def without_adapters(encoder: nn.Module, merge: bool) -> nn.Module:
    """A copy of ``encoder`` whose LoRA layers are replaced by their base layers, with each
    adapter's update merged into the base weights first (peft's ``LoraLayer.merge``) or not: the
    plain encoder, with the state-dict keys it had before the adapters (the fine-tuned model, or
    the base model the adapters apply to)."""
    from peft.tuners.lora import LoraLayer

    copied = copy.deepcopy(encoder)
    for name, module in list(copied.named_modules()):
        if isinstance(module, LoraLayer):
            if merge:
                module.merge()
            parent, _, child = name.rpartition(".")
            setattr(copied.get_submodule(parent) if parent else copied, child, module.get_base_layer())
    return copied


def frozen_fingerprint(module: nn.Module) -> str:
    """sha256 of the names, shapes and values of ``module``'s frozen weights (the base model an
    adapter checkpoint was trained on), named as in the plain module (peft's ``….base_layer.``
    left out): the same for adapters on any layers of the same base."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        if not is_adapter_key(name):
            digest.update(f"{name.replace('.base_layer.', '.')}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
            digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]
