"""The unpadded (varlen) token layout and the attention that runs on it.

A padded batch (B, T) of which only N tokens are real is run through the encoder as one
(N, H) tensor: padding is removed once after the input ids are read and never computed on (the
design of MosaicBERT, Portes et al. 2023, and ModernBERT, Warner et al. 2024). Attention then
needs the sequence boundaries, given FlashAttention-style as cumulative lengths ``cu_seqlens``.

Attention never runs on padding either; ``route`` picks one of three exact implementations:

- ``varlen``: ``torch.nn.attention.varlen.varlen_attn`` (FlashAttention over the unpadded tokens,
  torch >= 2.9) on CUDA with fp16/bf16 inputs and no attention dropout;
- ``padded``: on CUDA otherwise (attention dropout in training, fp32): queries, keys and values
  re-padded to (B, A, T, D) and one ``scaled_dot_product_attention`` with the key-padding mask
  (and the window's band; no mask when nothing is padded), real rows kept, cuDNN's attention
  left out when there is a mask (below). On an H100 this trained BERT-base faster per step than
  SDPA over nested jagged tensors, which reach FlashAttention's varlen kernel with dropout
  (``benchmarks/results/gpu_vs_transformers_jagged.json``: 1.4-3.6x slower than padded);
- ``grouped``: on the CPU, the batch's sequences sorted by length and cut into groups whose
  padding adds at most ``GROUP_PADDING`` of their attention work, one padded SDPA per group:
  about Σ t² attention work (and dropout draws) instead of B · max(t)². Chosen by measurement
  (``benchmarks/attention_routes.py``) over re-padding the whole batch, one SDPA per run of
  equal lengths, and nested jagged tensors.

Both padded routes gather the unpadded rows into their blocks with one index per tensor (a padding
position repeats a real row: it is masked as a key and dropped as a query) and read the
gradient back through the inverse index (``Gather``); a batch without padding (one sequence, or
equal lengths) is one block as it stands and gathers nothing. With attention dropout on the CPU the
attention is SDPA's math with ``bertkit.model.dropout`` (``attend``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bertkit.model.dropout import dropout

# With a padding mask, cuDNN's attention spent ~2.8 ms of host time per call on an H100 (torch
# 2.11, profiled); without it bertkit's BERT-base training steps with attention dropout went from
# 83 to 54 ms on SST-2 and 139 to 65 ms on SQuAD (benchmarks/results/gpu_vs_transformers.json,
# then gpu_vs_transformers_padded.json). A batch without padding needs no mask: every backend.
WITHOUT_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
ANY_BACKEND = [SDPBackend.CUDNN_ATTENTION, *WITHOUT_CUDNN]

try:  # torch >= 2.9
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # pragma: no cover - older torch: the exact fallback only
    varlen_attn = None


GROUP_PADDING = 0.2  # padded attention work a group may add, as a share of its real work


@dataclass
class Block:
    """Sequences attended together, padded to the longest of them: ``count`` sequences of
    ``seq_len`` positions, and their (count, 1, 1, seq_len) key mask (True at real keys; None
    when none is padded)."""

    count: int
    seq_len: int
    key_mask: torch.Tensor | None


@dataclass
class Blocks:
    """Packed rows (N, ...) gathered into padded blocks of sequences (one SDPA each) and back.

    Attributes:
        blocks: the blocks, in the order their rows are laid out.
        gather: (M,) unpadded row of each position of the blocks, block after block, each
            (count, seq_len) row-major. A padding position holds its block's first row: it is a
            masked key and a dropped query, so it adds nothing to outputs or gradients (exactly 0).
        scatter: (N,) position in the blocks of each unpadded row.
        sequences: (B,) the sequences in block order (the queries of ``cls_only``).
        sequence_order: (B,) position in ``sequences`` of each sequence.
        identity: one block of every sequence in batch order, none padded: the unpadded rows are
            the block as they are, and ``blocked_attention`` gathers nothing (a batch of one
            sequence, or of equal lengths).
    """

    blocks: list[Block]
    gather: torch.Tensor
    scatter: torch.Tensor
    sequences: torch.Tensor
    sequence_order: torch.Tensor
    identity: bool

    @classmethod
    def of(cls, members: list[list[int]], offsets: tuple[int, ...], device: torch.device) -> Blocks:
        """Blocks of the given sequences (indices into the batch, per block) of a packing whose
        sequence b holds rows ``offsets[b]:offsets[b + 1]``."""
        blocks, gather, scatter = [], [], [0] * offsets[-1]
        for seqs in members:
            lengths = [offsets[b + 1] - offsets[b] for b in seqs]
            T = max(lengths)
            for b, n in zip(seqs, lengths, strict=True):
                scatter[offsets[b] : offsets[b] + n] = range(len(gather), len(gather) + n)
                gather += range(offsets[b], offsets[b] + n)
                gather += [offsets[seqs[0]]] * (T - n)
            padded = min(lengths) < T
            key_mask = torch.tensor([[t < n for t in range(T)] for n in lengths], device=device)
            blocks.append(Block(len(seqs), T, key_mask[:, None, None, :] if padded else None))
        sequences = [b for seqs in members for b in seqs]
        order = sorted(range(len(sequences)), key=sequences.__getitem__)
        identity = len(blocks) == 1 and blocks[0].key_mask is None and sequences == order

        def as_tensor(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=device)

        return cls(blocks, as_tensor(gather), as_tensor(scatter), as_tensor(sequences), as_tensor(order), identity)

    @property
    def sizes(self) -> list[int]:
        """Rows of each block (count * seq_len)."""
        return [b.count * b.seq_len for b in self.blocks]


@dataclass
class Unpadded:
    """Where the real tokens of a padded (B, T) batch sit in the unpadded (N, ...) layout.

    Tokens keep their row-major order, so each sequence's tokens are contiguous: sequence b
    holds unpadded rows ``cu_seqlens[b]:cu_seqlens[b + 1]``.

    Attributes:
        indices: (N,) flat position ``b * T + t`` of each real token.
        cu_seqlens: (B + 1,) int32 cumulative real lengths, starting at 0.
        max_seqlen: longest real length in the batch.
        batch_size: B.
        seq_len: T.
        offsets: ``cu_seqlens`` as Python ints (read once per batch, for the blocks of attention).
    """

    indices: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    batch_size: int
    seq_len: int
    offsets: tuple[int, ...]

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor) -> Unpadded:
        """Layout of a (B, T) mask, 1/True at real tokens (two device-to-host syncs: the lengths,
        and ``nonzero`` for N).

        Raises:
            ValueError: a sequence has no real token (an empty row cannot be attended over).
        """
        mask = attention_mask.bool()
        lengths = mask.sum(1, dtype=torch.int32)  # (B,)
        cu = F.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))  # (B + 1,)
        offsets = tuple(cu.tolist())
        sizes = [b - a for a, b in pairwise(offsets)]
        if min(sizes) == 0:
            raise ValueError("attention_mask has a row with no real token")
        indices = mask.flatten().nonzero().squeeze(1)  # (N,)
        return cls(indices, cu, max(sizes), mask.shape[0], mask.shape[1], offsets)

    @classmethod
    def full(cls, batch_size: int, seq_len: int, device: torch.device) -> Unpadded:
        """The layout of a batch without padding (no mask given)."""
        offsets = tuple(range(0, (batch_size + 1) * seq_len, seq_len))
        cu = torch.tensor(offsets, dtype=torch.int32, device=device)
        return cls(torch.arange(batch_size * seq_len, device=device), cu, seq_len, batch_size, seq_len, offsets)

    @classmethod
    def of(cls, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> Unpadded:
        """The layout of a (B, T) batch: the one its loader computed when that mask is the batch's
        within ``given_layout``, else ``from_mask`` of its mask; ``full`` without one.

        Raises:
            ValueError: see ``from_mask``.
        """
        if attention_mask is None:
            return cls.full(input_ids.shape[0], input_ids.shape[1], input_ids.device)
        given = _GIVEN.get()
        if given is not None and given[0] is attention_mask:
            return given[1]
        return cls.from_mask(attention_mask)

    @property
    def first_rows(self) -> torch.Tensor:
        """(B,) unpadded row of each sequence's first token (``[CLS]``)."""
        return self.cu_seqlens[:-1].long()

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...): the real tokens."""
        return x.flatten(0, 1)[self.indices]

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...), zeros at padding."""
        out = x.new_zeros((self.batch_size * self.seq_len, *x.shape[1:]))
        out[self.indices] = x  # index_put: differentiable
        return out.view(self.batch_size, self.seq_len, *x.shape[1:])

    def rows(self, mask: torch.Tensor) -> torch.Tensor:
        """Packed rows (M,) of the positions where a (B, T) mask is True, in row-major order
        (the order of ``padded[mask]``). The mask must be True at real tokens only."""
        where = torch.full((self.batch_size * self.seq_len,), -1, dtype=torch.long, device=self.indices.device)
        where[self.indices] = torch.arange(len(self.indices), device=self.indices.device)
        return where[mask.flatten()]

    @cached_property
    def lengths(self) -> list[int]:
        """(B,) real length of each sequence, as Python ints (made once per batch)."""
        return [b - a for a, b in pairwise(self.offsets)]

    @cached_property
    def whole(self) -> Blocks:
        """One block: the batch padded to its longest sequence (made once per batch)."""
        return Blocks.of([list(range(self.batch_size))], self.offsets, self.indices.device)

    @cached_property
    def groups(self) -> Blocks:
        """The sequences sorted by length (longest first) and cut into blocks in which padding to
        the block's longest stays within ``GROUP_PADDING`` of the block's attention work
        (Σ longest² against Σ t²); made once per batch, on the CPU route."""
        lengths = self.lengths
        order = sorted(range(len(lengths)), key=lambda b: -lengths[b])
        members, start = [], 0
        while start < len(order):
            end, top, work = start + 1, lengths[order[start]], lengths[order[start]] ** 2
            while end < len(order) and (end + 1 - start) * top**2 <= (1 + GROUP_PADDING) * (
                work + lengths[order[end]] ** 2
            ):
                work += lengths[order[end]] ** 2
                end += 1
            members.append(order[start:end])
            start = end
        return Blocks.of(members, self.offsets, self.indices.device)


