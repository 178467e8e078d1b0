"""Unpadded ("packed") token layout and the attention that runs on it.

A padded batch (B, T) of which only N tokens are real is run through the encoder as one
(N, H) tensor: padding is removed once after the input ids are read and never computed on (the
design of MosaicBERT, Portes et al. 2023, and ModernBERT, Warner et al. 2024). Attention then
needs the sequence boundaries, given FlashAttention-style as cumulative lengths ``cu_seqlens``.

Attention never runs on padding either; ``route`` picks one of three exact implementations:

- ``varlen``: ``torch.nn.attention.varlen.varlen_attn`` (FlashAttention over the packed tokens,
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
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

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
class Group:
    """Sequences of similar length attended together: their indices (G,), packed rows (M,) in
    group order, and the layout of the group padded to its longest."""

    sequences: torch.Tensor
    rows: torch.Tensor
    layout: Unpadded


@dataclass
class Unpadded:
    """Where the real tokens of a padded (B, T) batch sit in the packed (N, ...) layout.

    Tokens keep their row-major order, so each sequence's tokens are contiguous: sequence b
    holds packed rows ``cu_seqlens[b]:cu_seqlens[b + 1]``.

    Attributes:
        indices: (N,) flat position ``b * T + t`` of each real token.
        cu_seqlens: (B + 1,) int32 cumulative real lengths, starting at 0.
        max_seqlen: longest real length in the batch.
        batch_size: B.
        seq_len: T.
        offsets: ``cu_seqlens`` as Python ints (read once per batch, for the length groups).
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

    @property
    def first_rows(self) -> torch.Tensor:
        """(B,) packed row of each sequence's first token (``[CLS]``)."""
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
    def key_mask(self) -> torch.Tensor:
        """(B, 1, 1, T) boolean mask, True at real keys (for the padded route; made once per batch)."""
        mask = torch.zeros(self.batch_size * self.seq_len, dtype=torch.bool, device=self.indices.device)
        mask[self.indices] = True
        return mask.view(self.batch_size, 1, 1, self.seq_len)

    @cached_property
    def groups(self) -> list[Group]:
        """The sequences sorted by length (longest first) and cut into groups in which padding to
        the group's longest stays within ``GROUP_PADDING`` of the group's attention work
        (Σ longest² against Σ t²); made once per batch, on the CPU route."""
        lengths = self.lengths
        order = sorted(range(len(lengths)), key=lambda b: -lengths[b])
        device = self.indices.device
        out, start = [], 0
        while start < len(order):
            end, top, work = start + 1, lengths[order[start]], lengths[order[start]] ** 2
            while end < len(order) and (end + 1 - start) * top**2 <= (1 + GROUP_PADDING) * (
                work + lengths[order[end]] ** 2
            ):
                work += lengths[order[end]] ** 2
                end += 1
            members = order[start:end]
            mask = torch.tensor([[1] * lengths[b] + [0] * (top - lengths[b]) for b in members], device=device)
            rows = torch.cat([torch.arange(self.offsets[b], self.offsets[b + 1], device=device) for b in members])
            out.append(Group(torch.tensor(members, device=device), rows, Unpadded.from_mask(mask)))
            start = end
        return out


def route(q: torch.Tensor, dropout_p: float) -> str:
    """Which exact attention runs on these packed queries (see the module docstring):
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
def packed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: Unpadded,
    dropout_p: float = 0.0,
    cls_only: bool = False,
    window: int | None = None,
) -> torch.Tensor:
    """Attention of packed sequences; each token attends to the real tokens of its sequence
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


def padded_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: Unpadded,
    dropout_p: float,
    cls_only: bool,
    window: int | None,
) -> torch.Tensor:
    """One SDPA over (B, A, T, D) re-padded queries, keys and values with the key-padding mask
    (``packed_attention``'s arguments and result)."""
    kp, vp = (layout.pad(t).transpose(1, 2) for t in (k, v))  # (B, A, T, D)
    qp = q.unsqueeze(2) if cls_only else layout.pad(q).transpose(1, 2)  # (B, A, 1 or T, D)
    T = layout.seq_len
    mask = None if min(layout.lengths) == T else layout.key_mask  # (B, 1, 1, T); None: no padding
    if window is not None:  # a padding query sees itself, so that no row is fully masked (NaN gradients)
        eye = torch.eye(T, dtype=torch.bool, device=q.device)
        mask = band(T, window, q.device) if mask is None else (mask & band(T, window, q.device)) | eye
        mask = mask[..., :1, :] if cls_only else mask
    with sdpa_kernel(ANY_BACKEND if mask is None else WITHOUT_CUDNN):
        y = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, dropout_p=dropout_p)  # (B, A, T', D)
    return y.squeeze(2) if cls_only else layout.unpad(y.transpose(1, 2))


def grouped_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: Unpadded,
    dropout_p: float,
    cls_only: bool,
    window: int | None,
) -> torch.Tensor:
    """One padded SDPA per group of similar lengths (``Unpadded.groups``; ``packed_attention``'s
    arguments and result)."""
    groups = layout.groups
    if len(groups) == 1:
        return padded_attention(q, k, v, layout, dropout_p, cls_only, window)
    out = [
        padded_attention(
            q[g.sequences] if cls_only else q[g.rows], k[g.rows], v[g.rows], g.layout, dropout_p, cls_only, window
        )
        for g in groups
    ]
    order = torch.cat([g.sequences if cls_only else g.rows for g in groups])
    return torch.cat(out)[torch.argsort(order)]
