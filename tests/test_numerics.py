"""Numerical safety of the relaxed losses: docs/numerics.md, issue 5 items 2 and 3.

Every named metric, every relaxation, float32 and float64: finite losses and
gradients on degenerate batches, the symbolic backward equal to autograd of
the guarded forward there, half/bfloat16 inputs, a 10^8-element batch, and
AnyLoss gradients at p near 1 in float32.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy
import torch

import metricc
from metricc.analysis.counts import guard
from metricc.language.symbols import EPS
from metricc.library import METRICS
from metricc.runtime.counts import soft_counts
from metricc.runtime.relax import relax_grad
from metricc.runtime.sigmoids import stable_sigmoid

NAMES = sorted(METRICS)
#: (relaxation, options): the three relaxations; sigmoid acts on logits.
RELAXATIONS = [("anyloss", {}), ("linear", {}), ("sigmoid", {"from_logits": True})]


def degenerate_batches() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Probabilities and labels of the batches where metrics divide by zero."""
    g = torch.Generator().manual_seed(0)
    alt = (torch.arange(16) % 2).double()  # half positive, half negative
    zeros, ones = torch.zeros(16, dtype=torch.float64), torch.ones(16, dtype=torch.float64)
    rand = torch.rand(16, generator=g, dtype=torch.float64)
    return {
        "no positive labels": (rand, zeros),
        "all labels positive": (rand, ones),
        "all predictions 0": (zeros, alt),
        "all predictions 1": (ones, alt),
        "predictions 0, no positives": (zeros, zeros),
        "predictions 1, all positive": (ones, ones),
        "predictions 0, all positive": (zeros, ones),
        "predictions 1, no positives": (ones, zeros),
        "single element 1/1": (ones[:1], ones[:1]),
        "single element 0/0": (zeros[:1], zeros[:1]),
        "single element 1/0": (ones[:1], zeros[:1]),
        "inputs exactly 0 and 1, perfect": (alt, alt),
        "inputs exactly 0 and 1, inverted": (1 - alt, alt),
    }


def as_scores(p: torch.Tensor, relaxation: str) -> torch.Tensor:
    """Probabilities as the loss's input: logits for the sigmoid relaxation
    (0 and 1 become -1e4 and +1e4, saturating every sigmoid)."""
    if relaxation == "sigmoid":
        return torch.where(p == 0, -1e4, torch.where(p == 1, 1e4, torch.logit(p)))
    return p


def loss_and_grad(loss: torch.nn.Module, x: torch.Tensor, y: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    value = loss(x, y)
    (grad,) = torch.autograd.grad(value, x)
    return value.detach(), grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("relaxation", "options"), RELAXATIONS, ids=[r for r, _ in RELAXATIONS])
@pytest.mark.parametrize("name", NAMES)
def test_degenerate_batches_finite(name: str, relaxation: str, options: dict, dtype: torch.dtype
                                   ) -> None:
    m = metricc.compile(name)
    for backward in ("symbolic", "autograd"):
        loss = m.loss(relaxation, backward=backward, **options)
        for case, (p, y) in degenerate_batches().items():
            x = as_scores(p, relaxation).to(dtype)
            value, grad = loss_and_grad(loss, x, y.to(dtype))
            where = f"{name}/{relaxation}/{backward}/{dtype}: {case}"
            assert torch.isfinite(value), f"{where}: loss {value}"
            assert torch.isfinite(grad).all(), f"{where}: gradient {grad}"
            assert grad.dtype == dtype and value.dtype == dtype


@pytest.mark.parametrize(("relaxation", "options"), RELAXATIONS, ids=[r for r, _ in RELAXATIONS])
@pytest.mark.parametrize("name", NAMES)
def test_symbolic_backward_is_the_derivative_of_the_guarded_forward(
        name: str, relaxation: str, options: dict) -> None:
    """At the singular points too: the guard is part of the formula, not a patch."""
    m = metricc.compile(name)
    sym = m.loss(relaxation, backward="symbolic", **options)
    auto = m.loss(relaxation, backward="autograd", **options)
    for case, (p, y) in degenerate_batches().items():
        x = as_scores(p, relaxation)
        v1, g1 = loss_and_grad(sym, x, y)
        v2, g2 = loss_and_grad(auto, x, y)
        torch.testing.assert_close(v1, v2, rtol=1e-9, atol=1e-12, msg=f"{name}: {case}")
        scale = max(1.0, g2.abs().max().item())
        torch.testing.assert_close(g1, g2, rtol=1e-6, atol=1e-9 * scale, msg=f"{name}: {case}")


