"""Constraints met with a stated confidence on new data: exact Clopper-Pearson bounds.

A rate such as recall is ``k`` successes out of ``n`` elements (``k`` positives
scored at or above ``t`` out of ``n`` positives). For i.i.d. data and a fixed
``t``, ``k`` is binomial, so the exact one-sided lower bound
``Beta.ppf(alpha, k, n - k + 1)`` is below the population rate with probability
at most ``alpha`` (upper bound: ``Beta.ppf(1 - alpha, k + 1, n - k)``).

A threshold *search* tests many ``t`` on the same data; the family-wise error
is kept at ``alpha = 1 - confidence`` (Learn-then-Test, Angelopoulos et al. 2021):

- every constraint gets ``alpha / J`` (``J`` constraints; Bonferroni), so that
  all hold together;
- a rate whose elements do not depend on ``t`` and whose numerator moves one
  way with ``t`` (recall, specificity, FPR, the rate of predicted positives) is
  tested by *fixed-sequence testing*: from the threshold where the constraint
  is easiest (the lowest for recall, the highest for FPR) on, stopping at the
  first it cannot certify. No correction is needed, and it certifies the same
  thresholds as the plain scan of the bound;
- any other rate (precision, NPV, FDR, accuracy: its elements or its direction
  change with ``t``) is Bonferroni-corrected over the ``M`` candidate thresholds
  where it is defined: each is tested at ``alpha / (J M)``.

Decisions compare ``P(Binomial(n, bound) >= k)`` (or ``<= k``) with the level,
which is equivalent to comparing the Clopper-Pearson bound with ``bound``; the
binomial tails are regularised incomplete beta functions evaluated in float64 by
a continued fraction (:func:`betainc`). The bounds reported are quantiles found
by bisection on ``mpmath.betainc`` (:func:`beta_ppf`). No scipy.

>>> round(lower_bound(45, 50, 0.1), 6)   # 45 of 50 positives found, confidence 0.9
0.822382
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from ..errors import MetricError
from ..symbols import COUNTS

__all__ = ["RateConstraint", "beta_ppf", "betainc", "bounds_at", "certified_thresholds", "certify",
           "check_confidence",
           "critical_count", "explain_infeasible", "lower_bound", "rate_constraint", "upper_bound"]

_NAMES = tuple(COUNTS)  # ("TP", "FP", "FN", "TN")
# As the threshold falls, TP and FP grow and FN and TN shrink.
_RISES = {"TP": 1, "FP": 1, "FN": -1, "TN": -1}
_ELEMENTS = {("FN", "TP"): "positives", ("FP", "TN"): "negatives",
             ("FP", "TP"): "predicted positives", ("FN", "TN"): "predicted negatives",
             ("FN", "FP", "TN", "TP"): "elements"}


def check_confidence(confidence: Any) -> float:
    """``confidence`` as a float strictly between 0 and 1, else a :class:`MetricError`."""
    if (isinstance(confidence, bool) or not isinstance(confidence, (int, float))
            or not 0.0 < float(confidence) < 1.0):
        raise MetricError(f"confidence must be a number strictly between 0 and 1 (e.g. 0.9: "
                          f"the constraints hold on new data with probability 0.9), got "
                          f"{confidence!r}")
    return float(confidence)


# ----------------------------------------------------------------------------- beta
def betainc(a: Any, b: Any, x: Any) -> np.ndarray:
    """The regularised incomplete beta function ``I_x(a, b)``, vectorised, float64.

    Lentz's continued fraction (Numerical Recipes 6.4), on the side of
    ``(a + 1) / (a + b + 2)`` where it converges fast. ``a, b > 0``.

    >>> float(betainc(2.0, 3.0, 0.5))   # 11/16
    0.6875
    """
    a, b, x = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a, b, x)))
    out = np.where(x <= 0.0, 0.0, 1.0)
    inside = (x > 0.0) & (x < 1.0)
    if not inside.any():
        return out
    a, b, x = a[inside], b[inside], x[inside]
    lgamma = np.frompyfunc(math.lgamma, 1, 1)
    log_front = (lgamma(a + b) - lgamma(a) - lgamma(b)).astype(np.float64)
    log_front += a * np.log(x) + b * np.log1p(-x)
    swap = x >= (a + 1.0) / (a + b + 2.0)
    aa, bb, xx = np.where(swap, b, a), np.where(swap, a, b), np.where(swap, 1.0 - x, x)
    cf = np.exp(log_front) * _continued_fraction(aa, bb, xx) / aa
    out[inside] = np.where(swap, 1.0 - cf, cf)
    return out


def _continued_fraction(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    tiny, eps = 1e-300, 1e-15

    def guard(v: np.ndarray) -> np.ndarray:
        return np.where(np.abs(v) < tiny, tiny, v)

    c = np.ones_like(x)
    d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0))
    h = d.copy()
    live = np.ones(x.shape, dtype=bool)
    # Convergence takes O(sqrt(max(a, b))) terms.
    for m in range(1, 20 * int(math.sqrt(float(np.max(np.maximum(a, b))))) + 200):
        m2 = 2.0 * m
        num = m * (b - m) * x / ((a - 1.0 + m2) * (a + m2))
        d = 1.0 / guard(1.0 + num * d)
        c = guard(1.0 + num / c)
        h = np.where(live, h * d * c, h)
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2))
        d = 1.0 / guard(1.0 + num * d)
        c = guard(1.0 + num / c)
        step = d * c
        h = np.where(live, h * step, h)
        live &= np.abs(step - 1.0) > eps
        if not live.any():
            return h
    raise MetricError("the incomplete beta function did not converge; please report the counts")


def beta_ppf(q: float, a: float, b: float) -> float:
    """The ``q`` quantile of ``Beta(a, b)``: ``mpmath.betainc`` inverted to float precision.

    Newton steps on the CDF (its derivative is the beta density), each kept inside a
    bisection bracket, so that it converges in a few steps and cannot leave ``[0, 1]``.

    >>> beta_ppf(0.5, 1.0, 1.0)
    0.5
    """
    import mpmath

    if not 0.0 <= q <= 1.0 or not (a > 0 and b > 0):
        raise MetricError(f"beta_ppf needs 0 <= q <= 1 and a, b > 0, got q={q}, a={a}, b={b}")
    if q in (0.0, 1.0):
        return float(q)
    with mpmath.workdps(30):
        qq, aa, bb = mpmath.mpf(q), mpmath.mpf(a), mpmath.mpf(b)
        log_norm = mpmath.log(mpmath.beta(aa, bb))
        lo, hi = mpmath.mpf(0), mpmath.mpf(1)
        x = aa / (aa + bb)
        for _ in range(1100):  # bisection alone reaches 1e-310 in 1030 halvings
            f = mpmath.betainc(aa, bb, 0, x, regularized=True) - qq
            if f < 0:
                lo = x
            else:
                hi = x
            density = mpmath.exp((aa - 1) * mpmath.log(x) + (bb - 1) * mpmath.log1p(-x) - log_norm)
            step = f / density if density > 0 else mpmath.mpf(0)
            new = x - step
            if not lo < new < hi or density == 0:
                new = (lo + hi) / 2
            if (abs(new - x) <= mpmath.mpf(2) ** -60 * x or hi - lo <= mpmath.mpf(2) ** -60 * hi
                    or hi < 1e-310):  # the last: below the smallest float
                return float(new)
            x = new
    raise MetricError(f"beta_ppf({q}, {a}, {b}) did not converge; please report it")  # pragma: no cover


def lower_bound(k: int, n: int, alpha: float) -> float:
    """Clopper-Pearson lower bound of a rate with ``k`` of ``n``: exceeded with probability ``alpha``."""
    return 0.0 if k <= 0 else beta_ppf(alpha, k, n - k + 1)


def upper_bound(k: int, n: int, alpha: float) -> float:
    """Clopper-Pearson upper bound of a rate with ``k`` of ``n`` (below it with probability ``alpha``)."""
    return 1.0 if k >= n else beta_ppf(1.0 - alpha, k + 1, n - k)


def _tail(k: np.ndarray, n: np.ndarray, p: float, lower: bool) -> np.ndarray:
    """``P(Bin(n, p) >= k)`` (``lower``: the p-value against ``rate < p``), else ``P(Bin(n, p) <= k)``."""
    k, n = np.broadcast_arrays(np.asarray(k, np.float64), np.asarray(n, np.float64))
    if lower:
        ok = k >= 1
        return np.where(ok, betainc(np.where(ok, k, 1.0), np.where(ok, n - k + 1.0, 1.0), p), 1.0)
    ok = k < n
    return np.where(ok, betainc(np.where(ok, n - k, 1.0), np.where(ok, k + 1.0, 1.0), 1.0 - p), 1.0)


def critical_count(n: Any, bound: float, alpha: Any, lower: bool = True) -> np.ndarray:
    """For each ``n``: ``lower``: the fewest successes ``k`` whose lower bound is ``>= bound``
    (``n + 1`` if none); else the most ``k`` whose upper bound is ``<= bound`` (``-1`` if none).

    >>> critical_count(50, 0.8, 0.1).tolist()   # 45 of 50 certify recall >= 0.8 at 0.9
    45
    """
    n, alpha = np.broadcast_arrays(np.asarray(n, np.float64), np.asarray(alpha, np.float64))
    # distinct (n, alpha) pairs as complex numbers: a plain sort, not a lexsort of rows
    pairs, inverse = np.unique(n.ravel() + 1j * alpha.ravel(), return_inverse=True)
    nn, aa = pairs.real.copy(), pairs.imag.copy()
    lo, hi = np.zeros_like(nn), nn + 1.0  # lower: answer in [lo, hi], hi meaning "none"
    if not lower:
        lo, hi = -1.0 * np.ones_like(nn), nn  # upper: answer in [lo, hi], lo meaning "none"
    if bound <= 0.0 or bound >= 1.0:
        trivial = (bound <= 0.0) == lower  # rate >= 0 and rate <= 1 always hold
        out = (lo if lower else hi) if trivial else (hi if lower else lo)
        return out[inverse.ravel()].reshape(n.shape).astype(np.int64)
    while np.any(lo < hi):  # integer bisection; the tails are monotone in k
        act = lo < hi
        mid = np.floor((lo + hi) / 2) if lower else np.ceil((lo + hi) / 2)
        mid = np.clip(mid, 0, nn)  # finished rows may sit at the "none" ends
        ok = _tail(mid, nn, bound, lower) <= aa
        if lower:
            lo, hi = np.where(act & ~ok, mid + 1, lo), np.where(act & ok, mid, hi)
        else:
            lo, hi = np.where(act & ok, mid, lo), np.where(act & ~ok, mid - 1, hi)
    return (hi if lower else lo)[inverse.ravel()].reshape(n.shape).astype(np.int64)


# ----------------------------------------------------------------------------- rates
@dataclass(frozen=True)
class RateConstraint:
    """A constraint on a rate ``sum(numerator) / sum(denominator)`` of counts, ``>=`` (``lower``)
    or ``<=`` ``bound``, and how a threshold search tests it."""

    text: str
    numerator: tuple[str, ...]
    denominator: tuple[str, ...]
    lower: bool
    bound: float
    #: fixed-sequence testing applies: the elements do not depend on t, the rate is monotone in t
    monotone: bool
    #: the constraint is easiest at the lowest threshold (where the fixed sequence starts)
    easiest_low: bool

    @property
    def elements(self) -> str:
        """What the rate is counted over, in words (``positives`` for recall)."""
        return _ELEMENTS.get(self.denominator, "elements in " + " + ".join(self.denominator))

    def counts(self, counts: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``(k, n)``: the successes and the elements at every threshold."""
        k = sum(np.asarray(counts[c], np.float64) for c in self.numerator)
        n = sum(np.asarray(counts[c], np.float64) for c in self.denominator)
        return np.asarray(k), np.asarray(n)

    def needed(self, alpha: float) -> int | None:
        """The fewest elements that can certify the bound at level ``alpha`` even with a perfect
        rate (``None``: no number can; ``0``: the bound always holds)."""
        if (self.bound <= 0.0) if self.lower else (self.bound >= 1.0):
            return 0
        if (self.bound >= 1.0) if self.lower else (self.bound <= 0.0):
            return None
        # all n a success: lower bound alpha**(1/n); none: upper bound 1 - alpha**(1/n)
        return math.ceil(math.log(alpha) / math.log(self.bound if self.lower else 1.0 - self.bound)
                         - 1e-9)


