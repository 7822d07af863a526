"""Stage 2: simplify a metric, differentiate it, and find where it is undefined.

Everything here is SymPy only (no torch), so ``metricc grad`` answers fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import sympy

from .budget import evaluate, evaluator, float_evaluator, limit, spent
from .parse import COUNTS, check_constants

__all__ = [
    "DIRECTIONS",
    "EPS",
    "Analysis",
    "CheckReport",
    "Monotonicity",
    "Singularity",
    "analyse",
    "backward_coefficients",
    "check",
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


#: Above this many terms (see :func:`expansion_size`) ``cancel`` and ``factor``
#: are skipped: their cost grows with the expanded polynomial, and an average
#: of six named metrics, or ``(n + 1)^16``, would take minutes.
MAX_EXPANSION = 400
#: Above this many operations even ``together`` is skipped (seconds per call).
MAX_OPS = 300
_SIZE_CAP = 10**9


def expansion_size(expr: sympy.Expr) -> int:
    """An upper bound on the number of terms of ``expr`` multiplied out.

    Roots, logs and other functions count as single atoms (``cancel`` treats
    them so). Capped at 10**9 so it stays cheap on huge exponents.

    >>> expansion_size(sympy.sympify("(TP + FP)**3 * (FN + 1)"))
    16
    """

    def size(e: sympy.Expr) -> int:
        if isinstance(e, sympy.Add):
            return min(sum(size(a) for a in e.args), _SIZE_CAP)
        if isinstance(e, sympy.Mul):
            out = 1
            for a in e.args:
                out = min(out * size(a), _SIZE_CAP)
            return out
        if isinstance(e, sympy.Pow) and e.exp.is_Rational:
            # n**(9059/100) is n**90 * n**(59/100) to cancel()
            base = size(e.base)
            n = min(abs(int(e.exp)), 64)
            return _SIZE_CAP if base > 1 and n * base.bit_length() > 30 else base**n
        return 1

    return size(expr)


def _small(expr: sympy.Expr) -> bool:
    num, den = sympy.fraction(expr)
    return expansion_size(num) + expansion_size(den) <= MAX_EXPANSION


def simplify(expr: sympy.Expr) -> sympy.Expr:
    """A cheap canonical form: the shortest of a few rational rewrites.

    ``sympy.simplify`` takes seconds on MCC-like formulas; these rewrites take
    milliseconds and are exact, which is all the emitter and the reader need.
    Expressions too big to multiply out cheaply (:data:`MAX_EXPANSION`), or met
    once the enclosing :func:`metricc.budget.limit` is spent, keep the form they have.
    """
    # Counts are nonnegative, so e.g. sqrt(TP**2) is TP; SymPy only uses that
    # with positive symbols, swapped in and out here.
    expr = expr.xreplace(_TO_POSITIVE)
    candidates = [expr]
    if spent() or sympy.count_ops(expr) > MAX_OPS:
        return expr.xreplace(_FROM_POSITIVE)
    try:
        together = sympy.together(expr)
        candidates.append(together)
        if _small(together):
            candidates.append(sympy.factor_terms(sympy.cancel(together)))
    except (sympy.PolynomialError, TypeError, ValueError):  # pragma: no cover - exotic input
        pass
    best = min(candidates, key=lambda e: (sympy.count_ops(e), len(str(e))))
    return best.xreplace(_FROM_POSITIVE)


def partials(expr: sympy.Expr) -> dict[str, sympy.Expr]:
    """``{"TP": d expr/d TP, ...}``, simplified; zero for counts it does not use."""
    real = expr.xreplace(TO_NONNEGATIVE)
    out = {
        k: simplify(sympy.diff(real, TO_NONNEGATIVE[s]).xreplace(FROM_NONNEGATIVE))
        if s in expr.free_symbols else sympy.Integer(0)
        for k, s in COUNTS.items()
    }
    for k, d in out.items():
        check_constants(d, f"d/d{k} of the formula")
    return out


def guard(expr: sympy.Expr, eps: sympy.Expr = EPS) -> sympy.Expr:
    """The zero-division policy of the relaxed loss (``docs/numerics.md``).

    Every singular spot of the formula gets ``eps``, and nothing else changes:

    * a denominator ``d`` (a negative power) that is ``>= 0`` for all
      nonnegative counts becomes ``d + eps``;
    * a denominator that can take either sign (``TPR - FPR``) becomes
      ``d / (d**2 + eps**2)`` in place of ``1/d``: odd in ``d``, smooth, within
      ``(eps/d)**2`` of ``1/d``, and bounded by ``1/(2 eps)`` (``d + eps`` would
      itself vanish at ``d = -eps``);
    * a root or log argument ``r`` becomes ``r + eps`` (finite derivative at 0),
      and so does the base of a power with a variable exponent.

    The result is an ordinary SymPy expression, so its exact derivative is the
    backward pass; with ``eps = 0`` it is the metric again.

    >>> from sympy import Symbol
    >>> TP, FP = Symbol("TP"), Symbol("FP")
    >>> guard(TP/(TP + FP))
    TP/(FP + TP + eps)
    >>> guard(TP/(TP - FP))
    TP*(-FP + TP)/(eps**2 + (-FP + TP)**2)
    """

    def nonnegative(e: sympy.Expr) -> bool:
        return bool(e.xreplace(TO_NONNEGATIVE).is_nonnegative)

    def visit(e: sympy.Expr) -> sympy.Expr:
        if not e.args or not any(s.name in COUNTS for s in e.free_symbols):
            return e
        args = [visit(a) for a in e.args]
        if isinstance(e, sympy.Pow):
            base, exp = args
            if not exp.is_number:
                # b**e = exp(e log b): log b needs the guard where b can be 0.
                if base.free_symbols and nonnegative(e.base):
                    return sympy.Pow(base + eps, exp)
                return sympy.Pow(base, exp)
            if exp.is_negative and exp.is_integer and not nonnegative(e.base):
                # 1/d -> d/(d^2 + eps^2), for denominators of either sign.
                return sympy.Pow(base / (base**2 + eps**2), -exp)
            if exp.is_negative or not exp.is_integer:
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
    """Expressions whose vanishing leaves the metric undefined (or, under a root or log, whose
    negative values do).

    Denominators, log arguments and bases of negative powers, split into their
    factors; factors that cannot vanish for nonnegative counts (``TP + 1``) and
    roots of nonnegative expressions (``sqrt(TP)`` is 0 at 0, merely not
    differentiable) are left out. :func:`check` says which kind each one is.

    >>> undefined_where(sympy.sympify("TP/(TP+FP) + sqrt(TN)/(FN+1)"))
    [FP + TP]
    """
    return [s.expr for s in _singularities(expr, explain=False)[0]]


@dataclass(frozen=True)
class Analysis:
    """What stage 2 knows about a metric.

    ``gradient`` and ``undefined`` are computed on first use: simplifying the
    partials is most of the cost of a compile (0.3 s for ``mcc``), and neither
    is needed to build the loss (the emitter differentiates the guarded form
    itself).
    """

    expr: sympy.Expr

    @cached_property
    def gradient(self) -> dict[str, sympy.Expr]:
        """``{"TP": d expr/d TP, ...}``, simplified."""
        return partials(self.expr)

    @cached_property
    def undefined(self) -> list[sympy.Expr]:
        """Factors whose vanishing leaves the metric undefined."""
        return undefined_where(self.expr)


def analyse(expr: sympy.Expr) -> Analysis:
    """Simplify ``expr``; its partials and undefined set follow when asked for."""
    return Analysis(simplify(expr))


# --- check(): where a metric is undefined, which way it moves, and its range ----------------

UNDEFINED = "undefined"
NOT_DIFFERENTIABLE = "not differentiable"
#: The verdicts :func:`check` gives for the monotonicity in one count.
DIRECTIONS = ("increasing", "decreasing", "constant", "mixed", "unknown")

# Counts at which the sampling fallback evaluates partials: log-uniform in
# [0.01, 1000] (ratios up to 1e5 between counts), as exact binary fractions so the
# confirming high-precision evaluation sees the same point. Fixed seed: reports are
# deterministic.
_SAMPLE_COUNT = 160


def _sample_points() -> list[tuple[float, float, float, float]]:
    import random

    rng = random.Random(20240607)
    points = [(1.0, 1.0, 1.0, 1.0), (3.0, 1.0, 2.0, 5.0)]
    while len(points) < _SAMPLE_COUNT:
        points.append(tuple(round(10 ** rng.uniform(-2, 3), 3) for _ in range(4)))  # type: ignore[misc]
    return points


_POINTS = _sample_points()
# Above this size (sympy.count_ops) the symbolic sign test gives up at once and
# leaves the verdict to sampling: together/factor/expand grow fast on nested
# fractions and take seconds. A size limit, not a time limit, so that reports are
# the same on every machine.
_SIZE_LIMIT = 60


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


@dataclass(frozen=True)
class Monotonicity:
    """How the metric moves as one count grows, the others fixed, over positive counts.

    ``direction`` is one of :data:`DIRECTIONS` (``increasing`` means the partial
    derivative is ``>= 0`` everywhere, not necessarily ``> 0``); ``method`` is
    ``"symbolic"`` (SymPy proved the sign) or ``"sampled"`` (the partial was
    evaluated at fixed sample points; a ``mixed`` verdict is then confirmed by two
    points of opposite sign evaluated to 30 digits, the others are not proofs).
    """

    count: str
    direction: str
    method: str

    def __str__(self) -> str:
        return f"{self.direction} ({self.method})"


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check` found about a metric; ``str()`` formats it for people.

    ``lower``/``upper`` are bounds SymPy proved (``None`` when it could not);
    ``sampled_range`` is the smallest and largest value seen at the sample
    points, a hint and not a proof.

    >>> r = check(sympy.sympify("2*TP/(2*TP+FP+FN)"))
    >>> r.monotonicity["TN"].direction, (r.lower, r.upper)
    ('constant', (0, 1))
    """

    expr: sympy.Expr
    undefined: tuple[Singularity, ...]
    not_differentiable: tuple[Singularity, ...]
    monotonicity: dict[str, Monotonicity]
    lower: sympy.Expr | None
    upper: sympy.Expr | None
    sampled_range: tuple[float, float] | None
    higher_is_better: bool | None = None
    #: The symbolic proofs ran out of time (:data:`metricc.budget.PROOF_SECONDS`);
    #: the verdicts they did not reach are sampled, and say so.
    budget_spent: bool = False

    def wrong_way(self, higher_is_better: bool | None = None) -> dict[str, str]:
        """``{count: why}`` for each count in which the metric moves against training.

        With ``higher_is_better`` the metric should not decrease with TP or TN nor
        increase with FP or FN (the reverse when lower is better). ``mixed`` and
        ``unknown`` are not flagged: they may be right in the region that matters.
        """
        hib = self.higher_is_better if higher_is_better is None else higher_is_better
        if hib is None:
            hib = True
        loss = "1 - metric" if hib else "the metric itself (lower is better)"
        out: dict[str, str] = {}
        for k, m in self.monotonicity.items():
            good_up = k in ("TP", "TN")
            bad = "decreasing" if good_up == hib else "increasing"
            if m.direction == bad:
                noun = {"TP": "true positives", "TN": "true negatives",
                        "FP": "false positives", "FN": "false negatives"}[k]
                verb = "penalises" if good_up else "rewards"
                out[k] = (f"the metric is {bad} in {k} ({m.method}), so minimising the loss "
                          f"{loss} {verb} {noun}")
        return out

    def __str__(self) -> str:
        lines = [f"metric: {self.expr}"]
        for title, items in (("undefined where", self.undefined),
                             ("not differentiable where", self.not_differentiable)):
            if items:
                lines.append(f"{title}:")
                lines.extend(f"  {s}" for s in items)
            else:
                lines.append(f"{title}: nowhere (for nonnegative counts)")
        lines.append("monotonicity (as each count grows, over positive counts):")
        lines.extend(f"  {k}: {m}" for k, m in self.monotonicity.items())
        lo = "?" if self.lower is None else str(self.lower)
        hi = "?" if self.upper is None else str(self.upper)
        if self.lower is None and self.upper is None:
            proven = "unknown"
        else:
            note = "; ? = unknown" if "?" in (lo, hi) else ""
            proven = f"within [{lo}, {hi}] (symbolic{note})"
        sampled = ""
        if self.sampled_range is not None:
            sampled = "; sampled values {:.4g} .. {:.4g}".format(*self.sampled_range)
        lines.append(f"range: {proven}{sampled}")
        if self.budget_spent:
            lines.append("note: symbolic proofs stopped at the time budget; verdicts marked "
                         "(sampled) are from sample points, not proofs")
        if self.higher_is_better is not None:
            wrong = self.wrong_way()
            direction = "higher is better" if self.higher_is_better else "lower is better"
            if wrong:
                lines.append(f"as a loss ({direction}): TRAINS THE WRONG WAY")
                lines.extend(f"  {why}" for why in wrong.values())
            else:
                lines.append(f"as a loss ({direction}): no count moves it the wrong way")
        return "\n".join(lines)