def test_empty_batch_is_a_clear_error() -> None:
    loss = metricc.compile("f1").loss()
    for shape in [(0,), (4, 0), (0, 3)]:
        x = torch.zeros(shape, requires_grad=True)
        with pytest.raises(metricc.MetricError, match=r"empty.*skip empty batches"):
            loss(x, torch.zeros(shape))
    samplewise = metricc.compile("f1").loss(multidim_average="samplewise")
    with pytest.raises(metricc.MetricError, match="empty"):
        samplewise(torch.zeros(0, 5), torch.zeros(0, 5))


# --- the guard itself -------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_guard_is_the_metric_at_eps_zero(name: str) -> None:
    """With eps = 0 the guarded formula is the metric wherever it is defined."""
    m = metricc.compile(name)
    guarded = guard(m.expr).subs(EPS, 0)
    rng = np.random.default_rng(1)
    symbols = [sympy.Symbol(k) for k in ("TP", "FP", "FN", "TN")]
    f = sympy.lambdify(symbols, m.expr, "math")
    h = sympy.lambdify(symbols, guarded, "math")
    for counts in rng.integers(1, 50, size=(20, 4)).tolist():
        assert h(*counts) == pytest.approx(f(*counts), rel=1e-12)


def test_guard_keeps_sign_indefinite_denominators_regular() -> None:
    tp, fp = sympy.symbols("TP FP")
    g = guard(tp / (tp - fp))
    # d + eps would vanish at d = -eps; d/(d^2 + eps^2) is finite for all d.
    assert g == tp * (tp - fp) / ((tp - fp) ** 2 + EPS**2)
    values = [g.subs({tp: 1, fp: 1 + d, EPS: sympy.Rational(1, 10**7)})
              for d in (sympy.Rational(-1, 10**7), 0, sympy.Rational(1, 10**7))]
    assert all(v.is_finite for v in values)
    # ... and within (eps/d)^2 of 1/d elsewhere
    far = g.subs({tp: 1, fp: sympy.Rational(1, 2), EPS: sympy.Rational(1, 10**7)})
    assert abs(float(far) - 2.0) < 1e-12
    # roots and logs get eps; nonnegative denominators get d + eps
    assert guard(sympy.sqrt(tp)) == sympy.sqrt(tp + EPS)
    assert guard(tp / (tp + fp)) == tp / (tp + fp + EPS)


def test_prevalence_threshold_is_regular_on_the_diagonal() -> None:
    """TPR = FPR (an untrained model) was a 0/0 of the textbook formula."""
    m = metricc.compile("prevalence_threshold")
    textbook = metricc.compile("(sqrt(recall*fpr) - fpr)/(recall - fpr)")
    rng = np.random.default_rng(2)
    for tp, fp, fn, tn in rng.integers(1, 100, size=(20, 4)).tolist():
        assert m.value(tp=tp, fp=fp, fn=fn, tn=tn) == pytest.approx(
            textbook.value(tp=tp, fp=fp, fn=fn, tn=tn), rel=1e-9)
    # On the diagonal the limit sqrt(f)/(sqrt(t) + sqrt(f)) = 1/2 is the value.
    assert m.value(tp=3, fp=3, fn=7, tn=7) == pytest.approx(0.5)
    loss = m.loss("linear")
    y = (torch.arange(1000) % 2).double()
    x = torch.full((1000,), 0.3, dtype=torch.float64)  # TPR = FPR = 0.3
    value, grad = loss_and_grad(loss, x, y)
    assert value.item() == pytest.approx(0.5, abs=1e-6)
    assert grad.abs().max() < 1e-2  # a gradient of a smooth function, not of a pole


# --- hard scores: zero_division ------------------------------------------------------------


@pytest.mark.parametrize(("name", "sk"), [("precision", "precision_score"),
                                          ("recall", "recall_score"),
                                          ("f1", "f1_score"),
                                          ("jaccard", "jaccard_score")])
