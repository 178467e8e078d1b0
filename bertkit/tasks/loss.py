"""Losses that mean the same on any number of processes.

A head's loss is a mean over items (tokens, sentences, windows). With DDP each process averages
over its own items and DDP averages the processes' gradients: a mean of means, which equals the
mean over the whole global batch only when every process holds as many items. Token counts
differ from batch to batch, so N processes would train another model than one process with the
same global batch. ``mean_over_processes`` divides each process's sum by the global count (one
all-reduce of a scalar per loss term), as transformers' ``Trainer`` does with
``average_tokens_across_devices``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def mean_over_processes(total: torch.Tensor, count: torch.Tensor | int, across: bool = True) -> torch.Tensor:
    """The share of this process in the mean over every process's items.

    Args:
        total: this process's sum of the items' losses (a scalar tensor; its gradient flows).
        count: this process's number (or total weight) of items (a scalar; no gradient).
        across: average over processes. Pass the head's ``self.training``: only training steps
            run in lockstep on every process (evaluation shares may differ by a batch, and a
            process waiting in an all-reduce that another never reaches would hang).

    Returns:
        ``total / count`` in one process (0 when ``count`` is 0, with ``total``'s graph; no
        host synchronisation); under
        ``torch.distributed`` with ``across``, ``total * world_size / sum of every process's
        count``, so that DDP's average of the processes' losses (and gradients) is the mean
        over all their items: what one process computes on the whole global batch.
    """
    count = torch.as_tensor(count, device=total.device).detach().to(total.dtype)
    if across and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        count = count.clone()
        dist.all_reduce(count)
        return total * dist.get_world_size() / count.clamp(min=1e-12)
    return total / count.clamp(min=1e-12)  # no items: total is 0, and so is the mean
