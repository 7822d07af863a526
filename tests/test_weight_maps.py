"""Per-element weight maps: ``loss_fn(input, target, weight=w)``.

The defining property: an integer weight ``k`` counts an element ``k`` times, so
the weighted loss (value and gradient) equals the loss on the batch with every
element repeated ``k`` times, in every mode, average and backward, with
``memory_decay`` and under ``torch.compile``. Under ``sync_dist`` it is checked
with real ranks in ``tests/test_stateful_ddp.py``.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import metricc
from metricc import MetricError

F64 = torch.float64


def _data(mode: str, seed: int, n: int = 3, c: int = 4, m: int = 7):
    g = torch.Generator().manual_seed(seed)
    if mode == "binary":
        x = torch.randn(n, m, generator=g, dtype=F64)
        t = (torch.rand(n, m, generator=g) < 0.4).to(F64)
    elif mode == "multiclass":
        x = torch.randn(n, c, m, generator=g, dtype=F64)
        t = torch.randint(0, c - 1, (n, m), generator=g)  # class c-1 absent from the target
    else:
        x = torch.randn(n, c, m, generator=g, dtype=F64)
        t = (torch.rand(n, c, m, generator=g) < 0.4).to(F64)
    w = torch.randint(0, 4, (n, m), generator=g)  # per element (0: left out)
    return x, t, w


def _repeat(x: torch.Tensor, t: torch.Tensor, w: torch.Tensor, mode: str):
    """One sample holding every element ``w`` times: ``(1, [C,] sum(w))``."""
    reps = w.reshape(-1)
    if mode == "binary":
        return (x.reshape(-1).repeat_interleave(reps)[None],
                t.reshape(-1).repeat_interleave(reps)[None])
    xs = x.transpose(1, 2).reshape(-1, x.shape[1]).repeat_interleave(reps, 0).T[None]
    if mode == "multiclass":
        return xs, t.reshape(-1).repeat_interleave(reps)[None]
    return xs, t.transpose(1, 2).reshape(-1, t.shape[1]).repeat_interleave(reps, 0).T[None]


def _weight_for(mode: str, w: torch.Tensor) -> torch.Tensor:
    # broadcastable to the target: (N, M) for binary and class indices, (N, 1, M) for multilabel
    return w[:, None] if mode == "multilabel" else w


CASES = [("binary", "micro"), ("multiclass", "micro"), ("multiclass", "macro"),
         ("multiclass", "weighted"), ("multilabel", "macro"), ("multilabel", "none")]
# multiclass micro-averaging of a metric that uses TN is refused (docs/modes.md)
NAMED_CASES = [(mode, average, name) for mode, average in CASES for name in ("f1", "mcc")
               if not (mode == "multiclass" and average == "micro" and name == "mcc")]


@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
@pytest.mark.parametrize(("mode", "average", "name"), NAMED_CASES)
def test_integer_weights_equal_repeated_elements(mode: str, average: str, name: str,
                                                 backward: str) -> None:
    x, t, w = _data(mode, seed=1)
    loss = metricc.compile(name).loss("anyloss", from_logits=True, mode=mode, average=average,
                                      backward=backward, amplifier=5.0)
    xw = x.clone().requires_grad_()
    weighted = loss(xw, t, weight=_weight_for(mode, w))
    xr = x.clone().requires_grad_()
    repeated = loss(*_repeat(xr, t, w, mode))  # built from xr: autograd sums the copies' grads
    torch.testing.assert_close(weighted, repeated, rtol=1e-12, atol=1e-14)
    weighted.sum().backward()
    repeated.sum().backward()
    torch.testing.assert_close(xw.grad, xr.grad, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("mode", ["binary", "multiclass", "multilabel"])
def test_samplewise_integer_weights_equal_each_sample_repeated(mode: str) -> None:
    x, t, w = _data(mode, seed=2)
    w[0] = torch.clamp(w[0], min=1)  # no sample loses every element
    loss = metricc.compile("dice").loss("linear", from_logits=True, mode=mode, eps=0.0,
                                        multidim_average="samplewise", reduction="none")
    xw = x.clone().requires_grad_()
    weighted = loss(xw, t, weight=_weight_for(mode, w))
    xr = x.clone().requires_grad_()
    each = torch.stack([loss(*_repeat(xr[i:i + 1], t[i:i + 1], w[i:i + 1], mode))[0]
                        for i in range(x.shape[0])])
    torch.testing.assert_close(weighted, each, rtol=1e-12, atol=1e-14)
    weighted.sum().backward()
    each.sum().backward()
    torch.testing.assert_close(xw.grad, xr.grad, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
def test_weights_with_memory_equal_repeated_batches(backward: str) -> None:
    weighted = metricc.compile("f1").loss(from_logits=True, memory_decay=0.8, backward=backward,
                                          amplifier=5.0)
    repeated = metricc.compile("f1").loss(from_logits=True, memory_decay=0.8, backward=backward,
                                          amplifier=5.0)
    for seed in range(3):
        x, t, w = _data("binary", seed=10 + seed)
        xw, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
        lw = weighted(xw, t, weight=w)
        lr = repeated(*_repeat(xr, t, w, "binary"))
        torch.testing.assert_close(lw, lr, rtol=1e-12, atol=1e-14)
        lw.backward()
        lr.backward()
        torch.testing.assert_close(xw.grad, xr.grad, rtol=1e-10, atol=1e-13)


def test_zero_weight_is_ignore_index_and_class_weight_maps_are_class_weights() -> None:
    x, t, _ = _data("multiclass", seed=3)
    t[:, :2] = 255
    dice = metricc.compile("dice")
    ignored = dice.loss("linear", mode="multiclass", from_logits=True, ignore_index=255)(x, t)
    keep = (t != 255).to(F64)
    masked = dice.loss("linear", mode="multiclass", from_logits=True)(
        x, torch.where(t == 255, 0, t), weight=keep)
    torch.testing.assert_close(masked, ignored, rtol=1e-12, atol=1e-14)
    # a (1, C, 1) map scales each class's elements: class_weights under micro averaging
    y = (torch.rand(x.shape, generator=torch.Generator().manual_seed(4)) < 0.3).to(F64)
    cw = [0.5, 2.0, 1.0, 3.0]
    by_class = dice.loss(mode="multilabel", from_logits=True, average="micro",
                         class_weights=cw)(x, y)
    by_map = dice.loss(mode="multilabel", from_logits=True, average="micro")(
        x, y, weight=torch.tensor(cw, dtype=F64).view(1, 4, 1))
    torch.testing.assert_close(by_map, by_class, rtol=1e-12, atol=1e-14)


def test_uniform_weight_changes_nothing() -> None:
    x, t, _ = _data("multiclass", seed=5)
    loss = metricc.compile("jaccard").loss(mode="multiclass", from_logits=True, average="weighted")
    # equal up to eps (1e-7), which is added to the (scaled) denominators
    torch.testing.assert_close(loss(x, t, weight=torch.full((1,), 2.5, dtype=F64)), loss(x, t),
                               rtol=1e-8, atol=1e-10)


def test_compiled_weighted_loss_matches_eager() -> None:
    torch._dynamo.reset()
    x, t, w = _data("multiclass", seed=6)
    x, w = x.float(), w.float()
    loss = metricc.compile("tversky", alpha=0.3, beta=0.7).loss(
        "anyloss", mode="multiclass", from_logits=True, average="macro")
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = loss(xa, t, weight=w)
        comp = compiled(xb, t, weight=w)
    eager.backward()
    comp.backward()
    torch.testing.assert_close(comp, eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("weight", "match"), [
    (torch.ones(3, 5), "broadcast"),
    (torch.ones(2, 3, 7), "broadcast"),
    (-torch.ones(3, 7), ">= 0"),
    (torch.full((3, 7), float("nan")), "finite"),
    (torch.full((3, 7), float("inf")), "finite"),
    ([1.0, 2.0], "tensor"),
    (torch.ones(3, 7, dtype=torch.complex64), "real"),
])
def test_bad_weights_raise_metric_errors(weight, match: str) -> None:
    x, t, _ = _data("binary", seed=7)
    with pytest.raises(MetricError, match=match):
        metricc.compile("f1").loss(from_logits=True)(x, t, weight=weight)
