"""Why ``precision_at_recall`` trained some models to rank backwards (docs/curve.md, "When it failed"),
and that the monotone smooth ``best()`` (issue 38) removes the trap.

On a fixed backwards-ranked batch (positives below negatives): the loss's symbolic gradient is
autograd of an independent float64 implementation (no sign bug), the relaxed objective is far
better at the correct ranking (its optimum is not degenerate). Up to 0.2 the smooth ``best()`` was
a softmax-weighted mean, not monotone (thresholds more than ``tau`` below the mean gained by
getting worse): its gradient pushed most positives *down* here. The log-mean-exp is nondecreasing
in every threshold's value, so no positive is pushed down, whatever ``tau``.
"""

from __future__ import annotations

import math

import pytest
import torch

import metricc

T, TARGET, EPS = 256, 0.8, 1e-7


def backwards_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """35 positives with logits ~ N(-1, 0.5), 65 negatives ~ N(0.5, 0.5): AUROC near 0.02."""
    g = torch.Generator().manual_seed(0)
    z = torch.cat([torch.randn(35, generator=g, dtype=torch.float64) * 0.5 - 1.0,
                   torch.randn(65, generator=g, dtype=torch.float64) * 0.5 + 0.5])
    return z, torch.cat([torch.ones(35), torch.zeros(65)]).double()


def dense_loss(z: torch.Tensor, y: torch.Tensor, tau: float, tau_gate: float) -> torch.Tensor:
    """``1 - best(precision, recall >= 0.8)`` on a dense n x T soft curve (probability grid,
    linear interpolation), the smooth maximum written out: an independent implementation."""
    u = torch.sigmoid(z) * (T - 1)
    step = (u[:, None] - torch.arange(T, dtype=z.dtype)[None] + 1).clamp(0, 1)  # score >= t_k
    tp, fp = (step * y[:, None]).sum(0), (step * (1 - y[:, None])).sum(0)
    precision, recall = tp / (tp + fp + EPS), tp / (y.sum() + EPS)
    log_gate = torch.nn.functional.logsigmoid((recall - TARGET) / tau_gate)
    p = log_gate.exp() * precision + tau * tau_gate * log_gate  # the gated value
    return 1 - tau * torch.log(torch.exp(p / tau).mean())


def grad(fn, z: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = z.clone().requires_grad_(True)
    value = fn(x, y)
    value.backward()
    return value.detach(), x.grad


@pytest.fixture(scope="module")
def loss() -> torch.nn.Module:
    return metricc.compile("precision_at_recall", min_recall=TARGET).loss(from_logits=True)


def test_the_gradient_at_a_backwards_state_is_autograd_of_a_dense_float64_implementation(loss) -> None:
    z, y = backwards_batch()
    value, g = grad(loss, z, y)
    want_value, want = grad(lambda a, b: dense_loss(a, b, 0.01, 0.001), z, y)
    assert float(abs(value - want_value)) < 1e-12
    assert float((g - want).abs().max()) < 1e-12 * max(1.0, float(want.abs().max()))


def test_the_relaxed_optimum_is_the_correct_ranking_not_the_backwards_one(loss) -> None:
    z, y = backwards_batch()
    with torch.no_grad():
        backwards, correct = float(loss(z, y)), float(loss(-z, y))
    base_rate = float(y.mean())
    # the value of predicting everything positive, within tau log T of it (never above it)
    assert 1 - base_rate - 1e-9 <= backwards <= 1 - base_rate + 0.01 * math.log(T + 1)
    assert correct < 0.06 < 0.5 < backwards


@pytest.mark.parametrize("tau, tau_gate", [(0.01, 0.001), (0.1, 0.01)])
def test_at_a_backwards_state_no_positive_is_pushed_down(tau: float, tau_gate: float) -> None:
    """The trap of 0.2 (raising 83% of the positives' logits *raised* the loss here) is gone:
    raising a positive's logit never raises the loss, raising a negative's never lowers it."""
    loss = metricc.compile("precision_at_recall", min_recall=TARGET).loss(
        from_logits=True, tau=tau, tau_gate=tau_gate)
    z, y = backwards_batch()
    _, g = grad(loss, z, y)
    pos = y == 1
    assert float(g[pos].max()) <= 1e-15 and float(g[pos].min()) < -1e-4
    assert float(g[~pos].min()) >= -1e-15
    assert metricc.compile("precision_at_recall", min_recall=TARGET).check().moves == {
        "FN->TP": "increasing", "TN->FP": "decreasing"}


def test_the_push_down_came_from_the_smooth_mean_not_from_the_gate() -> None:
    """0.2's relaxation written out: with the gate's feasible set fixed (recall detached), the
    softmax-weighted mean alone rewards lowering the precision at thresholds more than tau below
    the mean, which is why ``best()`` is now a log-mean-exp."""
    z, y = backwards_batch()

    def mean_only(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        u = torch.sigmoid(a) * (T - 1)
        step = (u[:, None] - torch.arange(T, dtype=a.dtype)[None] + 1).clamp(0, 1)
        tp, fp = (step * b[:, None]).sum(0), (step * (1 - b[:, None])).sum(0)
        precision, recall = tp / (tp + fp + EPS), (tp / (b.sum() + EPS)).detach()
        w = torch.softmax(precision / 0.01 + torch.nn.functional.logsigmoid((recall - TARGET) / 0.001), 0)
        return 1 - (w * precision).sum()

    _, g = grad(mean_only, z, y)
    assert float((g[y == 1] > 0).double().mean()) > 0.7
