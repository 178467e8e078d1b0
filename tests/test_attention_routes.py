"""The exact attention routes of the unpadded encoder (``bertkit.model.unpadded``) against padded
``scaled_dot_product_attention`` with a key-padding mask, in float64: outputs and gradients, any
lengths (runs of equal lengths included), all queries or first queries only, full or sliding
window. ``padded`` is CUDA's route with dropout; it runs on the CPU too, so it is checked here on
every run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import bertkit.model.unpadded
from bertkit.model.unpadded import (
    Unpadded,
    band,
    grouped_attention,
    padded_attention,
    route,
    varlen_attention,
)


def padded_reference(q, k, v, lengths, cls_only, window):
    """(B, A, T, D) padded inputs -> (B, A, T or 1, D), padding keys masked."""
    T = q.shape[2]
    mask = torch.tensor([[1] * n + [0] * (T - n) for n in lengths], dtype=torch.bool)[:, None, None, :]
    if window is not None:
        mask = mask & band(T, window, q.device)
    if cls_only:
        q, mask = q[:, :, :1], mask[..., :1, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def compare(how, lengths, cls_only, window, seed):
    g = torch.Generator().manual_seed(seed)
    A, D, T = 2, 4, max(lengths)
    layout = Unpadded.from_mask(torch.tensor([[1] * n + [0] * (T - n) for n in lengths]))
    padded = [torch.randn(len(lengths), A, T, D, generator=g, dtype=torch.float64) for _ in range(3)]
    packed = [layout.unpad(t.transpose(1, 2)).requires_grad_() for t in padded]  # (N, A, D)
    queries = packed[0][layout.first_rows] if cls_only else packed[0]
    attention = padded_attention if how == "padded" else grouped_attention
    out = attention(queries, packed[1], packed[2], layout, 0.0, cls_only, window)
    leaves = [t.requires_grad_() for t in padded]
    reference = padded_reference(*leaves, lengths, cls_only, window)  # (B, A, T', D)
    reference = reference[:, :, 0] if cls_only else layout.unpad(reference.transpose(1, 2))
    assert out.shape == reference.shape
    assert (out - reference).abs().max() <= 1e-10
    upstream = torch.randn(out.shape, generator=g, dtype=torch.float64)
    ours = torch.autograd.grad(out, packed, upstream)
    theirs = torch.autograd.grad(reference, leaves, upstream)
    for a, b in zip(ours, theirs, strict=True):
        assert (a - layout.unpad(b.transpose(1, 2))).abs().max() <= 1e-10


lengths_lists = st.lists(st.integers(1, 12), min_size=1, max_size=8)


@pytest.mark.parametrize("how", ["padded", "grouped"])
@settings(max_examples=25, deadline=None)
@given(
    lengths=lengths_lists,
    cls_only=st.booleans(),
    window=st.one_of(st.none(), st.integers(0, 3)),
    seed=st.integers(0, 2**16),
)
def test_route_equals_padded_attention(how, lengths, cls_only, window, seed):
    compare(how, lengths, cls_only, window, seed)


def test_groups_of_similar_lengths_are_one_call_each(monkeypatch):
    """Longest first; a group grows while padding adds at most GROUP_PADDING (20 %) of its Σ t²."""
    layout = Unpadded.from_mask(torch.tensor([[1] * n + [0] * (40 - n) for n in [40, 38, 12, 11, 10, 3, 39, 2]]))
    assert layout.offsets == (0, 40, 78, 90, 101, 111, 114, 153, 155) and layout.max_seqlen == 40
    blocks = layout.groups
    assert blocks.sequences.tolist() == [0, 6, 1, 2, 3, 4, 5, 7]
    assert [(b.count, b.seq_len) for b in blocks.blocks] == [(3, 40), (3, 12), (1, 3), (1, 2)]
    assert blocks.blocks[0].key_mask.sum(-1).flatten().tolist() == [40, 39, 38]
    assert blocks.blocks[2].key_mask is None  # one sequence: nothing padded, no mask
    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda q, *a, **k: calls.append(q.shape) or sdpa(q, *a, **k))
    q = torch.randn(155, 2, 4)
    out = varlen_attention(q, q, q, layout)
    assert calls == [(3, 2, 40, 4), (3, 2, 12, 4), (1, 2, 3, 4), (1, 2, 2, 4)] and out.shape == (155, 2, 4)
    with pytest.raises(ValueError, match="no real token"):
        Unpadded.from_mask(torch.tensor([[1, 1], [0, 0]]))


@pytest.mark.parametrize("lengths", [[7], [5, 5, 5], [1, 1]])
@pytest.mark.parametrize("how", ["padded", "grouped"])
def test_a_batch_without_padding_attends_without_gathering(monkeypatch, how, lengths):
    """One sequence, or equal lengths in batch order: the rows are the block as they are, so no
    row is gathered (``Gather``) or put back, and the result is still the padded reference's."""
    layout = Unpadded.from_mask(torch.ones(len(lengths), lengths[0], dtype=torch.long))
    assert layout.whole.identity and layout.groups.identity
    monkeypatch.setattr(bertkit.model.unpadded.Gather, "apply", lambda *a: pytest.fail("gathered rows"))
    for cls_only in (False, True):
        for window in (None, 1):
            compare(how, lengths, cls_only, window, seed=len(lengths))
    padded_rows = Unpadded.from_mask(torch.tensor([[1, 1, 1], [1, 1, 0]]))
    assert not padded_rows.whole.identity and not padded_rows.groups.identity


