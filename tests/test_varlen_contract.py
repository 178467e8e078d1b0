"""The CUDA-only branch of the unpadded encoder, run on the CPU: ``varlen_attn`` (FlashAttention
varlen, CUDA with fp16/bf16 only) is replaced by a reference that checks the contract torch
documents for it — (T, H, D) query/key/value, int32 cumulative lengths ``cu_seq_q``/``cu_seq_k``
starting at 0 and ending at T, ``max_q``/``max_k`` the longest lengths, full attention by default
``window_size`` (full, or a (left, right) sliding window) — and computes it exactly; the branch is forced, and the encoder's outputs and
gradients must equal the padded path's. So the wiring of the GPU path is checked on every run,
although no GPU runs it here."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import bertkit.model.unpadded
from bertkit import BertConfig, BertModel
from bertkit.model.unpadded import route

CALLS: list[dict] = []


def reference_varlen_attn(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    *,
    scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    **unused: object,
) -> torch.Tensor:
    """``torch.nn.attention.varlen.varlen_attn`` on the CPU: each sequence's queries attend to
    its own keys (rows ``cu_seq[b]:cu_seq[b + 1]``), softmax(q k^T * scale) v."""
    assert not unused, f"arguments bertkit does not pass: {sorted(unused)}"
    assert query.dim() == key.dim() == value.dim() == 3 and key.shape == value.shape
    assert query.shape[1:] == key.shape[1:], "(T, H, D): same heads and head size"
    for cu, rows, longest in ((cu_seq_q, query.shape[0], max_q), (cu_seq_k, key.shape[0], max_k)):
        assert cu.dtype == torch.int32 and cu.dim() == 1 and cu.device == query.device
        lengths = cu.diff()
        assert int(cu[0]) == 0 and int(cu[-1]) == rows and bool((lengths >= 0).all())
        assert isinstance(longest, int) and longest == int(lengths.max())
    assert cu_seq_q.shape == cu_seq_k.shape
    left, right = window_size
    assert isinstance(left, int) and isinstance(right, int) and (left, right) == (-1, -1) or min(left, right) >= 0
    call = {"sequences": len(cu_seq_q) - 1, "max_q": max_q, "max_k": max_k}
    CALLS.append(call if window_size == (-1, -1) else {**call, "window_size": window_size})
    out = torch.empty_like(query)
    for b in range(len(cu_seq_q) - 1):
        q = query[cu_seq_q[b] : cu_seq_q[b + 1]].transpose(0, 1)  # (H, Lq, D)
        k, v = (t[cu_seq_k[b] : cu_seq_k[b + 1]].transpose(0, 1) for t in (key, value))
        mask = None
        if window_size != (-1, -1):  # query i sees keys i - left … i + right (FlashAttention's window)
            offset = torch.arange(k.shape[1]) - torch.arange(q.shape[1])[:, None]  # (Lq, Lk): j - i
            mask = (offset >= -left) & (offset <= right)
        out[cu_seq_q[b] : cu_seq_q[b + 1]] = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale
        ).transpose(0, 1)
    return out


@pytest.fixture
def forced_varlen(monkeypatch):
    """The routes CUDA takes in bf16, taken on the CPU in fp32: varlen without dropout."""
    CALLS.clear()
    monkeypatch.setattr(bertkit.model.unpadded, "varlen_attn", reference_varlen_attn)
    cuda_bf16 = SimpleNamespace(is_cuda=True, dtype=torch.bfloat16)
    monkeypatch.setattr(bertkit.model.unpadded, "route", lambda q, dropout_p: route(cuda_bf16, dropout_p))
    return CALLS


def batch(lengths: list[int], vocab: int = 1000) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    T = max(lengths)
    ids = torch.randint(5, vocab, (len(lengths), T), generator=g)
    mask = torch.tensor([[1] * n + [0] * (T - n) for n in lengths])
    types = torch.zeros_like(ids)
    types[:, T // 2 :] = 1
    return ids * mask, mask, types * mask


def test_the_varlen_branch_equals_the_padded_encoder(forced_varlen):
    torch.manual_seed(0)
    encoder = BertModel(BertConfig.preset("tiny", vocab_size=1000)).eval()
    ids, mask, types = batch([7, 3, 12, 1])
    real = mask.bool()
    with torch.no_grad():
        padded = encoder(ids, mask, types, unpad=False, output_hidden_states=True)
        assert forced_varlen == []
        packed = encoder(ids, mask, types, unpad=True, output_hidden_states=True)
        layers = encoder.config.num_hidden_layers
        assert forced_varlen == [{"sequences": 4, "max_q": 12, "max_k": 12}] * layers
        for x, y in zip(packed.hidden_states, padded.hidden_states, strict=True):
            assert (x - y)[real].abs().max() <= 1e-5
        assert (packed.pooler_output - padded.pooler_output).abs().max() <= 1e-5
        forced_varlen.clear()
        first = encoder(ids, mask, types, unpad=True, cls_only=True)  # the last layer: [CLS] queries only
        assert forced_varlen[-1] == {"sequences": 4, "max_q": 1, "max_k": 12}
        assert (first.pooler_output - padded.pooler_output).abs().max() <= 1e-5


def test_gradients_through_the_varlen_branch_equal_the_padded_ones(forced_varlen):
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=1000)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0  # the branch FlashAttention takes
    encoder = BertModel(config).train()
    ids, mask, types = batch([6, 10, 2])
    real = mask.bool()
    grads = []
    for unpad in (True, False):
        encoder.zero_grad()
        out = encoder(ids, mask, types, unpad=unpad)
        (out.last_hidden_state[real].pow(2).mean() + out.pooler_output.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None})
    assert forced_varlen, "the varlen branch did not run"
    assert grads[0].keys() == grads[1].keys()
    assert max((grads[0][n] - grads[1][n]).abs().max().item() for n in grads[0]) <= 1e-5


def test_attention_dropout_takes_the_padded_route(forced_varlen, monkeypatch):
    padded = []
    monkeypatch.setattr(bertkit.model.unpadded, "padded_attention", lambda *a: padded.append(a[4]) or a[0])
    torch.manual_seed(0)
    encoder = BertModel(BertConfig.preset("tiny", vocab_size=1000)).train()  # attention dropout 0.1
    encoder(*batch([4, 2]), unpad=True)
    assert forced_varlen == [] and padded == [0.1] * encoder.config.num_hidden_layers


def test_modernbert_local_layers_take_the_window(forced_varlen):
    """ModernBERT's local layers pass ``window_size=(local_attention // 2,) * 2``, its global ones
    none; every hidden state equals the padded path's banded mask."""
    from bertkit_plugins.modernbert import ModernBertConfig, ModernBertModel

    torch.manual_seed(0)
    config = ModernBertConfig.preset("tiny", vocab_size=1000, pad_token_id=0, local_attention=4)
    config.num_hidden_layers = 4  # layers 0 and 3 global, 1 and 2 local
    encoder = ModernBertModel(config).eval()
    ids, mask, _ = batch([9, 3, 12, 6])
    real = mask.bool()
    with torch.no_grad():
        outputs = [encoder(ids, mask, unpad=unpad, output_hidden_states=True) for unpad in (True, False)]
    windows = [call.get("window_size") for call in forced_varlen]
    assert windows == [None, (2, 2), (2, 2), None]
    packed, padded = ([*out.hidden_states, out.last_hidden_state] for out in outputs)
    assert max((x - y)[real].abs().max().item() for x, y in zip(packed, padded, strict=True)) <= 1e-5


def test_modernbert_gradients_through_the_window_equal_the_padded_ones(forced_varlen):
    """In float64, so that the comparison is exact: in float32 the two paths' rounding differs by
    up to 1 % of the embedding gradient, which the final norm's cancellation makes small."""
    from bertkit_plugins.modernbert import ModernBertConfig, ModernBertModel

    torch.manual_seed(0)
    config = ModernBertConfig.preset("tiny", vocab_size=1000, pad_token_id=0, local_attention=4)
    config.num_hidden_layers = 4
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = config.mlp_dropout = 0.0
    encoder = ModernBertModel(config).double().train()
    ids, mask, _ = batch([9, 3, 12, 6])
    real = mask.bool()
    grads = []
    for unpad in (True, False):
        encoder.zero_grad()
        out = encoder(ids, mask, unpad=unpad)
        (out.last_hidden_state[real].pow(2).mean() + out.pooler_output.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None})
    assert [call.get("window_size") for call in forced_varlen] == [None, (2, 2), (2, 2), None]
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) == len(list(encoder.parameters()))
    assert max((grads[0][n] - grads[1][n]).abs().max().item() for n in grads[0]) <= 1e-10
