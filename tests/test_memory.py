"""The cross-batch count memory (``memory_decay``) and ``sync_dist`` in one process."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from oracles import sklearn_reference

import metricc

BACKWARDS = ["symbolic", "autograd"]
SIZES = [7, 3, 12, 5, 9]  # uneven batches of one epoch


def _epoch(seed: int = 0, soft: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n = sum(SIZES)
    y = (torch.rand(n, generator=g) < 0.3).double()
    starts = np.cumsum([0, *SIZES[:-1]])
    y[starts] = 1  # every batch has both classes: its metric is defined without memory
    y[starts + 1] = 0
    p = torch.rand(n, generator=g, dtype=torch.float64)
    return (p if soft else (p < 0.5).double()), y


@pytest.mark.parametrize("backward", BACKWARDS)
@pytest.mark.parametrize("name", ["f1", "mcc", "balanced_accuracy", "jaccard"])
def test_decay_one_last_batch_scores_the_whole_epoch(name: str, backward: str) -> None:
    """Hard predictions and the linear relaxation give exact counts: the last
    batch's loss is 1 - the scikit-learn score of the whole epoch."""
    m = metricc.compile(name)
    pred, y = _epoch(soft=False)
    loss = m.loss("linear", memory_decay=1.0, backward=backward, eps=0.0)
    for p, t in zip(pred.split(SIZES), y.split(SIZES), strict=True):
        value = loss(p, t)
    ref = sklearn_reference(name)(y.numpy().astype(int), pred.numpy().astype(int))
    expected = 1 - ref if m.higher_is_better else ref
    assert float(value) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("backward", BACKWARDS)
def test_decay_one_soft_counts_equal_full_batch_loss(backward: str) -> None:
    m = metricc.compile("f1")
    p, y = _epoch()
    loss = m.loss(memory_decay=1.0, backward=backward)
    # training steps (not under no_grad, where the memory is read and not updated)
    for pb, yb in zip(p.split(SIZES), y.split(SIZES), strict=True):
        value = loss(pb, yb).detach()
    full = m.loss(backward=backward)(p, y)
    assert float(value) == pytest.approx(float(full), abs=1e-12)