def _linear(e: sympy.Expr) -> tuple[tuple[str, ...], sympy.Expr] | None:
    """``(counts, c)`` when ``e == c * (sum of distinct counts)``, else ``None``."""
    if (not e.free_symbols or not e.free_symbols <= set(COUNTS.values())
            or not e.is_polynomial(*COUNTS.values())):
        return None
    poly = sympy.Poly(e, *COUNTS.values())
    terms = poly.terms()
    if any(sum(mono) != 1 for mono, _ in terms) or len({c for _, c in terms}) != 1:
        return None
    names = tuple(sorted(_NAMES[mono.index(1)] for mono, _ in terms))
    return names, terms[0][1]


def rate_constraint(constraint: Any) -> RateConstraint:
    """The :class:`RateConstraint` of a :class:`metricc.constraints.Constraint`, or a
    :class:`MetricError` when its metric is not a rate ``X / (X + Y)`` of counts.

    >>> import metricc
    >>> c, = metricc.compile("f1").parse_constraints(["1 - recall <= 0.1"])
    >>> r = rate_constraint(c)
    >>> r.numerator, r.elements, r.lower, r.bound, r.monotone, r.easiest_low
    (('FN',), 'positives', False, 0.1, True, True)
    """
    expr = sympy.cancel(constraint.metric.expr)
    num, den = sympy.fraction(expr)
    top, bottom = _linear(num), _linear(den)
    if top is None or bottom is None or not set(top[0]) < set(bottom[0]):
        raise MetricError(
            f"confidence: constraint '{constraint.text}' is {constraint.metric.expr} "
            f"{constraint.op} {constraint.bound:g}, not a rate of counts X/(X+Y) (X, Y sums of "
            "TP, FP, FN, TN, such as recall TP/(TP+FN), precision TP/(TP+FP), fpr FP/(FP+TN)); "
            "an exact confidence bound exists only for a rate. Write it as a rate, or pass "
            "confidence=None")
    scale = float(top[1] / bottom[1])
    lower = (constraint.op == ">=") == (scale > 0)
    invariant = {("FN", "TP"), ("FP", "TN"), ("FN", "FP", "TN", "TP")}
    rises = {_RISES[c] for c in top[0]}
    constant = top[0] in invariant
    monotone = bottom[0] in invariant and (len(rises) == 1 or constant)
    up = constant or rises == {1}  # the rate grows as the threshold falls
    return RateConstraint(constraint.text, top[0], bottom[0], lower, constraint.bound / scale,
                          monotone, up == lower)