def _positive(e: sympy.Expr) -> sympy.Expr:
    return e.xreplace(_TO_POSITIVE)


def _sign(e: sympy.Expr, depth: int = 0) -> int | None:
    """``1`` if ``e >= 0`` for all positive counts, ``-1`` if ``<= 0``, ``0`` if ``e == 0``.

    ``None`` where SymPy cannot tell. ``e`` must be over positive count symbols.
    Tries SymPy's assumptions, then the signs of numerator and denominator, of
    each factor, and of the factored or expanded polynomial.
    """
    if e == 0:
        return 0
    if e.is_nonnegative:
        return 1
    if e.is_nonpositive:
        return -1
    if depth > 4 or spent() or sympy.count_ops(e) > _SIZE_LIMIT:
        return None
    if isinstance(e, sympy.Mul):
        result = 1
        for a in e.args:
            s = _sign(a, depth + 1)
            if s is None or s == 0:
                return s
            result *= s
        return result
    if isinstance(e, sympy.Pow) and e.exp.is_number:
        s = _sign(e.base, depth + 1)
        if s == 1:
            return 1
        if s == -1 and e.exp.is_integer:
            return -1 if e.exp % 2 else 1
        return None
    num, den = sympy.fraction(sympy.together(e))
    if den != 1:
        sn = _sign(num, depth + 1)
        if sn == 0:
            return 0
        sd = _sign(den, depth + 1)
        return None if sn is None or sd is None else sn * sd
    if isinstance(e, sympy.Add):
        for rewrite in (sympy.factor, sympy.expand):
            try:
                g = rewrite(e)
            except (sympy.PolynomialError, TypeError, ValueError):  # pragma: no cover
                continue
            if g == e:
                continue
            if g.is_nonnegative:
                return 1
            if g.is_nonpositive:
                return -1
            if isinstance(g, sympy.Mul):
                return _sign(g, depth + 1)
    return None


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


