"""``bertkit.model.dropout``: the CPU dropout that draws four elements per 64-bit number."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertkit.model.dropout import LANES, Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 1e-3])
def test_drops_at_the_rounded_rate_and_keeps_the_expectation(p):
    torch.manual_seed(0)
    x = torch.ones(400_000, dtype=torch.float64)
    y = dropout(x, p)
    kept = y != 0
    rate = round(p * LANES) / LANES
    n = x.numel()
    assert abs((1 - kept.double().mean()) - rate) <= 5 * (rate * (1 - rate) / n) ** 0.5  # five standard errors
    assert torch.allclose(
        y[kept], torch.full_like(y[kept], 1 / (1 - rate)), rtol=1e-15, atol=0
    )  # inverse keep probability
    assert abs(y.mean() - 1) <= 5 * (rate / (1 - rate) / n) ** 0.5


def test_lanes_are_independent_and_the_shape_is_kept():
    """Each 64-bit draw decides four neighbouring elements: their drops must not be correlated
    (a wrong view would repeat one lane's bits), and odd sizes and shapes come back unchanged."""
    torch.manual_seed(1)
    y = dropout(torch.ones(3, 50_001), 0.5)
    assert y.shape == (3, 50_001)
    kept = (y.flatten()[:150_000] != 0).view(-1, 4).double()
    pairs = kept[:, :3] * kept[:, 1:]
    assert (pairs.mean() - 0.25).abs() < 0.01  # independent halves: 1/4 of neighbours both kept


def test_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(2)
    x = torch.randn(1000, 7, dtype=torch.float64, requires_grad=True)
    y = dropout(x, 0.3)
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    scale = LANES / (LANES - round(0.3 * LANES))
    assert torch.equal(g, torch.where(y != 0, torch.tensor(scale, dtype=torch.float64), 0.0))
    assert torch.equal(y, x.detach() * g)


def test_seeded_draws_repeat_and_evaluation_is_the_identity():
    x = torch.randn(513)
    torch.manual_seed(3)
    a = dropout(x, 0.1)
    torch.manual_seed(3)
    assert torch.equal(a, dropout(x, 0.1))
    assert dropout(x, 0.1, training=False) is x and dropout(x, 0.0) is x
    layer = Dropout(0.1).eval()
    assert layer(x) is x


def test_certain_drop_falls_back_to_torch():
    """p = 1 (and p rounding to 1) cannot be a keep probability: torch's dropout (all zeros)."""
    x = torch.randn(100)
    assert torch.equal(dropout(x, 1.0), F.dropout(x, 1.0))
    assert torch.equal(dropout(x, 1 - 1e-7), torch.zeros_like(x))