# ----------------------------------------------------------------------------- search
def certify(specs: Sequence[RateConstraint], counts: dict[str, np.ndarray],
            alpha: float) -> tuple[np.ndarray, list[Any]]:
    """Which thresholds every constraint certifies, family-wise error ``alpha``, and the level
    each constraint was tested at.

    ``counts`` maps ``TP FP FN TN`` to arrays ``(..., T)``, thresholds highest first on the
    last axis (leading axes: independent searches, e.g. simulated validation sets).
    """
    shape = np.broadcast_shapes(*(np.shape(v) for v in counts.values()))
    mask = np.ones(shape, dtype=bool)
    levels: list[Any] = []
    for s in specs:
        ok, level = _certify_one(s, counts, shape, alpha / len(specs))
        mask &= ok
        levels.append(level)
    return mask, levels


def _certify_one(s: RateConstraint, counts: dict[str, np.ndarray], shape: tuple[int, ...],
                 alpha: float) -> tuple[np.ndarray, Any]:
    k, n = s.counts(counts)
    k, n = np.broadcast_to(k, shape), np.broadcast_to(n, shape)
    defined = n > 0
    if s.monotone:
        level: Any = alpha
    else:  # Bonferroni over the candidates where the rate is defined
        level = alpha / np.maximum(defined.sum(-1, keepdims=True), 1)
    crit = critical_count(n, s.bound, level, s.lower)
    ok = defined & ((k >= crit) if s.lower else (k <= crit))
    if s.monotone:  # fixed-sequence: from the easiest threshold on, stop at the first failure
        if s.easiest_low:
            ok = np.logical_and.accumulate(ok[..., ::-1], axis=-1)[..., ::-1]
        else:
            ok = np.logical_and.accumulate(ok, axis=-1)
    return ok, level


