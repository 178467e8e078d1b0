"""The fused masked-LM loss (``bertkit_plugins.pretraining.loss``) is the cross-entropy of the
decoder's logits: the same per-token losses and gradients as ``F.cross_entropy`` of
``F.linear``, its reused buffer never serves a stale graph, and the pre-training head trains on it
with the gradients of the unfused loss (which still runs under autocast and without gradients)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from bertkit_plugins.pretraining import MaskedLMPredictionHead, PreTraining
from bertkit_plugins.pretraining.loss import LogitsBuffer, linear_cross_entropy

from bertkit import BertModule
from bertkit.data.collate import pad_batch


def leaves(*shapes: tuple[int, ...], scale: float = 1.0) -> list[torch.Tensor]:
    return [(torch.randn(shape, dtype=torch.float32) * scale).requires_grad_() for shape in shapes]


@pytest.mark.parametrize(
    ("rows", "hidden_size", "vocab", "scale"), [(1, 8, 5, 1.0), (37, 16, 1000, 1.0), (64, 32, 3001, 8.0)]
)
def test_fused_loss_is_cross_entropy_of_the_logits(rows: int, hidden_size: int, vocab: int, scale: float) -> None:
    torch.manual_seed(rows)
    hidden, weight, bias = leaves((rows, hidden_size), (vocab, hidden_size), (vocab,), scale=scale)
    target = torch.randint(0, vocab, (rows,))
    weights = torch.rand(rows)  # an incoming gradient that is not the mean's constant
    ours = linear_cross_entropy(hidden, weight, bias, target, LogitsBuffer())
    (ours * weights).sum().backward()
    mine = [hidden.grad, weight.grad, bias.grad]
    for leaf in (hidden, weight, bias):
        leaf.grad = None
    theirs = F.cross_entropy(F.linear(hidden, weight, bias), target, reduction="none")
    (theirs * weights).sum().backward()
    if scale > 1:  # logits past float32's exp range (88): the max must be subtracted first
        assert F.linear(hidden, weight, bias).abs().max() > 88
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    for got, expected in zip(mine, (hidden.grad, weight.grad, bias.grad), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_the_buffer_is_reused_and_a_stale_graph_refuses_a_second_backward() -> None:
    torch.manual_seed(0)
    buffer = LogitsBuffer()
    weight, bias = leaves((50, 8), (50,))
    first = linear_cross_entropy(*leaves((6, 8)), weight, bias, torch.randint(0, 50, (6,)), buffer)
    hidden = leaves((4, 8))[0]
    target = torch.randint(0, 50, (4,))
    second = linear_cross_entropy(hidden, weight, bias, target, buffer)  # overwrites the first's logits
    second.sum().backward()
    expected = torch.autograd.grad(F.cross_entropy(F.linear(hidden, weight, bias), target, reduction="sum"), hidden)
    torch.testing.assert_close(hidden.grad, expected[0], atol=1e-6, rtol=1e-5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        first.sum().backward()
    again = linear_cross_entropy(hidden, weight, bias, target, buffer)
    again.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):  # the backward used it up
        again.sum().backward()


def test_the_head_trains_on_the_fused_loss_with_the_unfused_gradients(
    minilm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    model = BertModule(PreTraining(), pretrained=None, preset="tiny", vocab_file=str(minilm_dir)).eval()
    encoded = model.tokenizer.encode_batch(["The cat sat on the mat today.", "A rainy day"], ["It was warm.", "Rain."])
    batch = pad_batch([{"input_ids": e.input_ids, "token_type_ids": e.token_type_ids} for e in encoded])
    labels = torch.full_like(batch["input_ids"], -100)
    labels[0, 2], labels[0, 5], labels[1, 1] = 4937, 1996, 2154
    batch |= {"labels": labels, "next_sentence_label": torch.tensor([1, 0])}

    def step() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        out = model(batch)
        out["loss"].backward()
        return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    fused, fused_grads = step()
    assert "mlm_logits" not in fused and fused["mlm_token_losses"].shape == (3,)
    monkeypatch.setattr(MaskedLMPredictionHead, "_fused_loss", staticmethod(lambda hidden, decoder: False))
    unfused, unfused_grads = step()
    assert unfused["mlm_logits"].shape == (3, model.tokenizer.vocab_size)
    torch.testing.assert_close(fused["mlm_token_losses"], unfused["mlm_token_losses"], atol=1e-5, rtol=1e-5)
    assert fused_grads.keys() == unfused_grads.keys() and "encoder.embeddings.word_embeddings.weight" in fused_grads
    for name, grad in fused_grads.items():
        torch.testing.assert_close(grad, unfused_grads[name], atol=1e-6, rtol=1e-4, msg=name)
    monkeypatch.undo()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # mixed precision keeps the float32 loss of the logits
        assert "mlm_logits" in model(batch)
    with torch.no_grad():  # evaluation keeps the logits for its metrics
        assert "mlm_logits" in model(batch)