@pytest.mark.parametrize("zero_division", [0.0, 1.0])
def test_zero_division_matches_scikit_learn(name: str, sk: str, zero_division: float) -> None:
    from sklearn import metrics as skm

    m = metricc.compile(name)
    ref = getattr(skm, sk)
    for y, yhat in [([0, 0, 0], [0, 0, 0]), ([0, 0, 0], [1, 0, 0]), ([1, 1, 0], [0, 0, 0]),
                    ([1, 0, 1], [1, 0, 0])]:
        expected = ref(y, yhat, zero_division=zero_division)
        got = m.score(torch.tensor(yhat, dtype=torch.float64), torch.tensor(y),
                      zero_division=zero_division)
        assert got == pytest.approx(expected), (y, yhat)


def test_undefined_hard_score_raises_unless_zero_division() -> None:
    m = metricc.compile("mcc")
    with pytest.raises(metricc.MetricError, match=r"undefined.*zero_division"):
        m.value(tp=0, fp=0, fn=3, tn=5)
    assert m.value(tp=0, fp=0, fn=3, tn=5, zero_division=0.0) == 0.0
    assert math.isnan(m.value(tp=0, fp=0, fn=3, tn=5, zero_division=float("nan")))
    with pytest.raises(metricc.MetricError, match="zero_division"):
        m.value(tp=0, fp=0, fn=3, tn=5, zero_division="warn")
    # tensors: only the undefined entries are replaced
    out = m.value(tp=torch.tensor([0.0, 4.0]), fp=torch.tensor([0.0, 1.0]),
                  fn=torch.tensor([3.0, 1.0]), tn=torch.tensor([5.0, 4.0]), zero_division=-1.0)
    assert out[0] == -1.0 and out[1] == pytest.approx((16 - 1) / 25)


# --- precision: half, bfloat16, 10^8 elements, p near 1 --------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name", NAMES)
def test_half_precision_finite_and_close(name: str, dtype: torch.dtype) -> None:
    m = metricc.compile(name)
    g = torch.Generator().manual_seed(3)
    p = torch.rand(4096, generator=g).to(dtype)
    y = (torch.rand(4096, generator=g) < 0.2).to(dtype)
    for relaxation, options in RELAXATIONS:
        for backward in ("symbolic", "autograd"):
            loss = m.loss(relaxation, backward=backward, **options)
            x = as_scores(p.double(), relaxation).to(dtype)
            value, grad = loss_and_grad(loss, x, y)
            where = f"{name}/{relaxation}/{backward}/{dtype}"
            # the loss comes back in float32, the gradient in the input's dtype
            assert value.dtype == torch.float32 and grad.dtype == dtype, where
            assert torch.isfinite(value) and torch.isfinite(grad).all(), where
            # same inputs in float64: only the rounding of the relaxed a differs
            ref, ref_grad = loss_and_grad(loss, x.double(), y.double())
            assert value.item() == pytest.approx(ref.item(), rel=2e-2, abs=2e-3), where
            tol = 3e-2 * ref_grad.abs().max().item() + 1e-6
            assert (grad.double() - ref_grad).abs().max().item() <= tol, where
        for case, (bp, by) in degenerate_batches().items():
            x = as_scores(bp, relaxation).to(dtype)
            value, grad = loss_and_grad(m.loss(relaxation, **options), x, by.to(dtype))
            assert torch.isfinite(value) and torch.isfinite(grad).all(), f"{name}: {case}"


def test_half_gradient_saturates_instead_of_overflowing() -> None:
    """precision with every prediction exactly 0: d loss/d a = -1/eps = -1e7 > 65504."""
    loss = metricc.compile("precision").loss("linear")
    y = torch.tensor([1.0, 0.0, 1.0])
    _, g64 = loss_and_grad(loss, torch.zeros(3, dtype=torch.float64), y.double())
    assert g64[0].item() == pytest.approx(-1e7, rel=1e-3)
    for backward in ("symbolic", "autograd"):
        half_loss = metricc.compile("precision").loss("linear", backward=backward)
        _, g16 = loss_and_grad(half_loss, torch.zeros(3, dtype=torch.float16), y.half())
        assert g16[0].item() == -torch.finfo(torch.float16).max
        assert torch.isfinite(g16).all()


