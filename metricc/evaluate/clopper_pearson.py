"""Exact binomial bounds without scipy: the incomplete beta function, its quantile, and the
Clopper-Pearson bounds and critical counts built on them (used by :mod:`.confidence`).

>>> round(lower_bound(45, 50, 0.1), 6)   # 45 of 50 positives found, confidence 0.9
0.822382
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import MetricError

__all__ = ["beta_ppf", "betainc", "critical_count", "lower_bound", "tail", "upper_bound"]


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
    """The ``q`` quantile of ``Beta(a, b)``, to float precision.

    Newton steps on the CDF (its derivative is the beta density), each kept inside a
    bisection bracket: first on :func:`betainc` in float64, then, where ``mpmath.betainc``
    is fast (``a + b <= 1000``), a step or two more on it at 30 digits, which make the last
    digits exact. Above that the float64 value stands (relative error about 1e-12, more for
    quantiles below 1e-9).

    >>> beta_ppf(0.5, 1.0, 1.0)
    0.5
    """
    if not 0.0 <= q <= 1.0 or not (a > 0 and b > 0):
        raise MetricError(f"beta_ppf needs 0 <= q <= 1 and a, b > 0, got q={q}, a={a}, b={b}")
    if q in (0.0, 1.0):
        return float(q)
    log_norm = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    # betainc is good to about 1e-12: a tighter float tolerance would only chase its noise
    x = _invert(lambda v: float(betainc(a, b, v)), q, a, b, log_norm, math, 0.0, 1.0, 200, 1e-12)
    if a + b > 1000:
        return x
    import mpmath

    from ..analysis.budget import precision  # mpmath's precision is process-wide: under its lock

    try:
        with precision(30):
            aa, bb = mpmath.mpf(a), mpmath.mpf(b)
            # from the float value Newton needs a step or two; bisection (1030 halvings reach
            # 1e-310) covers the rest
            return float(_invert(lambda v: mpmath.betainc(aa, bb, 0, v, regularized=True), q, aa,
                                 bb, mpmath.log(mpmath.beta(aa, bb)), mpmath, mpmath.mpf(0),
                                 mpmath.mpf(1), 1100, 2.0 ** -58, start=mpmath.mpf(x)))
    except ValueError:  # mpmath's series gave up: the float64 value stands
        return x


def _invert(cdf: Callable[[Any], Any], q: Any, a: Any, b: Any, log_norm: Any, lib: Any, lo: Any,
            hi: Any, steps: int, tol: float, start: Any = None) -> Any:
    """Safeguarded Newton for ``cdf(x) = q`` on ``[lo, hi]`` (``lib``: math or mpmath), to
    relative step ``tol``."""
    x = a / (a + b) if start is None else start
    if not lo < x < hi:
        x = (lo + hi) / 2
    for _ in range(steps):
        if not 0 < x < 1:  # rounded onto an end: the quantile is within a float of it
            return x
        f = cdf(x) - q
        if f < 0:
            lo = x
        else:
            hi = x
        log_density = (a - 1) * lib.log(x) + (b - 1) * lib.log1p(-x) - log_norm
        density = lib.exp(log_density) if log_density < 700 else lib.inf
        new = x - f / density if 0 < density < lib.inf else (lo + hi) / 2
        if not lo < new < hi:
            new = (lo + hi) / 2
        if abs(new - x) <= tol * x or hi - lo <= tol * hi or hi < 1e-310:
            return new
        x = new
    return x


def lower_bound(k: int, n: int, alpha: float) -> float:
    """Clopper-Pearson lower bound of a rate with ``k`` of ``n``: exceeded with probability ``alpha``."""
    return 0.0 if k <= 0 else beta_ppf(alpha, k, n - k + 1)


def upper_bound(k: int, n: int, alpha: float) -> float:
    """Clopper-Pearson upper bound of a rate with ``k`` of ``n`` (below it with probability ``alpha``)."""
    return 1.0 if k >= n else beta_ppf(1.0 - alpha, k + 1, n - k)


def tail(k: np.ndarray, n: np.ndarray, p: float, lower: bool) -> np.ndarray:
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
        ok = tail(mid, nn, bound, lower) <= aa
        if lower:
            lo, hi = np.where(act & ~ok, mid + 1, lo), np.where(act & ok, mid, hi)
        else:
            lo, hi = np.where(act & ok, mid, lo), np.where(act & ~ok, mid - 1, hi)
    return (hi if lower else lo)[inverse.ravel()].reshape(n.shape).astype(np.int64)
