"""``verify()`` of a curve metric: the generated gradient proved, the loss's gradient compared.

Symbolically: the generated ``curve_and_gradient`` is run on SymPy symbols (:func:`run_symbolically`)
for ``T = 3`` and ``4`` thresholds and compared with SymPy's derivatives of the reductions
written out over ``TP_0 .. TP_{T-1}, FP_0 ..`` (:func:`expanded`): ``cancel(a - b) == 0`` for
rational functions, else at exact rational points to 40 digits (min/max cuts and the smooth
maximum's exponentials). Numerically, in float64: the loss's gradient w.r.t. the scores equals
autograd of a plain implementation (a dense ``n x T`` soft histogram and the value kernel) and
finite differences (``torch.autograd.gradcheck``), for a couple of relaxation settings.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import sympy

from ..analysis.counts import guard
from ..errors import MetricError
from ..language.curve import Area, AreaWithin, Best, BestWhere, CurveReduction, Steps, reductions
from ..language.functions import TORCH_CALLS
from . import proofs
from .report import Check, VerificationReport, finish

__all__ = ["expanded", "prove_gradient", "run_symbolically", "sympy_torch", "verify_curve"]


def _vectorised(fn: Callable[[sympy.Expr], sympy.Expr]) -> Callable[[Any], Any]:
    return np.vectorize(fn, otypes=[object])


def sympy_torch() -> SimpleNamespace:
    """The torch calls the curve kernels make, on numpy arrays of SymPy expressions."""

    def softmax(a: np.ndarray, dim: int) -> np.ndarray:
        e = _vectorised(sympy.exp)(a)
        return e / e.sum(axis=dim, keepdims=True)

    def pad(x: np.ndarray, widths: tuple[int, int]) -> np.ndarray:
        zeros = [np.full((*x.shape[:-1], w), sympy.S.Zero, dtype=object) for w in widths]
        return np.concatenate([zeros[0], x, zeros[1]], axis=-1)

    def clamp(x: Any, min: float | None = None, max: float | None = None) -> Any:
        return _vectorised(lambda e: TORCH_CALLS["clamp"].sympy(e, min, max))(x)

    sigmoid = _vectorised(TORCH_CALLS["sigmoid"].sympy)  # the function table's stand-ins
    functional = SimpleNamespace(pad=pad, logsigmoid=_vectorised(lambda z: -sympy.log(1 + sympy.exp(-z))))
    return SimpleNamespace(
        sum=lambda x, dim: np.sum(x, axis=dim), softmax=softmax, sigmoid=sigmoid, clamp=clamp,
        zeros_like=lambda x: np.full(np.shape(x), sympy.S.Zero, dtype=object), sign=_vectorised(sympy.sign),
        sqrt=_vectorised(sympy.sqrt), log=_vectorised(sympy.log), exp=_vectorised(sympy.exp),
        nn=SimpleNamespace(functional=functional))


def run_symbolically(source: str, *args: Any) -> tuple[Any, ...]:
    """``curve_and_gradient`` of generated ``source`` run on object arrays of SymPy expressions."""
    return proofs.run_symbolically(source, "curve_and_gradient", *args,  # type: ignore[no-any-return]
                                   namespace={"torch": sympy_torch()})


def _reduction_value(node: CurveReduction, T: int, at: Callable[[sympy.Expr, int], sympy.Expr],
                     tau: sympy.Symbol, tau_g: sympy.Symbol) -> sympy.Expr:
    if isinstance(node, (Best, BestWhere)):
        f = [at(node.args[0], k) for k in range(T)]
        gate = [sympy.S.One if isinstance(node, Best) else 1 / (1 + sympy.exp(-at(node.args[1], k) / tau_g))
                for k in range(T)]
        if isinstance(node, BestWhere):  # f gated by the bound, tau * (its violation) where it fails
            f = [gate[k] * f[k] + tau * tau_g * sympy.log(gate[k]) for k in range(T)]
        w = [gate[k] * sympy.exp(f[k] / tau) for k in range(T)]
        return sum(w[k] * f[k] for k in range(T)) / sum(w)  # type: ignore[no-any-return]
    y, x = node.args[:2]
    xs = [at(x, k) for k in range(T)]
    if isinstance(node, AreaWithin):
        xs = [sympy.Min(sympy.Max(v, node.args[2]), node.args[3]) for v in xs]
    ys = [at(y, k) for k in range(T)]
    if isinstance(node, (Area, AreaWithin)):
        return sum((xs[k] - xs[k + 1]) * (ys[k] + ys[k + 1]) / 2 for k in range(T - 1))  # type: ignore[no-any-return]
    if not isinstance(node, Steps):  # pragma: no cover - every reduction is one of these
        raise MetricError(f"internal: unknown reduction {type(node).__name__}")
    return sum((xs[k] - xs[k + 1]) * ys[k] for k in range(T - 1))  # type: ignore[no-any-return]


def expanded(expr: sympy.Expr, T: int, tp: list[sympy.Symbol], fp: list[sympy.Symbol], P: sympy.Symbol,
             N: sympy.Symbol, eps: sympy.Symbol, tau: sympy.Symbol, tau_g: sympy.Symbol) -> sympy.Expr:
    """The guarded metric as one plain SymPy expression over ``TP_0..TP_{T-1}, FP_0...``."""
    c = sympy.symbols("TP FP FN TN")

    def at(e: sympy.Expr, k: int) -> sympy.Expr:
        return guard(e, eps).xreplace(dict(zip(c, (tp[k], fp[k], P - tp[k], N - fp[k]), strict=True)))

    values = {node: _reduction_value(node, T, at, tau, tau_g) for node in reductions(expr)}
    outer = expr.xreplace(values)
    # the outer guard of the kernel: 1/ap -> ap/(ap^2 + eps^2), /n -> /(n + eps)
    return outer.replace(lambda e: isinstance(e, sympy.Pow) and e.exp == -1 and e.base.has(P),
                         lambda e: 1 / (e.base + eps)) if expr.has(sympy.Symbol("P")) else outer


def prove_gradient(expr: sympy.Expr, source: str, T: int, seed: int = 0) -> tuple[bool, str]:
    """Whether the value and gradient of ``source`` equal SymPy's for ``T`` thresholds:
    ``(ok, how)``; symbolic (``cancel``) for rational metrics, else at exact rational points."""
    tp, fp = list(sympy.symbols(f"TP_0:{T}")), list(sympy.symbols(f"FP_0:{T}"))
    P, N, eps, tau, tau_g = sympy.symbols("P N eps tau tau_g")

    def obj(xs: list[Any]) -> np.ndarray:  # a batch of one: numpy keeps 0-d results arrays
        return np.array([xs], dtype=object)

    value, dtp, dfp = run_symbolically(source, obj(tp), obj(fp), obj(P), obj(N), eps, tau, tau_g)
    want = expanded(expr, T, tp, fp, P, N, eps, tau, tau_g)
    pairs = [(value[0], want)] + [(dtp[0][k], sympy.diff(want, tp[k])) for k in range(T)]
    pairs += [(dfp[0][k], sympy.diff(want, fp[k])) for k in range(T)]
    rational = all(isinstance(n, (Area, Steps)) for n in reductions(expr))  # a rational function
    rng = np.random.default_rng(seed + T)
    for got, ref in pairs:
        if rational and sympy.cancel(sympy.together(got - ref)) != 0:
            return False, f"T={T}: {got} != {ref}"
        for _ in range(2):
            # generic points (no count 0, no cut at lo or hi): kinks have more than one subgradient
            tps = sorted(rng.integers(1, 40, T), reverse=True)
            fps = sorted(rng.integers(1, 90, T), reverse=True)
            point = {P: 41, N: 97, eps: sympy.Rational(1, 1000), tau: sympy.Rational(1, 20),
                     tau_g: sympy.Rational(1, 50),
                     **{s: sympy.Integer(v) for s, v in zip(tp, tps, strict=True)},
                     **{s: sympy.Integer(v) for s, v in zip(fp, fps, strict=True)}}
            if not abs(sympy.N((got - ref).xreplace(point), 50)) < sympy.Float("1e-40"):
                return False, f"T={T}: differs at TP={tps}, FP={fps}"
    how = "cancel(a - b) == 0 and" if rational else "at"
    return True, f"{how} exact rational points, {2 * T} partials and the value (T={T})"


def _dense_curve(s: Any, y: Any, relax: Any, from_logits: bool) -> tuple[Any, Any]:
    """The soft curve written out plainly: an ``n x T`` triangular kernel and cumulative sums."""
    import torch

    lo, h = relax.grid()
    if relax.space == "probability":
        x = torch.sigmoid(s) if from_logits else s
    else:
        x = (s if from_logits else torch.log(s / (1 - s))).clamp(-relax.clip, relax.clip)
    u = (x - lo) / h
    T, wd = relax.bins, int(relax.width)
    j = torch.arange(-wd, T + wd, dtype=torch.float64)
    K = torch.clamp(1 - (u[..., None] - j).abs() / wd, min=0) / wd
    # bins beyond the grid fold into its end bins
    K = torch.cat((K[..., :wd + 1].sum(-1, keepdim=True), K[..., wd + 1:T + wd - 1],
                   K[..., T + wd - 1:].sum(-1, keepdim=True)), -1)
    hist_pos, hist_neg = (y[..., None] * K).sum(0), ((1 - y)[..., None] * K).sum(0)
    return tuple(c.flip(-1).cumsum(-1).flip(-1) for c in (hist_pos, hist_neg))  # type: ignore[return-value]


def _numeric_checks(loss_class: Any, report: VerificationReport, seed: int, size: int) -> None:
    import torch

    from ..runtime.curve import CurveRelaxation

    gen = torch.Generator().manual_seed(seed)
    y = (torch.rand(size, generator=gen) < 0.4).to(torch.float64)
    y[:2] = torch.tensor([0.0, 1.0])
    # separable enough that bounds such as precision >= 0.9 are met somewhere (a live gradient)
    x0 = (torch.randn(size, generator=gen, dtype=torch.float64) + 2.5 * y).requires_grad_()
    sign = -1.0 if loss_class.higher_is_better else 1.0
    options: tuple[dict[str, Any], ...] = ({"bins": 9, "width": 1.0, "space": "probability"},
                                           {"bins": 7, "width": 2.0, "space": "logit", "clip": 3.0})
    for opts in options:
        loss = loss_class(from_logits=True, eps=1e-7, **opts)
        relax = CurveRelaxation(**opts)
        label = f"{relax.space}, bins={relax.bins}, width={int(relax.width)}"

        def plain(x: Any, relax: Any = relax, loss: Any = loss) -> Any:
            tp, fp = _dense_curve(x, y, relax, True)
            pos, neg = y.sum(), (1 - y).sum()
            v = loss.curve_value(tp, fp, pos, neg, loss.eps, loss.smooth_max.tau, loss.smooth_max.tau_gate)
            return (1 + sign * v) if sign < 0 else v

        (g_sym,) = torch.autograd.grad(loss(x0, y), x0)
        (g_ref,) = torch.autograd.grad(plain(x0), x0)
        err = float((g_sym - g_ref).abs().max())
        report.checks.append(Check(f"loss gradient = autograd of a plain implementation ({label})",
                                   err <= 1e-9 * max(1.0, float(g_ref.abs().max())),
                                   f"float64, N={size}, max |difference| {err:.2e}"))
        try:
            ok = torch.autograd.gradcheck(lambda x, loss=loss: loss(x, y), (x0.detach().clone().requires_grad_(),),
                                          eps=1e-7, atol=1e-6, rtol=1e-4)
            how = "torch.autograd.gradcheck, float64"
        except torch.autograd.gradcheck.GradcheckError as e:  # type: ignore[attr-defined]
            ok, how = False, str(e).splitlines()[0]
        report.checks.append(Check(f"loss gradient = finite differences ({label})", bool(ok), how))


def verify_curve(expr: sympy.Expr, kernels_source: str, loss_class: Any, label: str, *, seed: int = 0,
                 size: int = 16, sizes: tuple[int, ...] = (3, 4), numeric: bool = True,
                 raise_on_failure: bool = True) -> VerificationReport:
    """Run every check on a curve metric (its resolved ``expr``, generated kernels and loss class);
    raise :class:`VerificationError` on a failure.

    >>> import metricc
    >>> metricc.compile("auroc").verify().ok
    True
    """
    report = VerificationReport()
    for T in sizes:
        ok, how = prove_gradient(expr, kernels_source, T, seed)
        report.checks.append(Check(f"{label}: generated gradient = SymPy derivative (T={T})", ok, how))
    if numeric:
        _numeric_checks(loss_class, report, seed, size)
    return finish(report, raise_on_failure)
