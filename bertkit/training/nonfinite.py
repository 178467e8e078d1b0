"""The stop on a training loss that is not finite, without a host synchronisation in every step.

One such step would make every weight NaN. Reading the loss on the host in every step (``bool``,
``float``) makes a GPU's host wait for the step's kernels each time; here the check stays on the
device: a flag that, once set, stays set, handed to the fused AdamW as its ``found_inf`` (the
argument ``torch.amp.GradScaler`` passes: the kernel leaves parameters and moments as they are and
takes the step count back). From the first bad step on no step changes the weights, so the run
can read the flag later — every ``trainer.log_every_n_steps`` steps, before a checkpoint is
saved, before validation and at the end of training — and stop there with the weights as they
were before the bad step. Where the optimizer cannot skip a step on the device (not fused, or a
``GradScaler`` that sets ``found_inf`` itself under ``16-mixed``), the flag is read every step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class NonFiniteLoss:
    """A training loss that was not finite, tracked on the loss's device.

    ``update`` each training step (after the loss, before the optimizer step), ``check`` where
    the run may stop."""

    def __init__(self) -> None:
        self.found: torch.Tensor | None = None  # () float32: 1.0 once a step's loss was not finite
        self.first_step: torch.Tensor | None = None  # () int64: that step (-1: none)
        self.value: torch.Tensor | None = None  # () float32: its loss on this process

    def update(self, loss: torch.Tensor, step: int, optimizer: torch.optim.Optimizer | None) -> bool:
        """Record this step's loss. With every process's flag (an all-reduce on the device under
        ``torch.distributed``: all skip together). Hands the flag to ``optimizer`` as
        ``found_inf`` when it can skip on the device (fused Adam/AdamW); returns whether it could
        (False: ``check`` now)."""
        loss = loss.detach().float()
        bad = (~torch.isfinite(loss)).float()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if self.found is None:
            self.found, self.first_step = bad, torch.full((), -1, dtype=torch.int64, device=loss.device)
            self.value = torch.zeros((), device=loss.device)
        new = (bad > 0) & (self.first_step < 0)
        self.first_step = torch.where(new, step, self.first_step)
        self.value = torch.where(new, loss, self.value)
        self.found = torch.maximum(self.found, bad)
        if optimizer is None or not optimizer.defaults.get("fused"):
            return False
        optimizer.found_inf = self.found  # read by the fused kernel after the closure ran
        return True

    def check(self, step: int) -> None:
        """One host read of the flag.

        Raises:
            FloatingPointError: a step's loss was not finite (its step and value named).
        """
        if self.found is None or not bool(self.found):
            return
        first = int(self.first_step)
        skipped = f"; the {step - first} steps since were skipped" if step > first + 1 else ""
        raise FloatingPointError(
            f"training loss is not finite ({float(self.value)} on this process) at step {first}{skipped}; stopped "
            "with the weights as they were before it. Check the data for extreme or non-finite labels, or lower "
            "model.learning_rate"
        )