@pytest.mark.parametrize(
    ("is_cuda", "dtype", "dropout_p", "expected"),
    [
        (True, torch.bfloat16, 0.0, "varlen"),
        (True, torch.float16, 0.0, "varlen"),
        (True, torch.bfloat16, 0.1, "padded"),  # FlashAttention varlen has no dropout
        (True, torch.float32, 0.0, "padded"),
        (False, torch.bfloat16, 0.0, "grouped"),
        (False, torch.float32, 0.1, "grouped"),
    ],
)
def test_route(is_cuda, dtype, dropout_p, expected):
    assert route(SimpleNamespace(is_cuda=is_cuda, dtype=dtype), dropout_p) == expected


def test_attention_dropout_reaches_the_kernel(monkeypatch):
    """Training with attention dropout: the probability is passed on (grouped and padded),
    outputs change with the draw and gradients flow."""
    from bertkit import BertConfig, BertModel

    seen = []
    attend = bertkit.model.unpadded.attend
    monkeypatch.setattr(bertkit.model.unpadded, "attend", lambda *a: seen.append(a[4]) or attend(*a))
    config = BertConfig.preset("tiny", vocab_size=100)
    config.hidden_dropout_prob = 0.0
    ids = torch.randint(5, 100, (3, 7))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5])
    for how in ("grouped", "padded"):
        monkeypatch.setattr(bertkit.model.unpadded, "route", lambda q, p, how=how: how)
        torch.manual_seed(0)
        encoder = BertModel(config).train()
        seen.clear()
        a, b = (encoder(ids, mask).last_hidden_state for _ in range(2))
        assert set(seen) == {config.attention_probs_dropout_prob}
        assert not torch.equal(a[mask.bool()], b[mask.bool()])
        a[mask.bool()].sum().backward()
        assert all(p.grad is not None for p in encoder.encoder.parameters())


@settings(max_examples=25, deadline=None)
@given(lengths=lengths_lists, queries=st.sampled_from(["all", "first"]), seed=st.integers(0, 2**16))
def test_cpu_attention_with_dropout_is_sdpa_math(lengths, queries, seed):
    """On the CPU, attention with dropout runs its own math (softmax(q kᵀ / √D), dropout, @ v):
    with the draw fixed to keep everything, it equals SDPA without dropout, outputs and gradients."""
    g = torch.Generator().manual_seed(seed)
    B, A, T, D = len(lengths), 2, max(lengths), 4
    q, k, v = (torch.randn(B, A, T, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    q_in = q[:, :, :1] if queries == "first" else q
    mask = torch.tensor([[t < n for t in range(T)] for n in lengths])[:, None, None, :]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bertkit.model.unpadded, "dropout", lambda x, p: x)
        ours = bertkit.model.unpadded.attend(q_in, k, v, mask, 0.1)
    theirs = F.scaled_dot_product_attention(q_in, k, v, attn_mask=mask)
    assert (ours - theirs).abs().max() <= 1e-10
    upstream = torch.randn(ours.shape, generator=g, dtype=torch.float64)
    for a, b in zip(
        torch.autograd.grad(ours, (q, k, v), upstream), torch.autograd.grad(theirs, (q, k, v), upstream), strict=True
    ):
        assert (a - b).abs().max() <= 1e-10
