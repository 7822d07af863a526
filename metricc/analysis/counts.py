"""Stage 2: simplify a metric, differentiate it, and find where it is undefined.

Everything here is SymPy only (no torch, no lark), so ``metricc grad`` answers
fast. :mod:`metricc.analysis.counts_check` builds the report of ``Metric.check()`` on top of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import sympy

from ..language.limits import check_constants
from ..language.symbols import COUNTS, EPS, FROM_NONNEGATIVE, FROM_POSITIVE, TO_NONNEGATIVE, TO_POSITIVE
from .budget import BudgetExceeded, bounded, limit, remaining, spent, without_proofs
from .guard import guard_node
from .size import MAX_EXPANSION, common_denominator_size, derivative, expansion_size, rename, small_enough, tame

__all__ = [
    "EPS",
    "MAX_EXPANSION",
    "NOT_DIFFERENTIABLE",
    "UNDEFINED",
    "Analysis",
    "Singularity",
    "analyse",
    "backward_coefficients",
    "expansion_size",
    "guard",
    "is_nonnegative",
    "partials",
    "simplify",
    "singularities",
    "undefined_where",
]

#: Above this many operations even ``together`` is skipped (seconds per call).
MAX_OPS = 300
#: CPU seconds one :func:`simplify` may take (in a worker, :func:`metricc.analysis.budget.bounded`).
SIMPLIFY_SECONDS = 1.0


def simplify(expr: sympy.Expr) -> sympy.Expr:
    """A cheap canonical form: the shortest of a few rational rewrites.

    ``sympy.simplify`` takes seconds on MCC-like formulas; these rewrites take
    milliseconds and are exact, which is all the emitter and the reader need.
    Expressions too big to multiply out (:data:`MAX_EXPANSION`), met once the enclosing
    :func:`metricc.analysis.budget.limit` is spent, or whose rewrites take more than
    :data:`SIMPLIFY_SECONDS` of CPU (in a worker: ``bounded``) keep the form they have.

    >>> simplify(sympy.sympify("TP/(TP + FP) + FP/(TP + FP)"))
    1
    """
    # Counts are nonnegative, so e.g. sqrt(TP**2) is TP; SymPy only uses that
    # with positive symbols, swapped in and out here.
    expr = rename(expr, TO_POSITIVE)
    if spent() or sympy.count_ops(expr) > MAX_OPS or common_denominator_size(expr) > MAX_EXPANSION:
        return rename(expr, FROM_POSITIVE)
    try:
        best = bounded(_rewrite, expr, seconds=min(SIMPLIFY_SECONDS, remaining()), inline=tame(expr))
    except BudgetExceeded:  # a single cancel() that runs away: keep the unsimplified form
        best = expr
    return rename(best, FROM_POSITIVE)


def _rewrite(expr: sympy.Expr) -> sympy.Expr:
    """The shortest of ``expr``, ``together(expr)`` and its cancelled form (positive symbols)."""
    candidates = [expr]
    try:
        together = sympy.together(expr)
        candidates.append(together)
        if small_enough(together):
            candidates.append(sympy.factor_terms(sympy.cancel(together)))
    except (sympy.PolynomialError, TypeError, ValueError):  # pragma: no cover - exotic input
        pass
    return min(candidates, key=lambda e: (sympy.count_ops(e), len(str(e))))


def partials(expr: sympy.Expr) -> dict[str, sympy.Expr]:
    """``{"TP": d expr/d TP, ...}``, simplified; zero for counts it does not use."""
    real = rename(expr, TO_NONNEGATIVE)
    out = {
        k: simplify(rename(sympy.diff(real, TO_NONNEGATIVE[s]), FROM_NONNEGATIVE))
        if s in expr.free_symbols else sympy.Integer(0)
        for k, s in COUNTS.items()
    }
    for k, d in out.items():
        check_constants(d, f"d/d{k} of the formula")
    return out


def is_nonnegative(e: sympy.Expr) -> bool:
    """Whether SymPy shows ``e >= 0`` for all nonnegative counts (``False``: not shown)."""
    return bool(e.xreplace(TO_NONNEGATIVE).is_nonnegative)


def guard(expr: sympy.Expr, eps: sympy.Expr = EPS) -> sympy.Expr:
    """The zero-division policy of the relaxed loss (:mod:`metricc.analysis.guard`,
    ``docs/numerics.md``): every singular spot of the formula gets ``eps``, nothing else changes.

    The result is an ordinary SymPy expression, so its exact derivative is the
    backward pass; with ``eps = 0`` it is the metric again.

    >>> from sympy import Symbol
    >>> TP, FP = Symbol("TP"), Symbol("FP")
    >>> guard(TP/(TP + FP))
    TP/(FP + TP + eps)
    >>> guard(TP/(TP - FP))
    TP*(-FP + TP)/(eps**2 + (-FP + TP)**2)
    """

    def visit(e: sympy.Expr) -> sympy.Expr:
        if not e.args or not any(s.name in COUNTS for s in e.free_symbols):
            return e
        return guard_node(e, [visit(a) for a in e.args], eps, is_nonnegative)

    return visit(expr)


def backward_coefficients(
    expr: sympy.Expr, symbols: dict[sympy.Symbol, sympy.Symbol] | None = None
) -> tuple[sympy.Expr, sympy.Expr]:
    """``(g1, g0) = (f_TP - f_FN, f_FP - f_TN)``: d metric / d a_i is ``y g1 + (1-y) g0``.

    A soft prediction ``a_i`` moves TP and FN (if ``y_i = 1``) or FP and TN (if
    ``y_i = 0``) in opposite directions, so these two numbers per confusion matrix
    are all the backward pass needs (``docs/architecture.md``).
    """
    tp, fp, fn, tn = ((symbols or {}).get(s, s) for s in COUNTS.values())
    g1 = derivative(expr, tp) - derivative(expr, fn)
    g0 = derivative(expr, fp) - derivative(expr, tn)
    return g1, g0


def undefined_where(expr: sympy.Expr) -> list[sympy.Expr]:
    """Expressions whose vanishing leaves the metric undefined (or, under a root or log, whose
    negative values do).

    Denominators, log arguments and bases of negative powers, split into their
    factors; factors that cannot vanish for nonnegative counts (``TP + 1``) and
    roots of nonnegative expressions (``sqrt(TP)`` is 0 at 0, merely not
    differentiable) are left out. :func:`metricc.analysis.counts_check.check` says which kind each one is.

    >>> undefined_where(sympy.sympify("TP/(TP+FP) + sqrt(TN)/(FN+1)"))
    [FP + TP]
    """
    return [s.expr for s in singularities(expr, explain=False)[0]]


@dataclass(frozen=True)
class Analysis:
    """What stage 2 knows about a metric.

    ``gradient`` and ``undefined`` are computed on first use, each bounded
    (:func:`metricc.analysis.budget.bounded`): the loss does not need them.
    """

    expr: sympy.Expr

    @cached_property
    def gradient(self) -> dict[str, sympy.Expr]:
        """``{"TP": d expr/d TP, ...}``, simplified (in one worker call; unsimplified past it)."""
        return self.gradient_result[0]

    @cached_property
    def gradient_result(self) -> tuple[dict[str, sympy.Expr], bool]:
        """``(gradient, simplified)``: ``simplified`` is False where the budget cut it short."""
        with limit(remaining()) as budget:  # the same deadline, to see whether a step gave up
            try:
                found = bounded(partials, self.expr, seconds=min(4 * SIMPLIFY_SECONDS, remaining()),
                                inline=tame(self.expr))
            except BudgetExceeded:
                found = None
        if found is not None:
            return found, not budget.exhausted
        # the plain derivatives, unsimplified
        return bounded(without_proofs, partials, self.expr, seconds=4 * SIMPLIFY_SECONDS), False

    @cached_property
    def undefined(self) -> list[sympy.Expr]:
        """Factors whose vanishing leaves the metric undefined."""
        try:
            return bounded(undefined_where, self.expr, seconds=4 * SIMPLIFY_SECONDS,  # type: ignore[no-any-return]
                           inline=tame(self.expr))
        except BudgetExceeded:  # without factoring denominators
            return bounded(without_proofs, undefined_where, self.expr,  # type: ignore[no-any-return]
                           seconds=4 * SIMPLIFY_SECONDS)


def analyse(expr: sympy.Expr) -> Analysis:
    """Simplify ``expr``; its partials and undefined set follow when asked for."""
    return Analysis(simplify(expr))


# --- where a metric is undefined or not differentiable ---------------------------------------

UNDEFINED = "undefined"
NOT_DIFFERENTIABLE = "not differentiable"


@dataclass(frozen=True)
class Singularity:
    """One piece of the set where a metric is undefined or not differentiable.

    ``expr`` is over ``Symbol('TP')`` ...; the set is ``expr relation`` (``relation``
    is ``"= 0"``, ``"< 0"`` or ``"<= 0"``). ``kind`` is ``"undefined"`` (no value
    there: ``x/0``, ``0/0``, ``log 0``) or ``"not differentiable"`` (a value but no
    derivative: ``sqrt`` at 0, ``|x|`` at 0, ``min``/``max`` at a tie).
    """

    expr: sympy.Expr
    relation: str
    kind: str
    reason: str
    text: str = ""

    def __str__(self) -> str:
        return f"{self.text or f'{self.expr} {self.relation}'}  ({self.reason})"


def _positive(e: sympy.Expr) -> sympy.Expr:
    return e.xreplace(TO_POSITIVE)


def _count_symbols(expr: sympy.Expr) -> set[sympy.Symbol]:
    return {s for s in expr.free_symbols if s.name in COUNTS}


def _linear_positive(f: sympy.Expr) -> bool:
    """``f`` is a combination of counts with positive coefficients (zero iff its counts are)."""
    counts = sorted(_count_symbols(f), key=str)
    if not counts or not f.is_polynomial(*counts):
        return False
    try:
        poly = sympy.Poly(f, *counts)
    except sympy.PolynomialError:  # pragma: no cover
        return False
    return (poly.total_degree() == 1 and poly.coeff_monomial(1) == 0
            and all(c > 0 for c in poly.coeffs()))


def _zero_set_inside(f: sympy.Expr, g: sympy.Expr) -> bool:
    """True if ``g`` surely vanishes wherever ``f`` does (``f`` a positive combination)."""
    if not _linear_positive(f):
        return False
    zero = {s: sympy.Integer(0) for s in _count_symbols(f)}
    try:
        return sympy.expand(g.xreplace(zero)) == 0
    except (ValueError, TypeError, ArithmeticError):  # pragma: no cover
        return False


def _zero_factors(d: sympy.Expr) -> list[sympy.Expr]:
    """The factors of ``d`` that can vanish for nonnegative counts.

    A factor of the numerator that vanishes only where ``d``'s own denominator
    does (``TP + n`` in ``TP/n + 1``) is left out: that set is reported as a
    division by zero already.
    """
    num, den = sympy.fraction(sympy.together(d))
    try:
        factors = [f for f, _ in sympy.factor_list(num)[1]] if small_enough(num) and not spent() else [num]
    except sympy.PolynomialError:  # roots/logs inside: keep it whole
        factors = [num]
    if len(factors) == 1:
        factors = [d if den == 1 else num]
    return [f for f in factors if _count_symbols(f)
            and not (_nonneg(f).is_positive or _nonneg(f).is_negative)
            and (den == 1 or not _zero_set_inside(f, den))]


def _nonneg(e: sympy.Expr) -> sympy.Expr:
    return e.xreplace(TO_NONNEGATIVE)


def _division(expr: sympy.Expr, f: sympy.Expr, power: sympy.Expr, explain: bool) -> str:
    """0/0 or x/0 where the factor ``f`` of a denominator of ``expr`` (to ``power``) vanishes."""
    if not explain or spent() or not _linear_positive(f):
        return "division by zero"
    # A positive combination of counts vanishes only where each of its counts is 0.
    zero = {s: sympy.Integer(0) for s in _count_symbols(f)}
    try:
        rest = _positive((expr * f ** power).xreplace(zero))
    except (ValueError, TypeError, ArithmeticError):  # e.g. Max(nan, ...) refuses to build
        return "division by zero"
    if rest.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo):
        return "division by zero"
    rest = sympy.together(rest)
    if rest == 0:
        return "0/0"
    num = sympy.numer(rest).xreplace(FROM_POSITIVE)
    if not num.free_symbols:
        return "x/0"
    return f"x/0; 0/0 where also {num} = 0"


class _Pieces:
    """The undefined and the not-differentiable pieces found so far, each once."""

    def __init__(self) -> None:
        self.undefined: list[Singularity] = []
        self.rough: list[Singularity] = []
        self.seen: set[tuple[str, sympy.Expr]] = set()

    def add(self, into: list[Singularity], s: Singularity) -> None:
        # One expand per piece (comparing each new piece with all earlier ones was
        # quadratic: a min() of n arguments has n(n-1)/2 branch switches).
        big = spent() or expansion_size(s.expr) > MAX_EXPANSION
        key = (s.relation, s.expr if big else sympy.expand(s.expr))
        if key not in self.seen:
            self.seen.add(key)
            into.append(s)


def _node_pieces(node: sympy.Expr, expr: sympy.Expr, explain: bool, out: _Pieces) -> None:
    """What one node of ``expr`` adds: a power, log, abs or min/max over the counts."""
    if isinstance(node, sympy.Pow) and node.exp.is_number and _count_symbols(node.base):
        base, exp = node.base, node.exp
        # Signs on positive counts: where a denominator inside vanishes is reported apart.
        base_nonneg = bool(_positive(base).is_nonnegative)
        if not exp.is_integer and not base_nonneg:
            out.add(out.undefined, Singularity(base, "< 0", UNDEFINED, "fractional power of a negative number"))
        if exp.is_negative:
            for f in _zero_factors(base):
                out.add(out.undefined, Singularity(f, "= 0", UNDEFINED, _division(expr, f, -exp, explain)))
        elif not exp.is_integer and exp < 1:
            for f in _zero_factors(base):
                out.add(out.rough, Singularity(f, "= 0", NOT_DIFFERENTIABLE,
                                               f"power {exp} at 0 has an infinite slope"))
    elif isinstance(node, sympy.log) and _count_symbols(node.args[0]):
        arg = node.args[0]
        if _positive(arg).is_nonnegative:
            for f in _zero_factors(arg):
                out.add(out.undefined, Singularity(f, "= 0", UNDEFINED, "log of 0"))
        else:
            out.add(out.undefined, Singularity(arg, "<= 0", UNDEFINED, "log of a number <= 0"))
    elif isinstance(node, sympy.Abs) and _count_symbols(node.args[0]):
        arg = node.args[0]
        if not (_nonneg(arg).is_positive or _nonneg(arg).is_negative):
            out.add(out.rough, Singularity(arg, "= 0", NOT_DIFFERENTIABLE, "|x| has a kink at 0"))
    elif isinstance(node, (sympy.Min, sympy.Max)):
        args = list(node.args)
        for i, a in enumerate(args):
            for b in args[i + 1:]:
                if _count_symbols(a - b):
                    out.add(out.rough, Singularity(a - b, "= 0", NOT_DIFFERENTIABLE,
                                                   f"{type(node).__name__.lower()} switches branch",
                                                   text=f"{a} = {b}"))


def singularities(expr: sympy.Expr, explain: bool = True
                  ) -> tuple[tuple[Singularity, ...], tuple[Singularity, ...]]:
    """(undefined, not differentiable) pieces of ``expr`` over nonnegative counts.

    ``explain`` tells 0/0 from x/0 for each denominator (a few substitutions more).
    """
    pieces = _Pieces()
    for node in sympy.preorder_traversal(expr):
        _node_pieces(node, expr, explain, pieces)
    return tuple(pieces.undefined), tuple(pieces.rough)
