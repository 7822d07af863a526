"""Stage 2 for the curve: each reduction's local term, its partials, and the outer gradient.

Every reduction is a sum over thresholds of a *local* term: ``area`` and ``steps`` of
``g(c_k, c_{k+1})`` over neighbouring points, the smooth ``best`` a log-mean-exp of ``f(c_k)``.
So ``dR/dTP_k = g_cur(k) + g_next(k-1)`` from two SymPy partials of ``g``, whatever the
number of thresholds ``T`` (derivatives symbolic in ``T``, as the K x K ones are in ``K``).
Counts at one threshold are ``TP FP FN TN`` with ``FN = P - TP`` and ``TN = N - FP``: ``P``
and ``N`` do not move along the curve, so ``d/dTP`` is ``d/dTP - d/dFN`` (as in the 2 x 2
backward). SymPy only; no parser, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..errors import MetricError
from ..language.curve import TOTALS, Area, AreaWithin, Best, BestWhere, CurveReduction, Steps, reductions
from ..language.symbols import COUNTS, EPS
from ..runtime.options import CURVE_DEFAULTS
from .counts import guard, undefined_where

__all__ = ["DEFAULT_TAU", "DEFAULT_TAU_GATE", "NEXT", "TAU", "TAU_GATE", "OuterForm", "PairTerm", "PointTerm",
           "curve_undefined_where", "guard_outer", "local_form", "outer_form"]

_TP, _FP, _FN, _TN = COUNTS.values()
#: The counts at threshold ``k + 1``, beside ``TP FP FN TN`` at ``k``.
NEXT: dict[sympy.Symbol, sympy.Symbol] = {s: sympy.Symbol(f"{s.name}1") for s in COUNTS.values()}
#: The smooth maximum's temperature and the bound's gate temperature (kernel arguments).
TAU = sympy.Symbol("tau", positive=True)
TAU_GATE = sympy.Symbol("tau_gate", positive=True)
#: Their documented defaults: tau_gate well below tau, so in the weights violating the bound by
#: delta costs as much as f lower by delta * tau / tau_gate (10 delta) and the gate wins over f.
DEFAULT_TAU, DEFAULT_TAU_GATE = CURVE_DEFAULTS["tau"], CURVE_DEFAULTS["tau_gate"]
_NONNEG = {s: sympy.Symbol(s.name, nonnegative=True) for s in [*COUNTS.values(), *NEXT.values()]}
_BACK = {v: k for k, v in _NONNEG.items()}


def _d(expr: sympy.Expr, up: sympy.Symbol, down: sympy.Symbol) -> sympy.Expr:
    """``d expr/d up - d expr/d down`` over nonnegative counts (so ``|x|'`` is ``sign(x)``)."""
    e = expr.xreplace(_NONNEG)
    return (sympy.diff(e, _NONNEG[up]) - sympy.diff(e, _NONNEG[down])).xreplace(_BACK)


@dataclass(frozen=True)
class PairTerm:
    """``R = sum_{k=0}^{T-2} term(c_k, c_{k+1})``; ``cur_*`` is ``d term/d TP_k`` (``FP_k``),
    ``next_*`` is ``d term/d TP_{k+1}`` (``FP_{k+1}``), all guarded by ``eps``."""

    term: sympy.Expr
    cur_tp: sympy.Expr
    cur_fp: sympy.Expr
    next_tp: sympy.Expr
    next_fp: sympy.Expr


@dataclass(frozen=True)
class PointTerm:
    """The smooth ``best``: ``R = tau log(mean_k exp(f_k/tau))`` where ``d`` is ``None``,
    nondecreasing in every ``f_k`` and within ``[max_k f_k - tau log T, max_k f_k]``; with a
    bound, ``f_k`` gives way to the gated value ``p_k = s_k f_k + tau tau_gate log s_k``,
    ``s_k = sigmoid(d_k/tau_gate)``: ``R = tau log(mean_k exp(p_k/tau))``. Where the bound holds
    ``p_k = f_k``; where it fails ``p_k`` is about ``tau d_k``, a little below 0 (the exact value
    where no threshold meets the bound), so an unmet bound never reads as a high value.

    ``dR/dp_k = w_k = softmax(p/tau)_k >= 0``; ``dp/df = s``, ``dp/dd = (1 - s)(s f/tau_gate + tau)``.
    """

    f: sympy.Expr
    f_tp: sympy.Expr
    f_fp: sympy.Expr
    d: sympy.Expr | None = None
    d_tp: sympy.Expr | None = None
    d_fp: sympy.Expr | None = None


def local_form(node: CurveReduction, eps: sympy.Expr = EPS) -> PairTerm | PointTerm:
    """The guarded local term of one reduction and its partials.

    >>> from metricc.language.parse import parse
    >>> local_form(parse("area(recall, fpr)").expr).term
    (FP/(FP + TN + eps) - FP1/(FP1 + TN1 + eps))*(TP/(FN + TP + eps) + TP1/(FN1 + TP1 + eps))/2
    """
    args = [guard(a, eps) if a.free_symbols & set(COUNTS.values()) else a for a in node.args]
    if isinstance(node, (Best, BestWhere)):
        f = args[0]
        d = args[1] if isinstance(node, BestWhere) else None
        return PointTerm(f, _d(f, _TP, _FN), _d(f, _FP, _TN), d,
                         None if d is None else _d(d, _TP, _FN), None if d is None else _d(d, _FP, _TN))
    y, x = args[:2]
    if isinstance(node, AreaWithin):
        lo, hi = args[2:]
        if (lo > hi) is sympy.true:
            raise MetricError(f"area(y, x, {lo}, {hi}): the range [lo, hi] is empty; write lo <= hi")
        x = sympy.Min(sympy.Max(x, lo), hi)  # the relaxed cut: x clipped per segment
    x1, y1 = x.xreplace(NEXT), y.xreplace(NEXT)
    if isinstance(node, (Area, AreaWithin)):
        term = (x - x1) * (y + y1) / 2
    elif isinstance(node, Steps):
        term = (x - x1) * y
    else:  # pragma: no cover - every reduction is one of the above
        raise MetricError(f"internal: unknown reduction {type(node).__name__}")
    return PairTerm(term, _d(term, _TP, _FN), _d(term, _FP, _TN),
                    _d(term, NEXT[_TP], NEXT[_FN]), _d(term, NEXT[_FP], NEXT[_TN]))


def guard_outer(expr: sympy.Expr, variables: set[sympy.Symbol], eps: sympy.Expr = EPS) -> sympy.Expr:
    """The eps policy of :func:`metricc.analysis.counts.guard` for the outer expression: a
    denominator ``d`` over the reduction values and totals becomes ``d + eps`` where it is
    nonnegative (``P``, ``N``), ``d/(d^2 + eps^2)`` in place of ``1/d`` where its sign is open
    (a reduction's value); a root or log argument ``r`` becomes ``r + eps``.

    >>> P, r = sympy.Symbol("P"), sympy.Symbol("r0")
    >>> guard_outer(r / P + 1 / r, {P, r})
    r0/(eps**2 + r0**2) + r0/(P + eps)
    """
    totals = {s: sympy.Symbol(s.name, nonnegative=True) for s in TOTALS.values()}

    def visit(e: sympy.Expr) -> sympy.Expr:
        if not e.args or not e.free_symbols & variables:
            return e
        args = [visit(a) for a in e.args]
        if isinstance(e, sympy.Pow) and args[1].is_number and (args[1].is_negative or not args[1].is_integer):
            base, exp = args
            if exp.is_integer and not e.base.xreplace(totals).is_nonnegative:
                return sympy.Pow(base / (base**2 + eps**2), -exp)
            return sympy.Pow(base + eps, exp)
        if isinstance(e, sympy.log):
            return sympy.log(args[0] + eps)
        return e.func(*args)

    return visit(expr)


@dataclass(frozen=True)
class OuterForm:
    """The metric as ``h(r_0, r_1, ..., P, N)`` with ``r_j`` standing for ``nodes[j]``;
    ``value`` guarded by eps, ``partials[j] = dh/dr_j``."""

    nodes: tuple[CurveReduction, ...]
    symbols: tuple[sympy.Symbol, ...]
    value: sympy.Expr
    partials: tuple[sympy.Expr, ...]


def outer_form(expr: sympy.Expr, eps: sympy.Expr = EPS) -> OuterForm:
    """Split a resolved curve formula into its reductions and the guarded outer expression.

    >>> from metricc.language.parse import parse
    >>> outer_form(parse("1 - auroc").expr).partials
    (-1,)
    """
    nodes = tuple(reductions(expr))
    if not nodes:
        raise MetricError("a curve formula needs at least one of area(), steps(), best()")
    syms = tuple(sympy.Symbol(f"r{j}") for j in range(len(nodes)))
    outer = expr.xreplace(dict(zip(nodes, syms, strict=True)))
    if outer.free_symbols & set(COUNTS.values()):
        raise MetricError("internal: a count outside every reduction")
    value = guard_outer(outer, {*syms, *TOTALS.values()}, eps)
    # differentiated over real stand-ins: |r - 1/2|' is sign(r - 1/2), not re()/im() terms
    # that no kernel can run
    real = {s: sympy.Symbol(s.name, real=True) for s in syms}
    back = {v: k for k, v in real.items()}
    on_reals = value.xreplace(real)
    return OuterForm(nodes, syms, value, tuple(sympy.diff(on_reals, real[s]).xreplace(back) for s in syms))


def curve_undefined_where(expr: sympy.Expr) -> list[tuple[str, sympy.Expr]]:
    """Where the (unguarded) metric is undefined: ``(where, expression that vanishes)``, for
    every local denominator of every reduction (at some threshold) and of the outer expression.

    >>> from metricc.language.parse import parse
    >>> curve_undefined_where(parse("auroc").expr)
    [('area(...) at a threshold', FN + TP), ('area(...) at a threshold', FP + TN)]
    """
    out: list[tuple[str, sympy.Expr]] = []
    for node in reductions(expr):
        for arg in node.args:
            for e in undefined_where(arg) if arg.free_symbols & set(COUNTS.values()) else []:
                if (f"{node.keyword}(...) at a threshold", e) not in out:
                    out.append((f"{node.keyword}(...) at a threshold", e))
    form = outer_form(expr, sympy.S.Zero)
    for e in sympy.preorder_traversal(form.value):
        if isinstance(e, sympy.Pow) and e.exp.is_negative and e.base.free_symbols:
            out.append(("the outer expression", e.base))
    return out
