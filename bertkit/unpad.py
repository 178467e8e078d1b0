"""Unpadded ("packed") token layout and the attention that runs on it.

A padded batch (B, T) of which only N tokens are real is run through the encoder as one
(N, H) tensor: padding is removed once after the input ids are read and never computed on (the
design of MosaicBERT, Portes et al. 2023, and ModernBERT, Warner et al. 2024). Attention then
needs the sequence boundaries, given FlashAttention-style as cumulative lengths ``cu_seqlens``.

On CUDA with fp16/bf16 inputs and no attention dropout, attention is
``torch.nn.attention.varlen.varlen_attn`` (FlashAttention over the packed tokens, torch >= 2.9).
Everywhere else (the CPU, fp32, attention dropout in training, an older torch) it is an exact
fallback: re-pad queries, keys and values to (B, A, T, D), run ``scaled_dot_product_attention``
with the key-padding mask, and keep the real rows: the same arithmetic as the padded encoder.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

try:  # torch >= 2.9
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # pragma: no cover - older torch: the exact fallback only
    varlen_attn = None


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
    """

    indices: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    batch_size: int
    seq_len: int

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor) -> Unpadded:
        """Layout of a (B, T) mask, 1/True at real tokens (two device-to-host syncs: the shortest
        and longest lengths, and ``nonzero`` for N).

        Raises:
            ValueError: a sequence has no real token (an empty row cannot be attended over).
        """
        mask = attention_mask.bool()
        lengths = mask.sum(1, dtype=torch.int32)  # (B,)
        stats = torch.stack([lengths.min(), lengths.max()]).tolist()
        if stats[0] == 0:
            raise ValueError("attention_mask has a row with no real token")
        cu = F.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))  # (B + 1,)
        indices = mask.flatten().nonzero().squeeze(1)  # (N,)
        return cls(indices, cu, int(stats[1]), mask.shape[0], mask.shape[1])

    @classmethod
    def full(cls, batch_size: int, seq_len: int, device: torch.device) -> Unpadded:
        """The layout of a batch without padding (no mask given)."""
        cu = torch.arange(0, (batch_size + 1) * seq_len, seq_len, dtype=torch.int32, device=device)
        return cls(torch.arange(batch_size * seq_len, device=device), cu, seq_len, batch_size, seq_len)

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

    def key_mask(self) -> torch.Tensor:
        """(B, 1, 1, T) boolean mask, True at real keys (for the padded fallback)."""
        mask = torch.zeros(self.batch_size * self.seq_len, dtype=torch.bool, device=self.indices.device)
        mask[self.indices] = True
        return mask.view(self.batch_size, 1, 1, self.seq_len)


def use_varlen(q: torch.Tensor, dropout_p: float) -> bool:
    """Whether FlashAttention varlen can run this exactly: CUDA, fp16/bf16, no dropout."""
    return varlen_attn is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and dropout_p == 0.0


def packed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: Unpadded,
    key_mask: torch.Tensor | None,
    dropout_p: float = 0.0,
    cls_only: bool = False,
    window: int | None = None,
) -> torch.Tensor:
    """Attention of packed sequences; each token attends to the real tokens of its sequence
    (those at most ``window`` positions away, for a local layer).

    Args:
        q: (N, A, D) queries, or (B, A, D) with ``cls_only`` (one query per sequence).
        k, v: (N, A, D) keys and values.
        layout: the packing of the batch.
        key_mask: ``layout.key_mask()`` (computed once per batch), for the fallback; with
            ``window``, the (B, 1, T, T) key mask and band.
        dropout_p: attention-probability dropout (forces the fallback when > 0).
        cls_only: ``q`` holds only each sequence's first token.
        window: sliding-window attention: FlashAttention's ``window_size=(window, window)``
            (the fallback reads the band from ``key_mask``); None attends to the whole sequence.

    Returns:
        (N, A, D), or (B, A, D) with ``cls_only``.
    """
    B = layout.batch_size
    if use_varlen(q, dropout_p):
        if cls_only:
            cu_q = torch.arange(B + 1, dtype=torch.int32, device=q.device)
            return varlen_attn(q, k, v, cu_q, layout.cu_seqlens, 1, layout.max_seqlen)
        cu, longest = layout.cu_seqlens, layout.max_seqlen
        if window is not None:
            return varlen_attn(q, k, v, cu, cu, longest, longest, window_size=(window, window))
        return varlen_attn(q, k, v, cu, cu, longest, longest)
    kp, vp = (layout.pad(t).transpose(1, 2) for t in (k, v))  # (B, A, T, D)
    qp = q.unsqueeze(2) if cls_only else layout.pad(q).transpose(1, 2)  # (B, A, 1 or T, D)
    if key_mask is None:
        key_mask = layout.key_mask()
    y = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=key_mask, dropout_p=dropout_p)  # (B, A, T', D)
    return y.squeeze(2) if cls_only else layout.unpad(y.transpose(1, 2))
