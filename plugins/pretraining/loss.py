"""Masked-LM cross-entropy fused with the tied decoder's product, for float32 training.

``F.cross_entropy(F.linear(h, W, b), y)`` keeps the (M, V) logits, writes their log-softmax
(M x V), and in backward fills an (M, V) zero gradient for the picked entries and writes the
log-softmax's gradient (M x V) before the decoder's two products read it. At pre-training's
sizes (M = 15 % of the batch's tokens, V = 29-31 k) each of these tensors is tens to hundreds of
MB; on the CPU that is past glibc's largest mmap threshold (32 MB), so each is fresh memory whose
pages fault in on first touch. Here the logits are written into one reused buffer, turned into
exp(z - max z) in place, and the backward scales that same buffer into the gradient
softmax(z) - onehot(y) (the identity used by Liger Kernel's fused linear cross-entropy, Hsu et
al. 2024): one (M, V) tensor in all. The loss is the same function, to float32 rounding.
"""

from __future__ import annotations

import torch
from torch.autograd.function import FunctionCtx


class LogitsBuffer:
    """The (M, V) float32 buffer the fused loss writes into, kept between steps and grown on demand.

    Not a module buffer (nothing in the state dict): it only spares re-allocating the largest
    tensor of a pre-training step. A step's backward reads it; autograd's version counter makes a
    second backward through a step's graph after a later forward an error, not a wrong gradient.
    """

    def __init__(self) -> None:
        self._storage: torch.Tensor | None = None

    def take(self, rows: int, columns: int, like: torch.Tensor) -> torch.Tensor:
        """A (rows, columns) view on ``like``'s device and dtype (its contents undefined)."""
        needed = rows * columns
        storage = self._storage
        if storage is None or storage.numel() < needed or storage.device != like.device or storage.dtype != like.dtype:
            storage = self._storage = torch.empty(needed, device=like.device, dtype=like.dtype)
        return storage[:needed].view(rows, columns)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        target: torch.Tensor,
        buffer: LogitsBuffer,
    ) -> torch.Tensor:
        logits = torch.addmm(bias, hidden, weight.t(), out=buffer.take(len(hidden), len(weight), hidden))
        picked = logits.gather(1, target[:, None]).squeeze(1)  # (M,)
        top = logits.amax(1, keepdim=True)  # (M, 1)
        exp = logits.sub_(top).exp_()  # (M, V), in place
        total = exp.sum(1)  # (M,)
        ctx.save_for_backward(hidden, weight, exp, target, total)
        return total.log() + top.squeeze(1) - picked

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, exp, target, total = ctx.saved_tensors
        # d loss_i / d z_ij = softmax(z_i)_j - [j = y_i], times the incoming grad_i; in place
        delta = exp.mul_((grad / total)[:, None])
        delta.index_put_((torch.arange(len(target), device=target.device), target), -grad, accumulate=True)
        needs = ctx.needs_input_grad
        return (
            delta @ weight if needs[0] else None,
            delta.t() @ hidden if needs[1] else None,
            delta.sum(0) if needs[2] else None,
            None,
            None,
        )


def linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, target: torch.Tensor, buffer: LogitsBuffer
) -> torch.Tensor:
    """Per-row cross-entropy of ``hidden @ weight.T + bias`` against ``target``, without keeping
    the logits: ``F.cross_entropy(F.linear(hidden, weight, bias), target, reduction="none")``.

    Args:
        hidden: (M, H), M >= 1.
        weight: (V, H), the decoder (BERT: the tied word embeddings).
        bias: (V,).
        target: (M,) class indices in [0, V); no ignored index.
        buffer: where the (M, V) logits are written (reused across calls).

    Returns:
        (M,) losses in nats, differentiable in ``hidden``, ``weight`` and ``bias`` (once: the
        backward turns the buffer into the gradient in place).
    """
    return _LinearCrossEntropy.apply(hidden, weight, bias, target, buffer)