def _singularities(expr: sympy.Expr, explain: bool = True
                   ) -> tuple[tuple[Singularity, ...], tuple[Singularity, ...]]:
    """(undefined, not differentiable) pieces of ``expr`` over nonnegative counts.

    ``explain`` tells 0/0 from x/0 for each denominator (a few substitutions more).
    """
    undefined: list[Singularity] = []
    rough: list[Singularity] = []

    def nonneg(e: sympy.Expr) -> sympy.Expr:
        return e.xreplace(TO_NONNEGATIVE)

    def zero_factors(d: sympy.Expr) -> list[sympy.Expr]:
        """The factors of ``d`` that can vanish for nonnegative counts.

        A factor of the numerator that vanishes only where ``d``'s own denominator
        does (``TP + n`` in ``TP/n + 1``) is left out: that set is reported as a
        division by zero already.
        """
        num, den = sympy.fraction(sympy.together(d))
        try:
            factors = [f for f, _ in sympy.factor_list(num)[1]] if _small(num) else [num]
        except sympy.PolynomialError:  # roots/logs inside: keep it whole
            factors = [num]
        if len(factors) == 1:
            factors = [d if den == 1 else num]
        return [f for f in factors if _count_symbols(f)
                and not (nonneg(f).is_positive or nonneg(f).is_negative)
                and (den == 1 or not _zero_set_inside(f, den))]

    seen: set[tuple[str, sympy.Expr]] = set()

    def add(into: list[Singularity], s: Singularity) -> None:
        # One expand per piece (comparing each new piece with all earlier ones was
        # quadratic: a min() of n arguments has n(n-1)/2 branch switches).
        key = (s.relation, sympy.expand(s.expr))
        if key not in seen:
            seen.add(key)
            into.append(s)

    def division(f: sympy.Expr, power: sympy.Expr) -> str:
        """0/0 or x/0 where the factor ``f`` of a denominator (to ``power``) vanishes."""
        if not explain or not _linear_positive(f):
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
        num = sympy.numer(rest).xreplace(_FROM_POSITIVE)
        if not num.free_symbols:
            return "x/0"
        return f"x/0; 0/0 where also {num} = 0"

    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and node.exp.is_number and _count_symbols(node.base):
            base, exp = node.base, node.exp
            # Signs on positive counts: where a denominator inside vanishes is reported apart.
            base_nonneg = bool(_positive(base).is_nonnegative)
            if not exp.is_integer and not base_nonneg:
                add(undefined, Singularity(base, "< 0", UNDEFINED,
                                           "fractional power of a negative number"))
            if exp.is_negative:
                for f in zero_factors(base):
                    add(undefined, Singularity(f, "= 0", UNDEFINED, division(f, -exp)))
            elif not exp.is_integer and exp < 1:
                for f in zero_factors(base):
                    add(rough, Singularity(f, "= 0", NOT_DIFFERENTIABLE,
                                           f"power {exp} at 0 has an infinite slope"))
        elif isinstance(node, sympy.log) and _count_symbols(node.args[0]):
            arg = node.args[0]
            if _positive(arg).is_nonnegative:
                for f in zero_factors(arg):
                    add(undefined, Singularity(f, "= 0", UNDEFINED, "log of 0"))
            else:
                add(undefined, Singularity(arg, "<= 0", UNDEFINED,
                                           "log of a number <= 0"))
        elif isinstance(node, sympy.Abs) and _count_symbols(node.args[0]):
            arg = node.args[0]
            if not (nonneg(arg).is_positive or nonneg(arg).is_negative):
                add(rough, Singularity(arg, "= 0", NOT_DIFFERENTIABLE, "|x| has a kink at 0"))
        elif isinstance(node, (sympy.Min, sympy.Max)):
            args = list(node.args)
            for i, a in enumerate(args):
                for b in args[i + 1:]:
                    if _count_symbols(a - b):
                        add(rough, Singularity(a - b, "= 0", NOT_DIFFERENTIABLE,
                                               f"{type(node).__name__.lower()} switches branch",
                                               text=f"{a} = {b}"))
    return tuple(undefined), tuple(rough)


