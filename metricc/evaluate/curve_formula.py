"""Exact values of any curve formula on the exact curve (every distinct score a threshold).

The input is the curve's points ascending in threshold, ``tp[k], fp[k]`` for ``k = 0 .. T-1``
(``k = 0``: everything predicted positive, so ``tp[0] = P`` and ``fp[0] = N``; the last point
is the top one, ``tp = fp = 0``), and the totals ``P, N``. Each reduction is computed exactly:

* ``area(y, x)``: the trapezoids over neighbouring points (over the collapsed curve of tied
  scores this is scikit-learn's ``roc_auc_score``); ``area(y, x, lo, hi)`` cuts the segments at
  ``lo`` and ``hi`` by linear interpolation, as ``roc_auc_score(max_fpr=...)`` does;
* ``steps(y, x)``: ``sum_k (x_k - x_{k+1}) y_k`` (``average_precision_score``); a step of zero
  width adds 0 even where ``y`` is undefined there;
* ``best(f)``: the largest ``f_k`` where it is defined; ``best(f, g >= b)`` the largest among
  the thresholds where the bound holds, and 0 where none does (torchmetrics'
  ``BinaryRecallAtFixedPrecision`` convention).

Local formulas are evaluated with ``sympy.lambdify`` (numpy) of the resolved SymPy trees, never
of the formula's text. Arrays may carry leading batch axes: ``(..., T)`` points, ``(...)`` totals.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import sympy

from ..errors import MetricError
from ..language.curve import TOTALS, Area, AreaWithin, Best, BestWhere, CurveReduction, Steps, reductions
from ..language.symbols import COUNTS

__all__ = ["evaluate_curve"]

_COUNT_SYMBOLS = list(COUNTS.values())


def _local(expr: sympy.Expr, counts: list[np.ndarray]) -> np.ndarray:
    """A local 2 x 2 expression at every point (0/0 is nan: undefined there)."""
    fn = sympy.lambdify(_COUNT_SYMBOLS, expr, "numpy")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.broadcast_to(np.asarray(fn(*counts), dtype=np.float64), counts[0].shape)


def _width_times(width: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(width == 0, 0.0, width * np.where(width == 0, 0.0, y))


def _area_within(y: np.ndarray, x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Trapezoids of the segments (x_k, y_k)-(x_{k+1}, y_{k+1}) restricted to x in [lo, hi]."""
    x0, x1, y0, y1 = x[..., :-1], x[..., 1:], y[..., :-1], y[..., 1:]
    a, b = np.minimum(x0, x1), np.maximum(x0, x1)
    ya, yb = np.where(x0 <= x1, y0, y1), np.where(x0 <= x1, y1, y0)
    left, right = np.maximum(a, lo), np.minimum(b, hi)
    keep = right > left
    span = np.where(keep, b - a, 1.0)

    def at(t: np.ndarray) -> np.ndarray:
        return ya + (yb - ya) * (t - a) / span

    with np.errstate(invalid="ignore"):
        part = np.where(keep, (right - left) * (at(left) + at(right)) / 2, 0.0)
    return np.sum(np.sign(x0 - x1) * part, axis=-1)


def _reduce(node: CurveReduction, counts: list[np.ndarray]) -> np.ndarray:
    if isinstance(node, (Best, BestWhere)):
        f = _local(node.args[0], counts)
        ok = np.isfinite(f)
        if isinstance(node, BestWhere):
            with np.errstate(invalid="ignore"):
                ok &= _local(node.args[1], counts) >= 0
        top = np.max(np.where(ok, f, -np.inf), axis=-1)
        return np.where(np.any(ok, axis=-1), top, 0.0)
    y, x = (_local(a, counts) for a in node.args[:2])
    if isinstance(node, AreaWithin):
        lo, hi = (float(b) for b in node.args[2:])
        return _area_within(y, x, lo, hi)
    width = x[..., :-1] - x[..., 1:]
    if isinstance(node, Area):
        return np.sum(_width_times(width, (y[..., :-1] + y[..., 1:]) / 2), axis=-1)
    if isinstance(node, Steps):
        return np.sum(_width_times(width, y[..., :-1]), axis=-1)
    raise MetricError(f"internal: unknown reduction {type(node).__name__}")  # pragma: no cover


def evaluate_curve(expr: sympy.Expr, tp: np.ndarray, fp: np.ndarray, P: np.ndarray | float,
                   N: np.ndarray | float, values: Mapping[str, float] | None = None) -> np.ndarray:
    """The exact value of a resolved curve formula (``CurveFormula.expr``) on exact curve points.

    ``values`` gives the parameters (a formula's ``defaults`` are not applied here).

    >>> from metricc.language.parse import parse
    >>> # scores 0.9 (pos), 0.8 (neg), 0.7 (pos), 0.1 (neg): thresholds 0.1, 0.7, 0.8, 0.9, top
    >>> tp, fp = np.array([2, 2, 1, 1, 0]), np.array([2, 1, 1, 0, 0])
    >>> float(evaluate_curve(parse("auroc").expr, tp, fp, 2, 2))
    0.75
    >>> round(float(evaluate_curve(parse("average_precision").expr, tp, fp, 2, 2)), 6)
    0.833333
    """
    subs = {sympy.Symbol(k): sympy.Float(v, 30) if not isinstance(v, (int, sympy.Rational))
            else sympy.Rational(v) for k, v in (values or {}).items()}
    expr = expr.xreplace(subs) if subs else expr
    tp, fp = np.asarray(tp, dtype=np.float64), np.asarray(fp, dtype=np.float64)
    P_, N_ = np.asarray(P, dtype=np.float64), np.asarray(N, dtype=np.float64)
    counts = [tp, fp, P_[..., None] - tp, N_[..., None] - fp]
    nodes = reductions(expr)
    syms = [sympy.Symbol(f"r{j}") for j in range(len(nodes))]
    outer = expr.xreplace(dict(zip(nodes, syms, strict=True)))
    free = {s.name for s in outer.free_symbols} - {s.name for s in syms} - set(TOTALS)
    free |= {s.name for n in nodes for s in n.free_symbols} - set(COUNTS)
    if free:
        raise MetricError(f"the curve formula has parameters {sorted(free)} without values; pass "
                          "them in values={...}")
    reduced = [_reduce(node, counts) for node in nodes]
    fn = sympy.lambdify([*syms, *TOTALS.values()], outer, "numpy")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(fn(*reduced, P_, N_), dtype=np.float64)
