"""The kernel's twin on Python floats (one row on the CPU): the same values as the tensor
kernel wherever those are finite, and the tensor kernel itself wherever they are not."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import metricc
from metricc.emit import loss_class as emit
from metricc.library import METRICS
from metricc.runtime import constrained, symbolic
from metricc.runtime import loss as loss_module
from metricc.runtime.symbolic import HOST_MATH, host_twin, host_values

BINARY = sorted(n for n, m in METRICS.items() if not m.matrix)
finite = st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False)
anything = st.floats(allow_nan=True, allow_infinity=True)
count = st.one_of(st.just(0.0), st.floats(0.0, 1e6), st.integers(0, 10**6).map(float))


def _kernel(name: str):
    return type(metricc.compile(name).loss()).metric_and_coefficients


def _torch_values(kernel, counts, eps):
    t = [torch.tensor([c], dtype=torch.float64) for c in counts]
    return [float(torch.zeros(1, dtype=torch.float64) + v) for v in kernel(*t, eps)]


@pytest.mark.parametrize("name", BINARY)
def test_every_named_metric_has_a_host_twin(name: str) -> None:
    # Without one the loss silently takes the slower tensor kernel on every call.
    assert host_twin(_kernel(name)) is not None


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(BINARY), count, count, count, count, st.sampled_from([1e-7, 1e-12, 0.0]))
@example("precision", 0.0, 0.0, 3.0, 5.0, 0.0)  # 0/0: the tensor kernel's NaN, not an error
@example("mcc", 0.0, 0.0, 0.0, 0.0, 1e-7)
@example("diagnostic_odds_ratio", 5.0, 0.0, 0.0, 5.0, 0.0)
def test_twin_equals_the_tensor_kernel(name: str, tp: float, fp: float, fn: float, tn: float,
                                       eps: float) -> None:
    kernel = _kernel(name)
    want = _torch_values(kernel, (tp, fp, fn, tn), eps)
    got = host_values(host_twin(kernel), (tp, fp, fn, tn), eps)
    if all(math.isfinite(v) for v in want):
        assert got is not None  # last-bit differences (pow, exp) carried by cancellation:
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12 * max(map(abs, want)) + 1e-300)
    else:
        assert got is None  # the caller runs the tensor kernel: its inf or NaN


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["sqrt", "rsqrt", "log", "exp", "abs", "sign"]), anything)
@example("log", 0.0)
@example("sqrt", -0.0)
@example("rsqrt", 0.0)
@example("exp", 710.0)
@example("sign", math.nan)
def test_host_functions_follow_torch_where_it_is_finite(fn: str, x: float) -> None:
    want = float(getattr(torch, fn)(torch.tensor(x, dtype=torch.float64)))
    try:
        got = getattr(HOST_MATH, fn)(x)
    except (ArithmeticError, ValueError):
        assert not math.isfinite(want), (fn, x, want)
        return
    if math.isfinite(want):
        assert got == pytest.approx(want, rel=4e-16, abs=0.0)
    else:
        assert not math.isfinite(got) or math.isnan(want)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["maximum", "minimum"]), anything, anything)
@example("maximum", math.nan, 1.0)
@example("maximum", 1.0, math.nan)
@example("minimum", -0.0, 0.0)
def test_host_min_max_propagate_nan_as_torch(fn: str, a: float, b: float) -> None:
    want = float(getattr(torch, fn)(torch.tensor(a, dtype=torch.float64),
                                    torch.tensor(b, dtype=torch.float64)))
    got = getattr(HOST_MATH, fn)(a, b)
    assert (math.isnan(got) and math.isnan(want)) or got == want


@given(finite, st.one_of(st.none(), finite), st.one_of(st.none(), finite))
def test_host_clamp_is_torch_clamp(x: float, lo: float | None, hi: float | None) -> None:
    assume(lo is not None or hi is not None)
    want = float(torch.clamp(torch.tensor(x, dtype=torch.float64), min=lo, max=hi))
    assert HOST_MATH.clamp(x, min=lo, max=hi) == want


def test_only_kernels_of_known_functions_get_a_twin() -> None:
    def calls_cos(TP, FP, FN, TN, eps):
        return torch.cos(TP), TP, TP

    def calls_a_builtin(TP, FP, FN, TN, eps):
        return len(TP), TP, TP

    assert host_twin(calls_cos) is None
    assert host_twin(calls_a_builtin) is None
    assert host_twin(print) is None


def test_an_undefined_host_step_hands_over_to_the_tensor_kernel() -> None:
    # 1/(1/TP + 1) at TP = 0: Python raises at 1/0, torch goes through inf to a finite 0.
    def kernel(TP, FP, FN, TN, eps):
        x0 = 1 / TP
        return 1 / (x0 + 1), x0 * 0 + 1, torch.zeros_like(TP)

    assert host_values(host_twin(kernel), (0.0, 1.0, 1.0, 1.0), 0.0) is None
    assert host_values(host_twin(kernel), (1.0, 1.0, 1.0, 1.0), 0.0) == (0.5, 1.0, 0.0)
    assert _torch_values(kernel, (0.0, 1.0, 1.0, 1.0), 0.0)[0] == 0.0


def _tensor_only_class(name: str, monkeypatch: pytest.MonkeyPatch) -> type:
    m = metricc.compile(name)
    with monkeypatch.context() as patch:
        patch.setattr(loss_module, "host_twin", lambda kernel: None)
        return emit.build_loss_class(m.statistic, m.kernels_source, "TensorOnlyLoss",
                                     {"formula": m.text, "higher_is_better": m.higher_is_better,
                                      **m.loss_attributes()}, m._recipe)


@pytest.mark.parametrize(("name", "relaxation", "dtype", "weighted"), [
    ("f1", "anyloss", torch.float64, False),
    ("mcc", "linear", torch.float64, True),
    ("tversky", "sigmoid", torch.float64, False),
    ("balanced_accuracy", "anyloss", torch.float32, True),
    ("dice", "linear", torch.float16, False),
])
def test_the_host_path_gives_the_tensor_paths_loss_and_gradient(
        name: str, relaxation: str, dtype: torch.dtype, weighted: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def counted(*args):
        calls.append(args)
        return host_values(*args)

    monkeypatch.setattr(symbolic, "host_values", counted)
    options = {"from_logits": True, "amplifier": 5.0} if relaxation != "linear" else {}
    if relaxation == "sigmoid":
        del options["amplifier"]  # AnyLoss's option: the sigmoid relaxation refuses it
    host = metricc.compile(name).loss(relaxation, **options)
    plain = _tensor_only_class(name, monkeypatch)(relaxation, **options)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 50, generator=g).to(dtype)
    if relaxation == "linear":
        x = torch.sigmoid(x)
    y = (torch.rand(4, 50, generator=g) < 0.3).to(dtype)
    w = torch.rand(4, 50, generator=g) if weighted else None
    results = []
    for loss in (host, plain):
        xs = x.clone().requires_grad_()
        value = loss(xs, y, weight=w)
        value.backward()
        results.append((value.detach().double(), xs.grad.double()))
    assert len(calls) == 1  # the host loss took the host path, the other did not
    tol = {torch.float64: 1e-12, torch.float32: 1e-6, torch.float16: 1e-3}[dtype]
    assert results[0][0].item() == pytest.approx(results[1][0].item(), rel=tol, abs=tol)
    assert torch.allclose(*(r[1] for r in results), rtol=tol, atol=tol * results[1][1].abs().max())


def test_an_undefined_batch_keeps_the_tensor_kernels_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # eps = 0 and no predicted positives: precision is 0/0 there, whichever path runs.
    results = []
    for cls in (type(metricc.compile("precision").loss()),
                _tensor_only_class("precision", monkeypatch)):
        x = torch.zeros(10, dtype=torch.float64, requires_grad=True)
        value = cls("linear", eps=0.0)(x, torch.zeros(10, dtype=torch.float64))
        value.backward()
        results.append((value.item(), x.grad))
    (v1, g1), (v2, g2) = results
    assert (math.isnan(v1) and math.isnan(v2)) and torch.equal(g1.isnan(), g2.isnan())


@pytest.mark.parametrize("from_logits", [False, True])
def test_compiled_one_row_losses_stay_one_graph(from_logits: bool) -> None:
    # The host path reads the counts (.tolist()): it must never run while torch.compile
    # traces, also where the relaxation has no derivative to recompute (linear, probabilities).
    loss = metricc.compile("dice").loss("linear", from_logits=from_logits)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, generator=g)
    x = x if from_logits else torch.sigmoid(x)
    y = (torch.rand(256, generator=g) < 0.3).float()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    eager, comp = loss(xa, y), compiled(xb, y)
    eager.backward()
    comp.backward()
    torch.testing.assert_close(comp, eager)
    torch.testing.assert_close(xb.grad, xa.grad)


@pytest.mark.parametrize(("rates", "penalty"), [("hard", 1.0), ("relaxed", 0.0)])
def test_constrained_host_path_gives_the_tensor_paths_steps(
        rates: str, penalty: float, monkeypatch: pytest.MonkeyPatch) -> None:
    # The Lagrangian, its backward coefficients and the multipliers' steps on Python floats
    # (one row on the CPU) against the tensor kernels, over a few training steps.
    text = "precision subject to recall >= 0.9, fpr <= 0.2"
    m = metricc.compile(text)
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(64, generator=g, dtype=torch.float64),
                (torch.rand(64, generator=g) < 0.3).double()) for _ in range(4)]

    def run() -> list[tuple[float, torch.Tensor, list[float]]]:
        loss = m.loss(from_logits=True, multiplier_rates=rates, penalty=penalty,
                      multiplier_lr=0.5)
        out = []
        for x, y in batches:
            xs = x.clone().requires_grad_()
            value = loss(xs, y)
            value.backward()
            out.append((value.item(), xs.grad, loss.multipliers.tolist()))
        return out

    calls = []

    def counted(*args):
        calls.append(args)
        return host_values(*args)

    monkeypatch.setattr(constrained, "host_values", counted)
    host = run()
    assert calls  # the host path ran
    built = m.loss()
    for cls in (type(built.objective), *(c.kernels for c in built.constraints)):
        monkeypatch.setattr(cls, "_host_value", None)
        monkeypatch.setattr(cls, "_host_coefficients", None)
    calls.clear()
    tensor = run()
    assert not calls
    assert host[-1][2] != [0.0, 0.0]  # the multipliers moved
    for (v1, g1, l1), (v2, g2, l2) in zip(host, tensor, strict=True):
        assert v1 == pytest.approx(v2, rel=1e-12)
        torch.testing.assert_close(g1, g2, rtol=1e-12, atol=1e-15)
        assert l1 == pytest.approx(l2, rel=1e-12)
