"""``verify()`` of a curve metric: the generated gradient proved, the loss's gradient compared.

Symbolically: the generated ``curve_and_gradient`` is run on SymPy symbols (:func:`run_symbolically`,
the function table's stand-ins of :func:`metricc.verify.proofs.vectorized_torch` plus the array
operations a curve kernel makes) for ``T = 3`` and ``4`` thresholds and compared with SymPy's
derivatives of the reductions written out over ``TP_0 .. TP_{T-1}, FP_0 ..`` (:func:`expanded`,
guarded by the outer guard the kernel has, :func:`metricc.analysis.curve.outer_form`), by the
equality every statistic uses (:func:`metricc.verify.proofs.symbolic_equal`: exact random points,
then a proof in the bounded worker). Numerically, in float64 (:mod:`metricc.verify.numeric`): the
loss's value and gradient w.r.t. the scores equal autograd of a plain implementation (a dense
``n x T`` soft histogram and the value kernel) and central finite differences, for a couple of
relaxation settings.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import sympy

from ..analysis.budget import PROOF_SECONDS, limit
from ..analysis.counts import guard
from ..analysis.curve import outer_form
from ..errors import MetricError
from ..language.curve import Area, AreaWithin, Best, BestWhere, CurveReduction, Steps
from ..language.symbols import EPS
from . import proofs
from .numeric import against_reference
from .report import Check, VerificationReport, finish

__all__ = ["CURVE_ARRAY_CALLS", "curve_torch", "expanded", "prove_gradient", "run_symbolically",
           "verify_curve"]

#: What a curve kernel calls on ``torch`` besides the function table's elementwise calls:
#: reductions over the threshold axis and zero padding (see :func:`curve_torch`).
CURVE_ARRAY_CALLS = ("sum", "softmax", "logsumexp", "nn")


def curve_torch() -> SimpleNamespace:
    """``torch`` for curve kernels on numpy object arrays of SymPy expressions: the function
    table's stand-ins (:func:`metricc.verify.proofs.vectorized_torch`, ``min``/``max``
    undecided) and the curve's array operations."""
    table = proofs.vectorized_torch(undecided=True)

    def softmax(a: np.ndarray, dim: int) -> np.ndarray:
        e = table.exp(a)
        return e / e.sum(axis=dim, keepdims=True)  # type: ignore[no-any-return]

    def logsumexp(a: np.ndarray, dim: int) -> np.ndarray:
        return table.log(table.exp(a).sum(axis=dim))  # type: ignore[no-any-return]

    def pad(x: np.ndarray, widths: tuple[int, int]) -> np.ndarray:
        zeros = [np.full((*x.shape[:-1], w), sympy.S.Zero, dtype=object) for w in widths]
        return np.concatenate([zeros[0], x, zeros[1]], axis=-1)

    functional = SimpleNamespace(pad=pad, logsigmoid=lambda z: table.log(table.sigmoid(z)))
    return SimpleNamespace(**vars(table), sum=lambda x, dim: np.sum(x, axis=dim), softmax=softmax,
                           logsumexp=logsumexp,
                           nn=SimpleNamespace(functional=functional))


def run_symbolically(source: str, *args: Any) -> tuple[Any, ...]:
    """``curve_and_gradient`` of generated ``source`` run on object arrays of SymPy expressions."""
    return proofs.run_symbolically(source, "curve_and_gradient", *args,  # type: ignore[no-any-return]
                                   namespace={"torch": curve_torch()})