def _evaluator(e: sympy.Expr) -> Any:
    """``e`` as a plain-float function of (TP, FP, FN, TN), or ``None`` if SymPy cannot print it."""
    try:
        return float_evaluator(e, list(COUNTS.values()))
    except (NameError, SyntaxError, TypeError, KeyError):  # pragma: no cover - exotic nodes
        return None


def _values(fn: Any) -> list[tuple[int, float]]:
    out = []
    for i, p in enumerate(_POINTS):
        try:
            v = complex(fn(*p))
        except (ZeroDivisionError, ValueError, OverflowError, TypeError):
            continue
        if v.imag == 0 and math.isfinite(v.real):
            out.append((i, v.real))
    return out


@lru_cache(maxsize=64)
def _precise(e: sympy.Expr) -> Any:
    return evaluator(e, list(COUNTS.values()))


def _confirmed_sign(e: sympy.Expr, index: int) -> int:
    """The sign of ``e`` at sample point ``index``, evaluated to 30 digits (0 if unsure).

    mpmath, not ``e.xreplace(point)``: SymPy factors integers to evaluate a rational
    to a rational power, which hangs on the partials of ``mcc^f1``.
    """
    v = evaluate(_precise(e), _POINTS[index])
    if v is None or v.imag != 0 or abs(v.real) < 1e-20:
        return 0
    return 1 if v.real > 0 else -1


