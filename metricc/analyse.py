"""Stage 2: simplify a metric, differentiate it, and find where it is undefined.

Everything here is SymPy only (no torch), so ``metricc grad`` answers fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .parse import COUNTS

__all__ = [
    "EPS",
    "Analysis",
    "analyse",
    "backward_coefficients",
    "guard",
    "partials",
    "simplify",
    "undefined_where",
]

#: The symbol standing for the zero-division guard in guarded expressions.
EPS = sympy.Symbol("eps", positive=True)

_ORDER = tuple(COUNTS)
_TO_POSITIVE = {s: sympy.Symbol(k, positive=True) for k, s in COUNTS.items()}
_FROM_POSITIVE = {v: k for k, v in _TO_POSITIVE.items()}
#: Counts as nonnegative reals, for differentiating |x| and min/max correctly.
TO_NONNEGATIVE = {s: sympy.Symbol(k, nonnegative=True) for k, s in COUNTS.items()}
FROM_NONNEGATIVE = {v: k for k, v in TO_NONNEGATIVE.items()}


def simplify(expr: sympy.Expr) -> sympy.Expr:
    """A cheap canonical form: the shortest of a few rational rewrites.

    ``sympy.simplify`` takes seconds on MCC-like formulas; these rewrites take
    milliseconds and are exact, which is all the emitter and the reader need.
    """
    # Counts are nonnegative, so e.g. sqrt(TP**2) is TP; SymPy only uses that
    # with positive symbols, swapped in and out here.
    expr = expr.xreplace(_TO_POSITIVE)
    candidates = [expr]
    try:
        together = sympy.together(expr)
        candidates.append(together)
        candidates.append(sympy.factor_terms(sympy.cancel(together)))
    except (sympy.PolynomialError, TypeError, ValueError):  # pragma: no cover - exotic input
        pass
    best = min(candidates, key=lambda e: (sympy.count_ops(e), len(str(e))))
    return best.xreplace(_FROM_POSITIVE)


def partials(expr: sympy.Expr) -> dict[str, sympy.Expr]:
    """``{"TP": d expr/d TP, ...}``, simplified; zero for counts it does not use."""
    real = expr.xreplace(TO_NONNEGATIVE)
    return {
        k: simplify(sympy.diff(real, TO_NONNEGATIVE[s]).xreplace(FROM_NONNEGATIVE))
        if s in expr.free_symbols else sympy.Integer(0)
        for k, s in COUNTS.items()
    }


def guard(expr: sympy.Expr, eps: sympy.Expr = EPS) -> sympy.Expr:
    """Add ``eps`` to every denominator, root and log argument.

    This is the zero-division policy of the relaxed loss: exact where the
    metric is defined up to O(eps), finite where it is not.
    """

    def visit(e: sympy.Expr) -> sympy.Expr:
        if not e.args or not any(s.name in COUNTS for s in e.free_symbols):
            return e
        args = [visit(a) for a in e.args]
        if isinstance(e, sympy.Pow):
            base, exp = args
            if exp.is_number and (exp.is_negative or not exp.is_integer):
                return sympy.Pow(base + eps, exp)
            return sympy.Pow(base, exp)
        if isinstance(e, sympy.log):
            return sympy.log(args[0] + eps)
        return e.func(*args)

    return visit(expr)


def backward_coefficients(
    expr: sympy.Expr, symbols: dict[sympy.Symbol, sympy.Symbol] | None = None
) -> tuple[sympy.Expr, sympy.Expr]:
    """``(g1, g0) = (f_TP - f_FN, f_FP - f_TN)``: d metric / d a_i is ``y g1 + (1-y) g0``.

    This is DESIGN.md section 3: a soft prediction ``a_i`` moves TP and FN
    (if ``y_i = 1``) or FP and TN (if ``y_i = 0``) in opposite directions.
    """
    tp, fp, fn, tn = ((symbols or {}).get(COUNTS[k], COUNTS[k]) for k in _ORDER)
    g1 = sympy.diff(expr, tp) - sympy.diff(expr, fn)
    g0 = sympy.diff(expr, fp) - sympy.diff(expr, tn)
    return g1, g0


def undefined_where(expr: sympy.Expr) -> list[sympy.Expr]:
    """Factors that make the metric undefined when they are zero (or negative under a root/log).

    Returned as expressions ``d``; the metric is undefined where ``d = 0``.
    """
    found: list[sympy.Expr] = []

    def add(d: sympy.Expr) -> None:
        if not d.free_symbols:
            return
        num = sympy.numer(sympy.together(d))
        try:
            factors = [f for f, _ in sympy.factor_list(num)[1]]
        except sympy.PolynomialError:  # roots/logs inside: keep it whole
            factors = [num]
        if len(factors) == 1:
            factors = [d if sympy.denom(sympy.together(d)) == 1 else num]
        for f in factors:
            if f.free_symbols and all(sympy.expand(f - g) != 0 for g in found):
                found.append(f)

    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and node.exp.is_number:
            if node.exp.is_negative:
                add(node.base)
            elif not node.exp.is_integer:
                add(node.base)
        elif isinstance(node, sympy.log):
            add(node.args[0])
    return found


@dataclass(frozen=True)
class Analysis:
    """What stage 2 knows about a metric."""

    expr: sympy.Expr
    gradient: dict[str, sympy.Expr]
    undefined: list[sympy.Expr]


def analyse(expr: sympy.Expr) -> Analysis:
    """Simplify ``expr`` and compute its partials and undefined set."""
    simple = simplify(expr)
    return Analysis(simple, partials(simple), undefined_where(simple))
