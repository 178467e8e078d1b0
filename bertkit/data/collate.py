"""Collation: features of any task into a dynamically padded batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from bertkit.model.unpadded import with_layout
from bertkit.tasks.task import Batch, Feature

# Padding values of the list keys the core knows (input_ids pads with the tokenizer's pad id);
# -100 is ignored by cross-entropy, -1 is no word. Any other list key is padded with the value
# its task declares in ``Task.pad_values``.
PAD_VALUES = {"token_type_ids": 0, "labels": -100, "word_index": -1}


def pad_batch(features: Sequence[Feature], pad_token_id: int = 0, pad_values: Mapping[str, int] | None = None) -> Batch:
    """Collate features: pad list-valued keys to their longest in the batch, stack numbers, keep
    other values (such as the example a feature came from) as a list.

    Adds ``attention_mask`` (B, T), 1 for real tokens. A list key becomes a (B, longest) tensor
    padded with ``pad_token_id`` for ``input_ids``, ``PAD_VALUES`` for the core's keys and
    ``pad_values`` (the task's ``Task.pad_values``) for any other (lists of equal length, such as
    multi-hot labels, are padded by nothing).

    Raises:
        ValueError: a list key that is neither the core's nor in ``pad_values`` (padding with a
            guessed value could claim a real index, such as word 0).
    """
    T = max(len(f["input_ids"]) for f in features)
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


def collate(
    features: Sequence[Feature],
    pad_token_id: int = 0,
    pad_values: Mapping[str, int] | None = None,
    layout: bool = False,
) -> Batch:
    """``pad_batch``, and with ``layout`` the batch's unpadded layout (``with_layout``: computed in
    the loader's workers, read by an unpadded encoder without waiting for the device). What the
    data module's loaders collate with."""
    batch = pad_batch(features, pad_token_id, pad_values)
    return with_layout(batch) if layout else batch