@pytest.mark.parametrize("backward", BACKWARDS)
@pytest.mark.parametrize("decay", [0.0, 0.6, 1.0])
def test_value_and_gradient_at_decayed_counts(backward: str, decay: float) -> None:
    """Against an independent reference: ``1 - f(c_t + sum_k decay^(t-k) c_k)`` with
    the past counts computed from scratch, differentiated by autograd."""
    m = metricc.compile("mcc")
    p, y = _epoch(seed=1)
    loss = m.loss(memory_decay=decay, backward=backward, eps=0.0, amplifier=5.0)
    batches = list(zip(p.split(SIZES), y.split(SIZES), strict=True))

    def counts(pb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        a = torch.sigmoid(5.0 * (pb - 0.5))
        return torch.stack([(yb * a).sum(), ((1 - yb) * a).sum(),
                            (yb * (1 - a)).sum(), ((1 - yb) * (1 - a)).sum()])

    for t, (pb, yb) in enumerate(batches):
        x = pb.clone().requires_grad_()
        value = loss(x, yb)
        value.backward()
        past = sum((decay ** (t - k) * counts(*batches[k]) for k in range(t)),
                   torch.zeros(4, dtype=torch.float64))
        xr = pb.clone().requires_grad_()
        ref = 1 - m.value(*(counts(xr, yb) + past))
        ref.backward()
        assert float(value.detach()) == pytest.approx(float(ref.detach()), abs=1e-12)
        torch.testing.assert_close(x.grad, xr.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backward", BACKWARDS)
def test_no_gradient_reaches_past_batches(backward: str) -> None:
    m = metricc.compile("f1")
    p, y = _epoch()
    loss = m.loss(memory_decay=0.9, backward=backward)
    x1 = p[:7].clone().requires_grad_()
    first = loss(x1, y[:7])
    x2 = p[7:].clone().requires_grad_()
    second = loss(x2, y[7:])
    assert torch.autograd.grad(second, x1, allow_unused=True) == (None,)
    second.backward()
    assert x1.grad is None and x2.grad is not None and bool(x2.grad.abs().sum() > 0)
    assert first.grad_fn is not None  # the first batch's graph is still its own
    memory = loss.pool.memory
    assert memory is not None and not memory.requires_grad and memory.grad_fn is None


def test_eval_mode_neither_uses_nor_updates_memory_and_reset_forgets() -> None:
    m = metricc.compile("f1")
    p, y = _epoch()
    plain = m.loss()
    loss = m.loss(memory_decay=1.0)
    loss(p[:7], y[:7])
    kept = loss.pool.memory.clone()
    loss.eval()
    assert float(loss(p[7:], y[7:])) == float(plain(p[7:], y[7:]))
    torch.testing.assert_close(loss.pool.memory, kept, rtol=0, atol=0)
    loss.train()
    loss.reset_memory()
    assert loss.pool.memory is None
    assert float(loss(p[7:], y[7:])) == float(plain(p[7:], y[7:]))
    assert "pool.memory" not in loss.state_dict()  # transient training state


def test_memory_stays_float64_after_half() -> None:
    loss = metricc.compile("f1").loss(memory_decay=1.0)
    loss(torch.rand(5, dtype=torch.float64), torch.ones(5))
    loss.half()
    assert loss.pool.memory.dtype == torch.float64  # casts never reach it (issue 11)
    loss(torch.rand(5, dtype=torch.float64), torch.ones(5))
    assert loss.pool.memory.dtype == torch.float64


def test_memory_rows_must_not_change() -> None:
    loss = metricc.compile("f1").loss(memory_decay=0.5)
    loss.row_losses(torch.rand(3, 4), torch.ones(3, 4))
    with pytest.raises(metricc.MetricError, match="reset_memory"):
        loss.row_losses(torch.rand(2, 4), torch.ones(2, 4))
    loss.reset_memory()
    assert loss.row_losses(torch.rand(2, 4), torch.ones(2, 4)).shape == (2,)


@pytest.mark.parametrize("backward", BACKWARDS)
def test_sync_dist_without_process_group_is_the_plain_loss(backward: str) -> None:
    m = metricc.compile("mcc")
    p, y = _epoch()
    x1 = p.clone().requires_grad_()
    x2 = p.clone().requires_grad_()
    a = m.loss(sync_dist=True, backward=backward)(x1, y)
    b = m.loss(backward=backward)(x2, y)
    a.backward()
    b.backward()
    assert float(a.detach()) == pytest.approx(float(b.detach()), rel=1e-15, abs=0)
    # The pooled path stacks the counts before the kernel: the same sums in another
    # order, which can differ in the last bit on CPUs with other vector widths.
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-14, atol=1e-16)


@pytest.mark.parametrize(("options", "match"), [
    ({"memory_decay": 1.5}, "memory_decay"),
    ({"memory_decay": -0.1}, "memory_decay"),
    ({"memory_decay": True}, "memory_decay"),
    ({"memory_decay": "0.9"}, "memory_decay"),
    ({"sync_dist": "yes"}, "sync_dist"),
    ({"process_group": object()}, "process_group"),
    ({"sync_dist": True, "multidim_average": "samplewise"}, "samplewise"),
    ({"memory_decay": 0.9, "multidim_average": "samplewise"}, "samplewise"),
])
def test_bad_options_raise_metric_errors(options: dict, match: str) -> None:
    with pytest.raises(metricc.MetricError, match=match):
        metricc.compile("f1").loss(**options)


def test_torch_compile_with_memory_matches_eager() -> None:
    m = metricc.compile("f1")
    p, y = _epoch(seed=2)
    eager = m.loss(memory_decay=0.7)
    compiled = torch.compile(m.loss(memory_decay=0.7))
    for pb, yb in list(zip(p.split(SIZES), y.split(SIZES), strict=True))[:3]:
        xe = pb.clone().requires_grad_()
        xc = pb.clone().requires_grad_()
        ve, vc = eager(xe, yb), compiled(xc, yb)
        ve.backward()
        vc.backward()
        assert float(vc.detach()) == pytest.approx(float(ve.detach()), abs=1e-12)
        np.testing.assert_allclose(xc.grad.numpy(), xe.grad.numpy(), rtol=0, atol=1e-12)
