"""Collation: features of any task into a dynamically padded batch."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import torch

from bertkit.model.unpadded import with_layout
from bertkit.tasks.task import Batch, Feature

# Padding values of the list keys the core knows (input_ids pads with the tokenizer's pad id);
# -100 is ignored by cross-entropy, -1 is no word (no position). Any other list key is padded
# with the value its task declares in ``Task.pad_values``.
PAD_VALUES = {"token_type_ids": 0, "labels": -100, "word_index": -1, "word_positions": -1}

CORE_TOKEN_KEYS = frozenset({"input_ids", "token_type_ids"})
"""The list keys that always run over the tokens (one entry per token of ``input_ids``)."""


def padded_length(longest: int, pad_to_multiple_of: int | None, max_length: int | None = None) -> int:
    """The length a batch whose longest feature has ``longest`` tokens is padded to: ``longest``
    rounded up to a multiple of ``pad_to_multiple_of`` (transformers' ``DataCollatorWithPadding``
    argument of that name), but never past ``max_length`` when ``longest`` is within it, so the
    lengths a run sees are ``m, 2m, …`` and ``max_length`` itself. None: ``longest``."""
    if not pad_to_multiple_of:
        return longest
    rounded = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    return min(rounded, max_length) if max_length is not None and longest <= max_length else rounded


def pad_batch(
    features: Sequence[Feature],
    pad_token_id: int = 0,
    pad_values: Mapping[str, int] | None = None,
    pad_to_multiple_of: int | None = None,
    token_keys: Collection[str] | None = None,
    max_length: int | None = None,
) -> Batch:
    """Collate features: pad list-valued keys to their longest in the batch, stack numbers, keep
    other values (such as the example a feature came from) as a list.

    Adds ``attention_mask`` (B, T), 1 for real tokens. A list key becomes a (B, longest) tensor
    padded with ``pad_token_id`` for ``input_ids``, ``PAD_VALUES`` for the core's keys and
    ``pad_values`` (the task's ``Task.pad_values``) for any other (lists of equal length, such as
    multi-hot labels, are padded by nothing).

    With ``pad_to_multiple_of``, T is ``padded_length`` of the longest feature (a few fixed
    lengths, so that compiled steps and CUDA graphs replay instead of recording each new length),
    and ``attention_mask``, ``input_ids``, ``token_type_ids`` and the ``token_keys`` (the task's
    ``Task.token_keys``: the keys that run over the tokens) are padded to T; other list keys are
    padded as without it.

    Raises:
        ValueError: a list key that is neither the core's nor in ``pad_values`` (padding with a
            guessed value could claim a real index, such as word 0); with ``pad_to_multiple_of``,
            a list key beyond ``input_ids`` and ``token_type_ids`` while ``token_keys`` is None
            (the task does not say which keys run over the tokens), or a token key whose length
            differs from its feature's ``input_ids``.
    """
    longest = max(len(f["input_ids"]) for f in features)
    T = padded_length(longest, pad_to_multiple_of, max_length)
    aligned = CORE_TOKEN_KEYS | set(token_keys or ())
    values = {**PAD_VALUES, "input_ids": pad_token_id, **(pad_values or {})}
    batch: Batch = {}
    for key, first in features[0].items():
        if isinstance(first, list):
            if key not in values:
                raise ValueError(
                    f"feature key {key!r} holds lists but has no padding value: declare it in the task's "
                    f"pad_values (e.g. pad_values = {{{key!r}: -1}}); the core pads only {', '.join(sorted(PAD_VALUES))}"
                )
            pad = values[key]
            if pad_to_multiple_of and token_keys is None and key not in CORE_TOKEN_KEYS:
                raise ValueError(
                    f"data.pad_to_multiple_of: feature key {key!r} holds lists, and the task does not declare its "
                    "token_keys (which list keys run over the tokens, padded with input_ids, and which do not, such "
                    "as multi-hot labels); declare them, e.g. token_keys = frozenset({'labels'})"
                )
            if pad_to_multiple_of and key in aligned:
                _check_aligned(features, key)
                n = T
            else:
                n = max(len(f[key]) for f in features)
            batch[key] = torch.tensor([f[key] + [pad] * (n - len(f[key])) for f in features])
        elif isinstance(first, (bool, int, float)):
            batch[key] = torch.tensor([f[key] for f in features])
        else:  # any other object (an example a task post-processes with) stays a plain list
            batch[key] = [f[key] for f in features]
    batch["attention_mask"] = torch.tensor(
        [[1] * len(f["input_ids"]) + [0] * (T - len(f["input_ids"])) for f in features]
    )
    return batch


def _check_aligned(features: Sequence[Feature], key: str) -> None:
    for f in features:
        if len(f[key]) != len(f["input_ids"]):
            raise ValueError(
                f"feature of example {f.get('example_index', '?')}: token key {key!r} has {len(f[key])} entries for "
                f"{len(f['input_ids'])} tokens (the task's token_keys run over the tokens, one entry per token)"
            )


def collate(
    features: Sequence[Feature],
    pad_token_id: int = 0,
    pad_values: Mapping[str, int] | None = None,
    layout: bool = False,
    pad_to_multiple_of: int | None = None,
    token_keys: Callable[[Sequence[Feature]], Collection[str] | None] | None = None,
    max_length: int | None = None,
) -> Batch:
    """``pad_batch``, and with ``layout`` the batch's unpadded layout (``with_layout``: computed in
    the loader's workers, read by an unpadded encoder without waiting for the device). What the
    data module's loaders collate with; ``token_keys`` gives the batch's (``Task.batch_token_keys``)."""
    keys = token_keys(features) if token_keys is not None and pad_to_multiple_of else None
    batch = pad_batch(features, pad_token_id, pad_values, pad_to_multiple_of, keys, max_length)
    return with_layout(batch) if layout else batch
