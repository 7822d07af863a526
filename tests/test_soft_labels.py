"""Soft labels: ``soft_label=True`` puts the optimum of overlap losses at ``input == target``.

With it the relaxed counts are ``TP = sum min(a, y)``, ``FP = sum (a - y)+``,
``FN = sum (y - a)+``, ``TN = sum (1 - max(a, y))`` (Wang & Blaschko 2023; MONAI's
and smp's soft-label Dice/Jaccard/Tversky), which equal the default counts
``sum a*y`` ... on hard labels. Checked against an independent implementation of
that form (MONAI's ``compute_tp_fp_fn(..., soft_label=True)`` written out).
"""

from __future__ import annotations

import pytest
import torch

import metricc

F64 = torch.float64
FAMILY = [("dice", {}), ("jaccard", {}), ("tversky", {"alpha": 0.3, "beta": 0.7}),
          ("tversky", {"alpha": 0.5, "beta": 0.5}), ("fbeta", {"beta": 2.0})]


def _soft(shape, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (0.05 + 0.9 * torch.rand(shape, generator=g, dtype=F64))


def _reference(a: torch.Tensor, y: torch.Tensor, metric: metricc.Metric) -> torch.Tensor:
    """1 - metric at the L1 soft counts of one confusion matrix (all elements pooled)."""
    pred, ground, diff = a.sum(), y.sum(), (a - y).abs().sum()
    tp = (pred + ground - diff) / 2
    fp, fn = pred - tp, ground - tp
    tn = a.numel() - pred - ground + tp
    return 1 - metric.value(tp, fp, fn, tn)


@pytest.mark.parametrize(("name", "params"), FAMILY)
@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
def test_soft_label_values_and_gradients_match_the_l1_form(name, params, backward) -> None:
    m = metricc.compile(name, **params)
    a = _soft((4, 9), seed=1).requires_grad_()
    y = _soft((4, 9), seed=2)
    loss = m.loss("linear", soft_label=True, backward=backward, eps=0.0)(a, y)
    ref_a = a.detach().clone().requires_grad_()
    ref = _reference(ref_a, y, m)
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=1e-14)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(a.grad, ref_a.grad, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize(("name", "params"), FAMILY)
@pytest.mark.parametrize("mode", ["binary", "multiclass", "multilabel"])
def test_minimum_and_zero_gradient_at_input_equal_target(name, params, mode) -> None:
    """At ``input == target`` the loss is 0 (its minimum) and the gradient vanishes."""
    m = metricc.compile(name, **params)
    shape = (3, 7) if mode == "binary" else (3, 4, 7)
    y = _soft(shape, seed=3)
    if mode == "multiclass":
        y = y / y.sum(1, keepdim=True)  # soft class distributions
    for average in (["micro"] if mode == "binary" else ["micro", "macro", "weighted"]):
        loss = m.loss("linear", soft_label=True, mode=mode, average=average, eps=0.0)
        a = y.clone().requires_grad_()
        value = loss(a, y)
        value.backward()
        assert abs(float(value.detach())) < 1e-12
        assert float(a.grad.abs().max()) < 1e-12
        # any move away from the target costs something
        g = torch.Generator().manual_seed(4)
        for _ in range(5):
            b = (y + 0.02 * torch.randn(shape, generator=g, dtype=F64)).clamp(0, 1)
            assert float(loss(b, y)) > 1e-6
        # through logits, sigmoid/softmax reproduce the target only up to rounding: the loss
        # is 0 to rounding, but the gradient is the one-sided one of the kink at a = y
        logit_loss = m.loss("linear", soft_label=True, mode=mode, average=average,
                            from_logits=True, eps=0.0)
        z = y.log() if mode == "multiclass" else torch.logit(y)
        assert abs(float(logit_loss(z, y))) < 1e-12


@pytest.mark.parametrize(("name", "params"), [("dice", {}), ("jaccard", {})])
def test_autograd_backward_also_vanishes_at_the_target(name, params) -> None:
    y = _soft((5, 6), seed=5)
    a = y.clone().requires_grad_()
    metricc.compile(name, **params).loss("linear", soft_label=True, backward="autograd",
                                         eps=0.0)(a, y).backward()
    assert float(a.grad.abs().max()) < 1e-12


def test_default_counts_do_not_peak_at_the_target() -> None:
    """The default (product) counts are the expected counts of independent Bernoulli
    prediction and label: on soft labels their Dice optimum is not ``input == target``."""
    y = _soft((200,), seed=6)
    dice = metricc.compile("dice")
    plain = dice.loss("linear", eps=0.0)
    a = y.clone().requires_grad_()
    at_target = plain(a, y)
    at_target.backward()
    assert float(at_target.detach()) > 0.1 and float(a.grad.abs().max()) > 1e-3
    assert float(plain((y > 0.5).to(F64), y)) < float(at_target.detach())  # harder guess: better
    assert float(dice.loss("linear", soft_label=True, eps=0.0)(y, y)) == pytest.approx(0.0,
                                                                                     abs=1e-12)


@pytest.mark.parametrize("mode", ["binary", "multiclass", "multilabel"])
@pytest.mark.parametrize("relaxation", ["anyloss", "linear"])
def test_hard_labels_give_the_current_values(mode: str, relaxation: str) -> None:
    g = torch.Generator().manual_seed(7)
    shape = (3, 9) if mode == "binary" else (3, 4, 9)
    x = torch.randn(shape, generator=g, dtype=F64)
    if mode == "multiclass":
        t = torch.randint(0, 4, (3, 9), generator=g)
    else:
        t = (torch.rand(shape, generator=g) < 0.4).to(F64)
    for name in ("f1", "mcc", "tversky"):
        m = metricc.compile(name, **({"alpha": 0.3, "beta": 0.7} if name == "tversky" else {}))
        grads = []
        values = []
        for soft in (False, True):
            xs = x.clone().requires_grad_()
            own = {"amplifier": 5.0} if relaxation == "anyloss" else {}  # linear takes none
            v = m.loss(relaxation, soft_label=soft, mode=mode, from_logits=True, **own)(xs, t)
            v.backward()
            values.append(v)
            grads.append(xs.grad)
        torch.testing.assert_close(values[1], values[0], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(grads[1], grads[0], rtol=1e-10, atol=1e-13)


def test_soft_label_with_weights_memory_and_compile() -> None:
    torch._dynamo.reset()
    y = _soft((4, 8), seed=8).float()
    x = torch.logit(_soft((4, 8), seed=9)).float()
    w = torch.randint(1, 3, (4, 8)).float()
    loss = metricc.compile("dice").loss("linear", soft_label=True, from_logits=True)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    eager = loss(xa, y, weight=w)
    comp = compiled(xb, y, weight=w)
    eager.backward()
    comp.backward()
    torch.testing.assert_close(comp, eager)
    torch.testing.assert_close(xb.grad, xa.grad)
    mem = metricc.compile("dice").loss("linear", soft_label=True, memory_decay=1.0, eps=0.0)
    a = _soft((4, 8), seed=10)
    first, second = mem(a[:2], y[:2].double()), mem(a[2:], y[2:].double())
    assert float(first) > 0
    ref = _reference(a, y.double(), metricc.compile("dice"))
    torch.testing.assert_close(second, ref, rtol=1e-12, atol=1e-14)


def test_soft_label_must_be_a_bool() -> None:
    with pytest.raises(metricc.MetricError, match="soft_label"):
        metricc.compile("dice").loss(soft_label="yes")
