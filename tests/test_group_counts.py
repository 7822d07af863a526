"""The group loss's counts by group id (metricc.runtime.group_counts): both ways of summing
(bins of 0/1 labels, scatter_add sums) and their symbolic backward equal a float64 one-hot
reference differentiated by autograd, and the hard counts of a constrained loss equal the
exact counts at the hard predictions."""

from __future__ import annotations

import pytest
import torch

import metricc
from metricc.runtime import group_counts
from metricc.runtime.group_counts import CountPlan, GroupCounts
from metricc.runtime.relax import AnyLoss, Linear

G = 4


def _batch(seed: int, soft_labels: bool, weighted: bool) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    n = 400
    x = torch.randn(n, generator=gen, dtype=torch.float64) * 2
    y = (torch.rand(n, generator=gen) < 0.35).double()
    if soft_labels:
        y = torch.where(torch.rand(n, generator=gen) < 0.3, torch.rand(n, generator=gen, dtype=torch.float64), y)
    g = torch.randint(0, G, (n,), generator=gen)
    w = torch.rand(n, generator=gen, dtype=torch.float64) * 3 if weighted else None
    return x, y, g, w


def _reference_counts(a: torch.Tensor, y: torch.Tensor, w: torch.Tensor | None, g: torch.Tensor) -> torch.Tensor:
    """(G, 4) TP FP FN TN by a one-hot matrix product, written apart from the package."""
    one = torch.ones_like(a) if w is None else w
    parts = torch.stack([one * y * a, one * (1 - y) * a, one * y * (1 - a), one * (1 - y) * (1 - a)], -1)
    return torch.nn.functional.one_hot(g, G).double().T @ parts


@pytest.mark.parametrize("chunk", [1 << 16, 64])  # one chunk; several, the last one short
@pytest.mark.parametrize("binned", [True, False])
@pytest.mark.parametrize("soft_labels", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("relax", [AnyLoss(amplifier=10.0), Linear()])
def test_counts_and_gradient_equal_the_one_hot_reference(binned: bool, soft_labels: bool, weighted: bool,
                                                         relax: object, chunk: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_counts, "CHUNK", chunk)
    x, y, g, w = _batch(3, soft_labels, weighted)
    hard = x >= 0
    plan = CountPlan(y, w, g, G, hard, binned)
    xs = x.clone().requires_grad_(True)
    counts = GroupCounts.apply(xs, plan, relax, True)
    assert plan.binned == (binned and not soft_labels)  # soft labels fall back to sums
    xr = x.clone().requires_grad_(True)
    ref = _reference_counts(relax.value(xr, True), y, w, g)
    torch.testing.assert_close(counts, ref, rtol=1e-12, atol=1e-9)
    # any upstream gradient of the (G, 4) counts: the backward is the autograd one
    up = torch.randn(G, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (counts * up).sum().backward()
    (ref * up).sum().backward()
    torch.testing.assert_close(xs.grad, xr.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(plan.hard_counts, _reference_counts(hard.double(), y, w, g), rtol=1e-12, atol=1e-9)


def test_a_soft_label_past_the_first_chunk_falls_back_to_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first chunk's labels are 0/1, a later one is soft: the bins are dropped, not trusted."""
    monkeypatch.setattr(group_counts, "CHUNK", 64)
    x, y, g, _ = _batch(4, False, False)
    y = y.clone()
    y[300] = 0.25
    plan = CountPlan(y, None, g, G, None, True)
    assert plan.binned  # nothing soft in the first chunk
    counts = GroupCounts.apply(x, plan, Linear(), True)
    assert not plan.binned
    torch.testing.assert_close(counts, _reference_counts(torch.sigmoid(x), y, None, g), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("bad", [-1, G])
@pytest.mark.parametrize("validate", [True, False])
def test_a_group_id_outside_the_groups_is_refused_on_every_path(bad: int, validate: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With num_groups given the ids get no scan of their own on the bins path: scatter_add's
    bounds check refuses them, in every chunk, as a MetricError naming the range."""
    monkeypatch.setattr(group_counts, "CHUNK", 64)
    x, y, g, _ = _batch(6, False, False)
    g = g.clone()
    g[350] = bad
    loss = metricc.compile("equal_opportunity_difference").loss(from_logits=True, num_groups=G,
                                                                validate_args=validate)
    with pytest.raises(metricc.MetricError, match=rf"group ids must lie in \[0, {G}\)"):
        loss(x.requires_grad_(True), y, g)


@pytest.mark.parametrize("formula", ["equal_opportunity_difference", "accuracy subject to gap(recall) <= 0.05"])
def test_loss_paths_agree_and_step_the_same_multipliers(formula: str) -> None:
    """validate_args=True sums 0/1 labels in bins, False by scatter_add: one loss, one gradient."""
    x, y, g, _ = _batch(5, False, False)
    out = []
    for validate in (True, False):
        loss = metricc.compile(formula).loss(from_logits=True, num_groups=G, validate_args=validate)
        grads, values = [], []
        for _ in range(3):
            xx = x.clone().requires_grad_(True)
            v = loss(xx, y, g)
            v.backward()
            grads.append(xx.grad)
            values.append(v.detach())
        out.append((torch.stack(values), torch.stack(grads), loss.multipliers.clone(),
                    loss.constraint_values.clone()))
    (v1, g1, m1, c1), (v2, g2, m2, c2) = out
    torch.testing.assert_close(v1, v2, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(m1, m2, rtol=1e-12, atol=0.0)
    torch.testing.assert_close(c1, c2, rtol=1e-12, atol=0.0, equal_nan=True)
    assert g1.abs().sum() > 0


def test_float32_loss_gradient_matches_float64() -> None:
    x, y, g, w = _batch(7, False, True)
    m = metricc.compile("accuracy subject to gap(recall) <= 0.05")
    grads = []
    for dtype in (torch.float64, torch.float32):
        xx = x.to(dtype).detach().requires_grad_(True)
        m.loss(from_logits=True, num_groups=G)(xx, y.to(dtype), g, w.to(dtype)).backward()
        grads.append(xx.grad.double())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6 * float(grads[0].abs().max()))