LAYOUT_KEYS = ("unpad_indices", "cu_seqlens", "seq_offsets")
"""The batch keys ``with_layout`` adds."""

_GIVEN: ContextVar[tuple[torch.Tensor, Unpadded] | None] = ContextVar("bertkit_given_layout", default=None)


def with_layout(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` with the unpadded layout of its (B, T) ``attention_mask`` (``Unpadded.from_mask``)
    as ``unpad_indices`` (N,), ``cu_seqlens`` (B + 1,) int32 and ``seq_offsets`` (a tuple of
    ints): computed where the batch is collated (the loader's workers, on the host), so that on a
    GPU the model reads the layout without waiting for the device (``given_layout``).

    Raises:
        ValueError: a row with no real token.
    """
    layout = Unpadded.from_mask(batch["attention_mask"])
    batch["unpad_indices"], batch["cu_seqlens"], batch["seq_offsets"] = (
        layout.indices,
        layout.cu_seqlens,
        layout.offsets,
    )
    return batch


@contextmanager
def given_layout(batch: dict[str, Any]) -> Iterator[None]:
    """Within it, ``Unpadded.of`` of this batch's ``attention_mask`` (the same tensor) is the layout
    ``with_layout`` stored in the batch (moved to the device with it); a batch without one, or
    another mask (a head that built its own), is laid out from its mask as before."""
    if "cu_seqlens" not in batch:
        yield
        return
    mask, offsets = batch["attention_mask"], tuple(batch["seq_offsets"])
    longest = max(b - a for a, b in pairwise(offsets))
    layout = Unpadded(batch["unpad_indices"], batch["cu_seqlens"], longest, mask.shape[0], mask.shape[1], offsets)
    token = _GIVEN.set((mask, layout))
    try:
        yield
    finally:
        _GIVEN.reset(token)


def route(q: torch.Tensor, dropout_p: float) -> str:
    """Which exact attention runs on these unpadded queries (see the module docstring):
    ``"varlen"``, ``"padded"`` or ``"grouped"``."""
    if not q.is_cuda:
        return "grouped"
    if varlen_attn is not None and q.dtype in (torch.float16, torch.bfloat16) and dropout_p == 0.0:
        return "varlen"
    return "padded"


def band(length: int, window: int, device: torch.device) -> torch.Tensor:
    """(length, length) boolean mask of a sliding window: query i sees keys i - window … i + window
    (FlashAttention's ``window_size=(window, window)``)."""
    offset = torch.arange(length, device=device)
    return (offset[None, :] - offset[:, None]).abs() <= window


@torch.compiler.disable
def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: Unpadded,
    dropout_p: float = 0.0,
    cls_only: bool = False,
    window: int | None = None,
) -> torch.Tensor:
    r"""Attention of unpadded sequences; each token attends to the real tokens of its sequence
    (those at most ``window`` positions away, for a local layer). It runs eagerly inside a
    ``torch.compile``\ d block (the projections and MLP around it are compiled): its route reads
    the batch's lengths on the host, so compiled it would recompile for every new batch layout.

    Args:
        q: (N, A, D) queries, or (B, A, D) with ``cls_only`` (one query per sequence).
        k, v: (N, A, D) keys and values.
        layout: the packing of the batch.
        dropout_p: attention-probability dropout (training).
        cls_only: ``q`` holds only each sequence's first token.
        window: sliding-window attention (keys at most ``window`` positions either side);
            None attends to the whole sequence.

    Returns:
        (N, A, D), or (B, A, D) with ``cls_only``.
    """
    how = route(q, dropout_p)
    if how == "varlen":
        B, cu, longest = layout.batch_size, layout.cu_seqlens, layout.max_seqlen
        if cls_only:
            cu_q = torch.arange(B + 1, dtype=torch.int32, device=q.device)
            return varlen_attn(q, k, v, cu_q, cu, 1, longest)
        if window is not None:
            return varlen_attn(q, k, v, cu, cu, longest, longest, window_size=(window, window))
        return varlen_attn(q, k, v, cu, cu, longest, longest)
    if how == "padded":
        return padded_attention(q, k, v, layout, dropout_p, cls_only, window)
    return grouped_attention(q, k, v, layout, dropout_p, cls_only, window)


class Gather(torch.autograd.Function):
    """``x[index]`` whose gradient is ``grad[inverse]``: each row of ``x`` sits once at
    ``inverse`` in the output, and every other output position (padding: a masked key, a dropped
    query) gets exactly zero gradient, so reading the gradient back is exact and avoids the
    zero-filled accumulating scatter of ``x[index]``'s own backward (measured ~8 % of a MiniLM
    NER training step)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(inverse)
        return x[index]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (inverse,) = ctx.saved_tensors
        return grad[inverse], None, None


def padded_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: Unpadded,
    dropout_p: float,
    cls_only: bool,
    window: int | None,
) -> torch.Tensor:
    """One SDPA over the batch re-padded to its longest sequence ((B, A, T, D) queries, keys and
    values), with the key-padding mask (``varlen_attention``'s arguments and result)."""
    return blocked_attention(q, k, v, layout.whole, dropout_p, cls_only, window)


def grouped_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: Unpadded,
    dropout_p: float,
    cls_only: bool,
    window: int | None,
) -> torch.Tensor:
    """One padded SDPA per group of similar lengths (``Unpadded.groups``; ``varlen_attention``'s
    arguments and result)."""
    return blocked_attention(q, k, v, layout.groups, dropout_p, cls_only, window)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float
) -> torch.Tensor:
    """Scaled dot-product attention of (G, A, T', D) queries over (G, A, T, D) keys and values,
    ``mask`` (broadcast to (G, A, T', T), True = attend) or None. With attention dropout on the
    CPU it runs SDPA's math (softmax(q kᵀ / √D), dropout, @ v) with ``bertkit.model.dropout``: torch's
    SDPA would use the per-element ``bernoulli_`` that ``bertkit.model.dropout`` avoids."""
    if dropout_p and q.device.type == "cpu":
        scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-1, -2)  # (G, A, T', T)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return dropout(scores.softmax(-1), dropout_p) @ v
    with sdpa_kernel(ANY_BACKEND if mask is None else WITHOUT_CUDNN):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


def blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    plan: Blocks,
    dropout_p: float,
    cls_only: bool,
    window: int | None,
) -> torch.Tensor:
    """One SDPA per block of ``plan``: keys and values (and queries) gathered once into the
    padded blocks, the outputs gathered back (``varlen_attention``'s other arguments and result;
    a padding query sees itself under a window, so that no row is fully masked)."""
    if plan.identity:  # nothing to gather: one block, the rows in order
        return _attend_block(q, k, v, plan.blocks[0], dropout_p, cls_only, window)
    keys, values = (Gather.apply(t, plan.gather, plan.scatter) for t in (k, v))  # (M, A, D)
    if cls_only:
        queries = Gather.apply(q, plan.sequences, plan.sequence_order)  # (B, A, D)
    else:
        queries = Gather.apply(q, plan.gather, plan.scatter)  # (M, A, D)
    query_sizes = [b.count for b in plan.blocks] if cls_only else plan.sizes
    out = [
        _attend_block(qb, kb, vb, block, dropout_p, cls_only, window)
        for block, qb, kb, vb in zip(
            plan.blocks, queries.split(query_sizes), keys.split(plan.sizes), values.split(plan.sizes), strict=True
        )
    ]
    return torch.cat(out)[plan.sequence_order if cls_only else plan.scatter]


def _attend_block(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block: Block,
    dropout_p: float,
    cls_only: bool,
    window: int | None,
) -> torch.Tensor:
    """Attention within one block: its (count * seq_len, A, D) keys and values, and as many
    queries ((count, A, D) with ``cls_only``), row-major by sequence; returns the queries' shape."""
    G, T = block.count, block.seq_len
    A, D = k.shape[1:]
    kp, vp = (t.view(G, T, A, D).transpose(1, 2) for t in (k, v))  # (G, A, T, D)
    qp = q.unsqueeze(2) if cls_only else q.view(G, T, A, D).transpose(1, 2)  # (G, A, 1 or T, D)
    mask = block.key_mask  # (G, 1, 1, T) or None
    if window is not None:
        near = band(T, window, q.device)
        mask = near if mask is None else (mask & near) | torch.eye(T, dtype=torch.bool, device=q.device)
        mask = mask[..., :1, :] if cls_only else mask
    y = attend(qp, kp, vp, mask, dropout_p)  # (G, A, T', D)
    return y.squeeze(2) if cls_only else y.transpose(1, 2).reshape(G * T, A, D)