def _sampled_direction(d: sympy.Expr) -> str:
    """Monotonicity from the sign of the partial ``d`` at the sample points."""
    fn = _evaluator(d)
    vals = _values(fn) if fn is not None else []
    if not vals:
        return "unknown"
    scale = max(abs(v) for _, v in vals)
    if scale == 0:
        return "constant"
    tol = 1e-9 * scale
    pos = sorted((i for i, v in vals if v > tol), key=lambda i: -abs(dict(vals)[i]))
    neg = sorted((i for i, v in vals if v < -tol), key=lambda i: -abs(dict(vals)[i]))
    # Floats can get the sign of a tiny partial wrong; confirm a witness of each sign.
    has_pos = any(_confirmed_sign(d, i) == 1 for i in pos[:3])
    has_neg = any(_confirmed_sign(d, i) == -1 for i in neg[:3])
    if has_pos and has_neg:
        return "mixed"
    if has_pos:
        return "increasing"
    if has_neg:
        return "decreasing"
    return "constant" if not pos and not neg else "unknown"


def _monotonicity(gradient: dict[str, sympy.Expr]) -> dict[str, Monotonicity]:
    out: dict[str, Monotonicity] = {}
    for k in COUNTS:
        d = gradient[k]
        if d == 0:
            out[k] = Monotonicity(k, "constant", "symbolic")
            continue
        sampled = _sampled_direction(d)
        if sampled == "mixed":  # two confirmed witnesses: no proof of a sign can exist
            out[k] = Monotonicity(k, "mixed", "sampled")
            continue
        s = _sign(_positive(d))
        if s is not None:
            direction = {1: "increasing", -1: "decreasing", 0: "constant"}[s]
            out[k] = Monotonicity(k, direction, "symbolic")
        else:
            out[k] = Monotonicity(k, sampled, "sampled")
    return out


