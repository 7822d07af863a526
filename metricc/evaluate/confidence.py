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
  where it is defined: each is tested at ``alpha / (J M)``. Beyond ``MAX_TESTS``
  candidates only that many, evenly spaced in rank (chosen from the scores, not
  the labels), are tested: Bonferroni pays for every test.

Decisions compare ``P(Binomial(n, bound) >= k)`` (or ``<= k``) with the level,
which is equivalent to comparing the Clopper-Pearson bound with ``bound``; the
binomial tails are regularised incomplete beta functions evaluated in float64 by
a continued fraction (:func:`betainc`). The bounds reported are beta quantiles
(:func:`beta_ppf`: Newton on that function, polished by ``mpmath.betainc`` where
it is fast). No scipy; these functions are in :mod:`.clopper_pearson`.

>>> round(lower_bound(45, 50, 0.1), 6)   # 45 of 50 positives found, confidence 0.9
0.822382
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from ..errors import MetricError
from ..language.symbols import COUNTS
from .clopper_pearson import beta_ppf, betainc, critical_count, lower_bound, tail, upper_bound
from .objective import CountsBound

__all__ = ["MAX_TESTS", "RateConstraint", "beta_ppf", "betainc", "bounds_at", "certified_thresholds",
           "certify", "check_confidence", "critical_count", "explain_infeasible", "lower_bound",
           "rate_constraint", "upper_bound"]

_NAMES = tuple(COUNTS)  # ("TP", "FP", "FN", "TN")
# As the threshold falls, TP and FP grow and FN and TN shrink.
_RISES = {"TP": 1, "FP": 1, "FN": -1, "TN": -1}
#: the most thresholds a non-monotone rate is tested at (evenly spaced): Bonferroni pays for each
MAX_TESTS = 1000
_ELEMENTS = {("FN", "TP"): "positives", ("FP", "TN"): "negatives",
             ("FP", "TP"): "predicted positives", ("FN", "TN"): "predicted negatives",
             ("FN", "FP", "TN", "TP"): "elements"}


def check_confidence(confidence: Any) -> float:
    """``confidence`` as a float strictly between 0 and 1, else a :class:`MetricError`."""
    if (isinstance(confidence, bool) or not isinstance(confidence, numbers.Real)
            or not 0.0 < float(confidence) < 1.0):
        raise MetricError(f"confidence must be a number strictly between 0 and 1 (e.g. 0.9: "
                          f"the constraints hold on new data with probability 0.9), got "
                          f"{confidence!r}")
    return float(confidence)


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


def rate_constraint(constraint: CountsBound) -> RateConstraint:
    """The :class:`RateConstraint` of a constraint, or a :class:`MetricError` when its
    left side is not a rate ``X / (X + Y)`` of counts.

    >>> import metricc
    >>> c, = metricc.compile("f1").decision_objective(["1 - recall <= 0.1"]).constraints
    >>> r = rate_constraint(c)
    >>> r.numerator, r.elements, r.lower, r.bound, r.monotone, r.easiest_low
    (('FN',), 'positives', False, 0.1, True, True)
    """
    expr = sympy.cancel(constraint.expr)
    num, den = sympy.fraction(expr)
    top, bottom = _linear(num), _linear(den)
    if top is None or bottom is None or not set(top[0]) < set(bottom[0]):
        raise MetricError(
            f"confidence: constraint '{constraint.text}' is {constraint.expr} "
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
        ok, level, _ = _certify_one(s, counts, shape, alpha / len(specs))
        mask &= ok
        levels.append(level)
    return mask, levels


def _certify_one(s: RateConstraint, counts: dict[str, np.ndarray], shape: tuple[int, ...],
                 alpha: float) -> tuple[np.ndarray, Any, np.ndarray]:
    """``(certified, level, tested)`` for one constraint at family-wise error ``alpha``."""
    k, n = s.counts(counts)
    k, n = np.broadcast_to(k, shape), np.broadcast_to(n, shape)
    tested = n > 0
    if s.monotone:
        level: Any = alpha
    else:  # Bonferroni over (at most MAX_TESTS evenly spaced) candidates where it is defined
        rank = np.cumsum(tested, axis=-1)
        stride = np.maximum(np.ceil(rank[..., -1:] / MAX_TESTS), 1)
        tested = tested & ((rank - 1) % stride == 0)
        level = alpha / np.maximum(tested.sum(-1, keepdims=True), 1)
    # critical counts only where tested: Bonferroni's thinning then bounds the work too
    crit = critical_count(n[tested], s.bound, np.broadcast_to(level, shape)[tested], s.lower)
    ok = np.zeros(shape, dtype=bool)
    ok[tested] = (k[tested] >= crit) if s.lower else (k[tested] <= crit)
    if s.monotone:  # fixed-sequence: from the easiest threshold on, stop at the first failure
        if s.easiest_low:
            ok = np.logical_and.accumulate(ok[..., ::-1], axis=-1)[..., ::-1]
        else:
            ok = np.logical_and.accumulate(ok, axis=-1)
    return ok, level, tested


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
        tested = np.flatnonzero(_certify_one(s, counts, np.shape(n), alpha)[2])
        if tested.size == 0:
            parts.append(f"{s.text}: undefined at every threshold (no {s.elements})")
            continue
        if s.monotone:  # the best bound is at the easiest end
            i = tested[-1] if s.easiest_low else tested[0]
        else:
            i = tested[np.argmin(tail(k[tested], n[tested], min(max(s.bound, 1e-12), 1 - 1e-12),
                                       s.lower))]
        ki, ni = round(float(k[i])), round(float(n[i]))
        best = (lower_bound if s.lower else upper_bound)(ki, ni, alpha)
        need = s.needed(alpha)
        want = ("no number of validation elements can certify it" if need is None else
                f"certifying {s.bound:g} at all needs at least {need} {s.elements} even at a perfect "
                "rate" + (f" (there are {ni}: the rate itself falls short)" if need <= ni else ""))
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


def certified_thresholds(constraints: Sequence[CountsBound], counts: dict[str, np.ndarray],
                         confidence: Any) -> tuple[np.ndarray, Callable[[int], dict[str, float]]]:
    """For :func:`metricc.best_threshold`: the thresholds (1-D counts) that meet every
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