def _reduction_value(node: CurveReduction, T: int, at: Callable[[sympy.Expr, int], sympy.Expr],
                     tau: sympy.Symbol, tau_g: sympy.Symbol) -> sympy.Expr:
    if isinstance(node, (Best, BestWhere)):
        f = [at(node.args[0], k) for k in range(T)]
        gate = [sympy.S.One if isinstance(node, Best) else 1 / (1 + sympy.exp(-at(node.args[1], k) / tau_g))
                for k in range(T)]
        if isinstance(node, BestWhere):  # f gated by the bound, tau * (its violation) where it fails
            f = [gate[k] * f[k] + tau * tau_g * sympy.log(gate[k]) for k in range(T)]
        # the smooth maximum tau log(mean_k exp(f_k/tau)): monotone in every f_k
        return tau * sympy.log(sum(sympy.exp(f[k] / tau) for k in range(T)) / T)  # type: ignore[no-any-return]
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
    """The guarded metric as one plain SymPy expression over ``TP_0..TP_{T-1}, FP_0...``: each
    reduction written out from its guarded local formulas, in the outer expression guarded as
    the kernel's (:func:`metricc.analysis.curve.outer_form`, the one outer guard)."""
    c = sympy.symbols("TP FP FN TN")

    def at(e: sympy.Expr, k: int) -> sympy.Expr:
        return guard(e, eps).xreplace(dict(zip(c, (tp[k], fp[k], P - tp[k], N - fp[k]), strict=True)))

    form = outer_form(expr, eps)
    totals = {sympy.Symbol("P"): P, sympy.Symbol("N"): N}
    values = {s: _reduction_value(node, T, at, tau, tau_g) for s, node in zip(form.symbols, form.nodes, strict=True)}
    return form.value.xreplace({**totals, **values})  # type: ignore[no-any-return]


def prove_gradient(expr: sympy.Expr, source: str, T: int, seed: int = 0) -> tuple[bool, str]:
    """Whether the value and gradient of ``source`` equal SymPy's for ``T`` thresholds:
    ``(ok, how)``, by :func:`metricc.verify.proofs.symbolic_equal` (exact random points, then a
    proof within the time budget, in the bounded worker)."""
    # counts are nonnegative reals: |x|' is sign(x) (over complex symbols, Derivative(re(...)) terms)
    tp, fp = (list(sympy.symbols(f"{c}_0:{T}", nonnegative=True)) for c in ("TP", "FP"))
    P, N, tau, tau_g = sympy.symbols("P N tau tau_g", positive=True)

    def obj(xs: list[Any]) -> np.ndarray:  # a batch of one: numpy keeps 0-d results arrays
        return np.array([xs], dtype=object)

    value, dtp, dfp = run_symbolically(source, obj(tp), obj(fp), obj(P), obj(N), EPS, tau, tau_g)
    want = expanded(expr, T, tp, fp, P, N, EPS, tau, tau_g)
    pairs = [("the value", value[0], want)]
    pairs += [(f"d/d{s}", dtp[0][k], sympy.diff(want, s)) for k, s in enumerate(tp)]
    pairs += [(f"d/d{s}", dfp[0][k], sympy.diff(want, s)) for k, s in enumerate(fp)]
    failure, hows = proofs.first_difference(pairs, seed + T)
    if failure is not None:
        return False, f"T={T}: {failure}"
    return True, f"{2 * T} partials and the value (T={T}): " + "; ".join(sorted(hows))


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
    x0 = torch.randn(size, generator=gen, dtype=torch.float64) + 2.5 * y
    options: tuple[dict[str, Any], ...] = ({"bins": 9, "width": 1.0, "space": "probability"},
                                           {"bins": 7, "width": 2.0, "space": "logit", "clip": 3.0})
    for opts in options:
        loss = loss_class(from_logits=True, eps=1e-7, **opts)
        relax = CurveRelaxation(**opts)

        def plain(x: Any, target: Any, relax: Any = relax, loss: Any = loss) -> Any:
            tp, fp = _dense_curve(x, target, relax, True)
            v = loss.curve_value(tp, fp, target.sum(), (1 - target).sum(), loss.eps, loss.smooth_max.tau,
                                 loss.smooth_max.tau_gate)
            return 1 - v if loss_class.higher_is_better else v

        # the curve loss has one backward, the symbolic one
        against_reference(report, f"{relax.space}, bins={relax.bins}, width={int(relax.width)}",
                          lambda _backward, loss=loss: loss, x0, y, plain, f"float64, N={size}",
                          finite_differences=("symbolic",), backwards=("symbolic",))


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
    with limit(2 * PROOF_SECONDS):  # proofs past it are skipped; the checks still run (as 2 x 2)
        for T in sizes:
            ok, how = prove_gradient(expr, kernels_source, T, seed)
            report.checks.append(Check(f"{label}: generated gradient = SymPy derivative (T={T})", ok, how))
    if numeric:
        _numeric_checks(loss_class, report, seed, size)
    return finish(report, raise_on_failure)