def _bounds(expr: sympy.Expr) -> tuple[sympy.Expr | None, sympy.Expr | None,
                                       tuple[float, float] | None]:
    fn = _evaluator(expr)
    vals = [v for _, v in _values(fn)] if fn is not None else []
    sampled = (min(vals), max(vals)) if vals else None
    e = _positive(expr)
    lower = upper = None
    # Candidates the samples do not already refute, tightest first.
    for c in (1, 0, -1):
        if (sampled is None or sampled[0] >= c - 1e-12) and _sign(e - c) == 1:
            lower = sympy.Integer(c)
            break
    for c in (-1, 0, 1):
        if (sampled is None or sampled[1] <= c + 1e-12) and _sign(c - e) == 1:
            upper = sympy.Integer(c)
            break
    # |metric| <= 1 is often provable through metric**2: for num/den that is
    # den**2 - num**2 >= 0 (MCC: a polynomial with nonnegative coefficients).
    if ((lower is None or upper is None) and sampled is not None
            and -1 - 1e-12 <= sampled[0] and sampled[1] <= 1 + 1e-12):
        num, den = sympy.fraction(sympy.together(e))
        gap = den**2 - num**2
        if sympy.count_ops(gap) <= _SIZE_LIMIT and _sign(sympy.expand(gap)) == 1:
            lower = sympy.Integer(-1) if lower is None else lower
            upper = sympy.Integer(1) if upper is None else upper
    return lower, upper, sampled


def check(expr: sympy.Expr, gradient: dict[str, sympy.Expr] | None = None, *,
          higher_is_better: bool | None = None) -> CheckReport:
    """Where ``expr`` is undefined or not differentiable, its monotonicity and range.

    ``expr`` must be over the counts only (parameters substituted). ``gradient``
    (the partials, as :func:`partials` returns) saves recomputing them. With
    ``higher_is_better`` the report also says whether the loss trains the right way.

    >>> print(check(sympy.sympify("TP/(TP+FP)")).monotonicity["FP"])
    decreasing (symbolic)
    """
    extra = {s.name for s in expr.free_symbols} - set(COUNTS)
    if extra:
        from .errors import MetricError

        raise MetricError(f"check() needs a formula over TP, FP, FN, TN only; give values to "
                          f"{', '.join(sorted(extra))}")
    with limit() as budget:  # proofs give up after PROOF_SECONDS; verdicts fall back to samples
        gradient = partials(expr) if gradient is None else gradient
        undefined, rough = _singularities(expr)
        lower, upper, sampled = _bounds(expr)
        monotonicity = _monotonicity(gradient)
    return CheckReport(expr, undefined, rough, monotonicity, lower, upper, sampled,
                       higher_is_better, budget.exhausted)