def test_hundred_million_elements_match_float64() -> None:
    """10^8 float32 elements, 1% positives: the loss equals float64's to 1e-6.

    The batch repeats a random block of 10^4 elements 10^4 times, so the exact
    float64 counts are 10^4 times the block's: a reference that costs nothing
    and shares no code with soft_counts. The float32 run still reduces 10^8
    elements (about 7 s on 2 CPU cores).
    """
    block, repeats = 10**4, 10**4
    g = torch.Generator().manual_seed(4)
    p_block = torch.rand(block, generator=g)
    y_block = (torch.rand(block, generator=g) < 0.01).float()
    m = metricc.compile("mcc")
    loss32 = m.loss()(p_block.repeat(repeats), y_block.repeat(repeats)).item()
    a = torch.sigmoid(73.0 * (p_block.double() - 0.5))
    yd = y_block.double()
    counts = [repeats * (a * yd).sum(), repeats * (a * (1 - yd)).sum(),
              repeats * ((1 - a) * yd).sum(), repeats * ((1 - a) * (1 - yd)).sum()]
    loss64 = 1 - m.loss_class.metric_value(*counts, 1e-7).item()
    assert loss32 == pytest.approx(loss64, rel=1e-6)


def test_soft_counts_accumulate_in_float64() -> None:
    """float16 sums stop at 65504 and lose integers past 2048; the counts do not."""
    a = torch.full((1, 200_000), 0.75, dtype=torch.float16)
    y = torch.ones((1, 200_000), dtype=torch.float16)
    tp, fp, fn, tn = soft_counts(a, y, None)
    assert tp.dtype == torch.float64
    assert tp.item() == 150_000 and fn.item() == 50_000 and fp.item() == 0 and tn.item() == 0


P_NEAR_ONE = [0.0, 1e-7, 0.01, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1 - 2**-24, 1.0]


@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
@pytest.mark.parametrize("name", ["f1", "mcc", "balanced_accuracy"])
def test_anyloss_gradient_near_one_in_float32(name: str, backward: str) -> None:
    """float32 gradients equal float64's (same inputs) instead of rounding to 0."""
    loss = metricc.compile(name).loss("anyloss", backward=backward)
    p = torch.tensor(P_NEAR_ONE * 2)
    y = torch.tensor([1.0] * len(P_NEAR_ONE) + [0.0] * len(P_NEAR_ONE))
    _, g32 = loss_and_grad(loss, p, y)
    _, g64 = loss_and_grad(loss, p.double(), y.double())
    assert (g64 != 0).all()
    assert (g32 != 0).all(), g32
    torch.testing.assert_close(g32.double(), g64, rtol=1e-4, atol=0)


def test_torch_sigmoid_autograd_loses_them_stable_sigmoid_does_not() -> None:
    """Why backward="autograd" relaxes with stable_sigmoid (docs/numerics.md)."""
    z = 73.0 * (torch.tensor([0.9, 0.99, 1.0]) - 0.5)
    naive = z.clone().requires_grad_()
    torch.sigmoid(naive).sum().backward()
    assert (naive.grad == 0).all()  # a = 1 in float32, a (1 - a) = 0
    stable = z.clone().requires_grad_()
    stable_sigmoid(stable).sum().backward()
    exact = torch.sigmoid(z.double()) * torch.sigmoid(-z.double())
    torch.testing.assert_close(stable.grad.double(), exact, rtol=1e-5, atol=0)


def test_stable_sigmoid_matches_torch_and_its_derivative() -> None:
    z = torch.linspace(-120, 120, 4801, dtype=torch.float64)
    torch.testing.assert_close(stable_sigmoid(z), torch.sigmoid(z), rtol=1e-15, atol=1e-300)
    x = z.clone().requires_grad_()
    stable_sigmoid(x).sum().backward()
    exact = torch.sigmoid(z) * torch.sigmoid(-z)
    torch.testing.assert_close(x.grad, exact, rtol=1e-13, atol=1e-300)
    assert x.grad[2400].item() == 0.25  # z = 0, where torch.abs' derivative would be 0


def test_relax_grad_matches_autograd_of_relax() -> None:
    from metricc.runtime.relax import relax

    s = torch.linspace(-30, 30, 601, dtype=torch.float64)
    for relaxation, from_logits in [("anyloss", False), ("anyloss", True), ("linear", False),
                                    ("linear", True), ("sigmoid", True)]:
        x = (torch.sigmoid(s) if not from_logits else s).clone().requires_grad_()
        args = (relaxation, 73.0, 2.0, 0.5, from_logits)
        relax(x, *args, sigmoid=stable_sigmoid).sum().backward()
        torch.testing.assert_close(relax_grad(x.detach(), *args), x.grad, rtol=1e-10,
                                   atol=1e-300)
