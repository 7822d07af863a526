"""The curve kernels: values and gradients against an independent float64 torch reference,
gradcheck, a symbolic proof of the gradient for T = 3 and 4, convergence to the exact value as
the grid refines, and torch.compile without graph breaks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import sympy
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from metricc.analysis.curve import DEFAULT_TAU, DEFAULT_TAU_GATE, curve_undefined_where
from metricc.emit.curve import emit_curve_kernels
from metricc.language.curve import CurveFormula
from metricc.language.parse import parse
from metricc.verify.curve import prove_gradient

EPS, TAU, TAU_G = 1e-6, 0.05, 0.01
F64 = torch.float64


def _formula(text: str, **values: float) -> sympy.Expr:
    f = parse(text)
    assert isinstance(f, CurveFormula)
    subs = {**f.defaults, **values}
    return f.expr.xreplace({sympy.Symbol(k): sympy.Rational(str(v)) for k, v in subs.items()})


def _kernels(text: str, **values: float) -> dict[str, Callable[..., Any]]:
    namespace: dict[str, Any] = {"torch": torch}
    exec(emit_curve_kernels(_formula(text, **values)), namespace)
    return namespace


# --- an independent float64 reference: each reduction written out in plain torch ----------------

def _rates(TP: torch.Tensor, FP: torch.Tensor, P: torch.Tensor, N: torch.Tensor) -> dict[str, torch.Tensor]:
    p, n = P[..., None], N[..., None]
    fn, tn = p - TP, n - FP
    return {"recall": TP / (TP + fn + EPS), "fpr": FP / (FP + tn + EPS), "precision": TP / (TP + FP + EPS),
            "f1": 2 * TP / (2 * TP + FP + fn + EPS)}


def _area(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return ((x[..., :-1] - x[..., 1:]) * (y[..., :-1] + y[..., 1:]) / 2).sum(-1)


def _steps(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return ((x[..., :-1] - x[..., 1:]) * y[..., :-1]).sum(-1)


def _best(f: torch.Tensor, d: torch.Tensor | None = None) -> torch.Tensor:
    """``tau log(mean_k exp(p_k/tau))``, written as a plain mean of exponentials."""
    if d is not None:
        log_gate = torch.nn.functional.logsigmoid(d / TAU_G)
        f = log_gate.exp() * f + TAU * TAU_G * log_gate  # f where the bound holds, about TAU d where not
    return TAU * torch.log(torch.exp(f / TAU).mean(-1))


def _reference(name: str, TP: torch.Tensor, FP: torch.Tensor, P: torch.Tensor, N: torch.Tensor) -> torch.Tensor:
    r = _rates(TP, FP, P, N)
    if name == "auroc":
        return _area(r["recall"], r["fpr"])
    if name == "average_precision":
        return _steps(r["precision"], r["recall"])
    if name == "partial_auroc":  # max_fpr = 0.3, the relaxed cut clips fpr per segment
        m = 0.3
        return (1 + (_area(r["recall"], r["fpr"].clamp(0, m)) - m * m / 2) / (m - m * m / 2)) / 2
    if name == "best_f1":
        return _best(r["f1"])
    if name == "recall_at_precision":  # min_precision = 0.6
        return _best(r["recall"], r["precision"] - 0.6)
    if name == "precision_at_recall":  # min_recall = 0.5
        return _best(r["precision"], r["recall"] - 0.5)
    assert name == "mixed"
    auc, ap = _area(r["recall"], r["fpr"]), _steps(r["precision"], r["recall"])
    return (auc + ap) / 2 - 0.1 * _best(r["f1"]) + auc * P / (P + N + EPS) + 1 / (ap**2 + EPS**2) * ap * 0.01


FORMULAS = {
    "auroc": ("auroc", {}), "average_precision": ("average_precision", {}),
    "partial_auroc": ("partial_auroc", {"max_fpr": 0.3}), "best_f1": ("best_f1", {}),
    "recall_at_precision": ("recall_at_precision", {"min_precision": 0.6}),
    "precision_at_recall": ("precision_at_recall", {"min_recall": 0.5}),
    "mixed": ("(auroc + ap)/2 - 0.1*best_f1 + area(recall, fpr)*P/n + 0.01/ap", {}),
}


def _curves(shape: tuple[int, ...], T: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Random monotone curves: TP, FP nonincreasing from (P, N) at k = 0 to near 0 at the top."""
    g = torch.Generator().manual_seed(seed)
    P = 5 + 20 * torch.rand(shape, generator=g, dtype=F64)
    N = 5 + 60 * torch.rand(shape, generator=g, dtype=F64)

    def walk(total: torch.Tensor) -> torch.Tensor:
        steps = torch.rand((*shape, T), generator=g, dtype=F64) ** 2
        frac = 1 - torch.cumsum(steps, -1) / steps.sum(-1, keepdim=True) * 0.98
        frac = torch.cat([torch.ones((*shape, 1), dtype=F64), frac[..., :-1]], -1)
        return total[..., None] * frac

    return walk(P), walk(N), P, N


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_value_and_gradient_equal_autograd_of_a_plain_reference(name: str) -> None:
    text, values = FORMULAS[name]
    k = _kernels(text, **values)
    TP, FP, P, N = _curves((2, 3), 17, seed=len(name))
    TP.requires_grad_(True)
    FP.requires_grad_(True)
    want = _reference(name, TP, FP, P, N)
    dtp, dfp = torch.autograd.grad(want.sum(), (TP, FP))
    value = k["curve_value"](TP.detach(), FP.detach(), P, N, EPS, TAU, TAU_G)
    v2, gtp, gfp = k["curve_and_gradient"](TP.detach(), FP.detach(), P, N, EPS, TAU, TAU_G)
    assert value.shape == (2, 3) and gtp.shape == gfp.shape == (2, 3, 17)
    torch.testing.assert_close(value, want.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(v2, value, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(gtp, dtp, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gfp, dfp, rtol=1e-10, atol=1e-10)


class _Kernel(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, TP: torch.Tensor, FP: torch.Tensor, P: torch.Tensor, N: torch.Tensor,
                fn: Callable[..., Any]) -> torch.Tensor:
        value, dtp, dfp = fn(TP, FP, P, N, EPS, TAU, TAU_G)
        ctx.save_for_backward(dtp, dfp)
        return value

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        dtp, dfp = ctx.saved_tensors
        return grad[..., None] * dtp, grad[..., None] * dfp, None, None, None


@pytest.mark.parametrize("name", ["auroc", "average_precision", "partial_auroc", "recall_at_precision", "mixed"])
def test_gradcheck(name: str) -> None:
    text, values = FORMULAS[name]
    fn = _kernels(text, **values)["curve_and_gradient"]
    TP, FP, P, N = _curves((2,), 6, seed=3)
    TP.requires_grad_(True)
    FP.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: _Kernel.apply(a, b, P, N, fn), (TP, FP), eps=1e-7, atol=1e-6)


def test_defaults_and_where_undefined() -> None:
    assert DEFAULT_TAU_GATE < DEFAULT_TAU  # the gate must win over f (docs/curve.md)
    assert ("area(...) at a threshold", sympy.sympify("FN + TP")) in curve_undefined_where(_formula("auroc"))
    assert ("the outer expression", sympy.sympify("r0")) in curve_undefined_where(_formula("1/ap"))


# --- the gradient formula, proved against plain SymPy for T = 3 and 4 ----------------------------

@pytest.mark.parametrize("T", [3, 4])
@pytest.mark.parametrize("name", ["auroc", "average_precision", "partial_auroc", "best_f1", "recall_at_precision"])
def test_gradient_formula_equals_plain_sympy_differentiation(name: str, T: int) -> None:
    """Runs the generated source on SymPy symbols and compares by the equality every statistic
    uses (``symbolic_equal``): exact random points to 30 digits, then a proof in the bounded
    worker; pure rational functions (auroc, AP) get proofs."""
    text, values = FORMULAS[name]
    expr = _formula(text, **values)
    ok, how = prove_gradient(expr, emit_curve_kernels(expr), T)
    assert ok, how
    if name in ("auroc", "average_precision"):
        assert "proved equal" in how, how


# --- convergence and compilation ------------------------------------------------------------------

def test_binned_area_and_steps_approach_the_exact_values() -> None:
    rng = np.random.default_rng(0)
    target = (rng.random(4000) < 0.2).astype(np.int64)
    scores = 1 / (1 + np.exp(-rng.normal(1.2 * target - 0.6, 1.0)))
    auroc, ap = roc_auc_score(target, scores), average_precision_score(target, scores)
    errors = []
    for T in (8, 64, 1024):
        t = torch.linspace(0, 1, T, dtype=F64)[:-1]
        s, y = torch.tensor(scores), torch.tensor(target, dtype=F64)
        above = (s[None, :] >= torch.cat([t, torch.tensor([2.0], dtype=F64)])[:, None]).to(F64)
        TP, FP = above @ y, above @ (1 - y)
        P, N = y.sum(), (1 - y).sum()
        got_auc = float(_kernels("auroc")["curve_value"](TP, FP, P, N, 1e-12, TAU, TAU_G))
        got_ap = float(_kernels("ap")["curve_value"](TP, FP, P, N, 1e-12, TAU, TAU_G))
        errors.append((abs(got_auc - auroc), abs(got_ap - ap)))
    assert errors[-1][0] < 1e-4 and errors[-1][1] < 2e-3, errors
    assert errors[-1][0] < errors[0][0] and errors[-1][1] < errors[0][1], errors


def test_torch_compile_fullgraph_runs_without_graph_breaks() -> None:
    fn = _kernels("best_f1 + auroc")["curve_and_gradient"]
    TP, FP, P, N = _curves((), 33, seed=5)
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    got = compiled(TP, FP, P, N, EPS, TAU, TAU_G)
    for a, b in zip(got, fn(TP, FP, P, N, EPS, TAU, TAU_G), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