def _level(level: Any) -> float:
    return float(np.asarray(level).ravel()[0])


def bounds_at(specs: Sequence[RateConstraint], counts: dict[str, np.ndarray], levels: list[Any],
              index: int) -> dict[str, float]:
    """Each constraint's one-sided bound, at its tested level, at threshold ``index`` (1-D counts)."""
    out = {}
    for s, level in zip(specs, levels, strict=True):
        k, n = (round(float(v[index])) for v in s.counts(counts))
        out[s.text] = (lower_bound if s.lower else upper_bound)(k, n, _level(level))
    return out


def explain_infeasible(specs: Sequence[RateConstraint], counts: dict[str, np.ndarray],
                       levels: list[Any], confidence: float) -> str:
    """Why no threshold is certified (1-D counts): per constraint, its best bound and the
    elements a perfect rate would need."""
    parts = []
    for s, level in zip(specs, levels, strict=True):
        alpha = _level(level)
        k, n = s.counts(counts)
        side = "lower" if s.lower else "upper"
        defined = np.flatnonzero(n > 0)
        if defined.size == 0:
            parts.append(f"{s.text}: undefined at every threshold (no {s.elements})")
            continue
        i = defined[np.argmin(_tail(k[defined], n[defined], min(max(s.bound, 1e-12), 1 - 1e-12),
                                    s.lower))]
        ki, ni = round(float(k[i])), round(float(n[i]))
        best = (lower_bound if s.lower else upper_bound)(ki, ni, alpha)
        need = s.needed(alpha)
        want = ("no number of validation elements can certify it" if need is None else
                f"certifying {s.bound:g} at all needs at least {need} {s.elements} even at a perfect "
                "rate")
        parts.append(f"{s.text}: best {side} bound {best:.4g} ({ki} of {ni} {s.elements}, tested at "
                     f"level {alpha:.3g}); {want}")
    shape = np.shape(next(iter(counts.values())))
    alone = [bool(_certify_one(s, counts, shape, (1.0 - confidence) / len(specs))[0].any())
             for s in specs]
    joint = (" Each constraint alone is certified at some threshold, but no threshold meets them "
             "all." if all(alone) and len(specs) > 1 else "")
    return (f"no threshold meets every constraint with confidence {confidence:g} on new data ("
            + "; ".join(parts) + ")." + joint + " Use more validation data, relax a bound, or "
            "lower the confidence")


def certified_thresholds(constraints: Sequence[Any], counts: dict[str, np.ndarray],
                         confidence: Any) -> tuple[np.ndarray, Callable[[int], dict[str, float]]]:
    """For :func:`metricc.threshold.best_threshold`: the thresholds (1-D counts) that meet every
    constraint with ``confidence`` on new data, and a function giving the bounds at one of them.

    Raises :class:`MetricError` for a bad ``confidence``, no constraints, a constraint that is
    not a rate, or when no threshold is certified.
    """
    c = check_confidence(confidence)
    if not constraints:
        raise MetricError("confidence= applies to constraints, and there are none: pass "
                          "constraints=['recall >= 0.9'] or compile the metric with them")
    specs = [rate_constraint(con) for con in constraints]
    mask, levels = certify(specs, counts, 1.0 - c)
    if not mask.any():
        raise MetricError(explain_infeasible(specs, counts, levels, c))
    return mask, lambda i: bounds_at(specs, counts, levels, i)
