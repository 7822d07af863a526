"""Why ``precision_at_recall`` trained some models to rank backwards (docs/curve.md, "When it fails").

On a fixed backwards-ranked batch (positives below negatives): the loss's symbolic gradient is
autograd of an independent float64 implementation (no sign bug), the relaxed objective is far
better at the correct ranking (its optimum is not degenerate), and yet the gradient pushes most
positives *down* and gives the negatives none. That is the smooth ``best()``'s non-monotone
softmax-weighted mean (thresholds more than ``tau`` below the mean gain by getting worse) with
the gate switching off every infeasible threshold: a basin around ``1 - base rate``.
"""

from __future__ import annotations

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
    w = torch.softmax(p / tau + log_gate, 0)
    return 1 - (w * p).sum()


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
    assert abs(backwards - (1 - base_rate)) < 0.01  # the value of predicting everything positive
    assert correct < 0.01 < 0.5 < backwards


def test_at_a_backwards_state_the_default_gradient_pushes_most_positives_down(loss) -> None:
    """The documented failure: raising most positives' logits *raises* the loss, and the
    negatives (at thresholds where recall < 0.8, gated off) get no gradient at all."""
    z, y = backwards_batch()
    _, g = grad(loss, z, y)
    pos = y == 1
    assert float((g[pos] > 0).double().mean()) > 0.7
    assert float(g[~pos].abs().max()) < 1e-30
    assert metricc.compile("precision_at_recall", min_recall=TARGET).check().moves["FN->TP"] == "mixed"


def test_a_wider_smooth_max_does_not_remove_the_push_down_on_this_batch() -> None:
    """tau = 0.1 (which trained no backwards model on wisconsin) only widens the range of
    precisions that train the right way; here most positives are still pushed down."""
    wide = metricc.compile("precision_at_recall", min_recall=TARGET).loss(
        from_logits=True, tau=0.1, tau_gate=0.01)
    z, y = backwards_batch()
    _, g = grad(wide, z, y)
    assert float((g[y == 1] > 0).double().mean()) > 0.7


def test_the_push_down_comes_from_the_smooth_mean_not_from_the_gate() -> None:
    """With the gate's feasible set fixed (recall detached), the softmax-weighted mean alone
    still rewards lowering the precision at thresholds more than tau below the mean."""
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
