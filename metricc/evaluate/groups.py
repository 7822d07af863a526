"""Exact values of group formulas: hard counts per group, each reduction taken exactly.

A reduction's local formula is evaluated at every group's counts with ``sympy.lambdify``
(numpy) of the resolved SymPy tree, never of the formula's text; ``gap`` is then the largest
minus the smallest value, ``ratio`` the smallest over the largest (1 where every
group's value is 0: all groups equal, where fairlearn's 0/0 is NaN), ``worst`` the smallest,
``groupmax`` the largest, ``groupmean`` the mean and ``vsrest`` the largest
``|f(group) - f(the other groups)|``, as fairlearn's ``MetricFrame(...).difference()``,
``.ratio()``, ``.group_min()``, ``.group_max()``. A group where the local formula is
undefined (recall of a group without positives) is an error naming it, unless
``zero_division`` gives its value (fairlearn and scikit-learn count such a rate as 0:
``zero_division=0`` reproduces them).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import sympy

from ..errors import MetricError
from ..language.groups import GroupReduction, Ratio, VsRest, Worst, group_nodes
from ..language.symbols import COUNTS

__all__ = ["evaluate_groups", "group_count_table", "group_ids"]

_COUNT_SYMBOLS = list(COUNTS.values())


def group_ids(groups: Any, n: int) -> tuple[np.ndarray, list[Any]]:
    """``(codes (N,), labels)``: any hashable group labels (ints, strings) as codes ``0..G-1``
    in sorted order of the labels, as fairlearn orders its groups; or a soft membership matrix
    ``(N, G)`` passed through (labels ``0..G-1``)."""
    from .threshold import as_array

    g = np.asarray(groups.detach().cpu().numpy() if hasattr(groups, "detach") else groups)
    if g.ndim == 2 and g.dtype.kind == "f":
        if g.shape[0] != n:
            raise MetricError(f"groups has {g.shape[0]} rows but there are {n} predictions")
        if not np.isfinite(g).all() or (g < 0).any() or not np.allclose(g.sum(1), 1.0, atol=1e-6):
            raise MetricError("soft group memberships (N, G) must be finite, >= 0 and sum to 1 per row")
        return g.astype(np.float64), list(range(g.shape[1]))
    if g.ndim != 1 or g.shape[0] != n:
        raise MetricError(f"groups must be one label per prediction, shape ({n},), or memberships "
                          f"(N, G); got shape {g.shape}")
    if g.dtype.kind == "f":
        g = as_array(g, "groups")
    labels, codes = np.unique(g, return_inverse=True)
    return codes.reshape(-1), labels.tolist()


def group_count_table(decisions: np.ndarray, y: np.ndarray, groups: np.ndarray, weight: np.ndarray | None,
                      num_groups: int) -> np.ndarray:
    """``(G, 4)`` float64 ``TP FP FN TN`` of 0/1 ``decisions`` against 0/1 labels ``y`` per group
    (``groups``: codes ``(N,)`` or memberships ``(N, G)``)."""
    w = np.ones_like(y, dtype=np.float64) if weight is None else weight.astype(np.float64)
    d, t = decisions.astype(np.float64), y.astype(np.float64)
    parts = np.stack([w * t * d, w * (1 - t) * d, w * t * (1 - d), w * (1 - t) * (1 - d)], 1)
    if groups.ndim == 2:
        return groups.T @ parts
    out = np.zeros((num_groups, 4))
    np.add.at(out, groups, parts)
    return out


@lru_cache(maxsize=256)
def _lambdified(args: tuple[sympy.Symbol, ...], expr: sympy.Expr) -> Any:
    return sympy.lambdify(list(args), expr, "numpy")


def _local(expr: sympy.Expr, counts: np.ndarray) -> np.ndarray:
    """A local 2 x 2 expression at every group's counts ``(..., G, 4)`` -> ``(..., G)``
    (0/0 is nan: undefined in that group)."""
    fn = _lambdified(tuple(_COUNT_SYMBOLS), expr)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.broadcast_to(np.asarray(fn(*np.moveaxis(counts, -1, 0)), dtype=np.float64),
                               counts.shape[:-1]).copy()


def _defined(f: np.ndarray, node: GroupReduction, zero_division: float | None, labels: Sequence[Any],
             where: str = "group") -> np.ndarray:
    """``f`` with each undefined value (NaN, a division by 0) ``zero_division``, or an error naming
    the groups where it is undefined."""
    bad = ~np.isfinite(f)
    if not bad.any():
        return f
    if zero_division is None:
        who = ", ".join(repr(labels[i]) for i in np.flatnonzero(bad.reshape(-1, bad.shape[-1]).any(0))[:5])
        raise MetricError(f"{node} is undefined in {where} {who} (a rate with no samples to count, "
                          "such as the recall of a group without positives); pass "
                          "zero_division=<value> to score it as that value (fairlearn and "
                          "scikit-learn score it 0: zero_division=0)")
    return np.where(bad, float(zero_division), f)


def _reduce(node: GroupReduction, counts: np.ndarray, zero_division: float | None,
            labels: Sequence[Any]) -> np.ndarray:
    f = _defined(_local(node.args[0], counts), node, zero_division, labels)
    if isinstance(node, VsRest):  # each side's undefined rate is zero_division, not their difference
        rest = _local(node.args[0], counts.sum(-2, keepdims=True) - counts)
        f = f - _defined(rest, node, zero_division, labels, "the groups other than group")
        return np.max(np.abs(f), -1)
    top, low = np.max(f, -1), np.min(f, -1)
    if isinstance(node, Worst):
        return low
    if isinstance(node, Ratio):  # every group's value 0: all equal, as a gap of 0 (fairlearn: NaN)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(top == 0, np.where(low == 0, 1.0, np.nan), low / np.where(top == 0, 1.0, top))
    return {"gap": top - low, "groupmax": top, "groupmean": np.mean(f, -1)}[node.keyword]


def evaluate_groups(exprs: Sequence[sympy.Expr], counts: np.ndarray, zero_division: float | None = None,
                    labels: Sequence[Any] | None = None) -> np.ndarray:
    """The exact values of resolved group expressions (parameters substituted) at ``(..., G, 4)``
    counts (leading axes: many count tables at once, e.g. one per candidate threshold):
    ``(J, ...)``.

    >>> from metricc.language.parse import parse
    >>> counts = np.array([[1.0, 1, 1, 0], [0, 1, 0, 2]])  # group 1: no positives
    >>> evaluate_groups([parse("gap(recall)").expr], counts, zero_division=0).tolist()
    [0.5]
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim < 2 or counts.shape[-1] != 4 or counts.shape[-2] < 1:
        raise MetricError(f"group counts must be (G, 4) with G >= 1, got {counts.shape}")
    labels = list(labels) if labels is not None else list(range(counts.shape[-2]))
    out = []
    for expr in exprs:
        nodes = group_nodes(expr)
        syms = [sympy.Symbol(f"r{j}") for j in range(len(nodes))]
        outer = expr.xreplace(dict(zip(nodes, syms, strict=True)))
        if free := {s.name for s in outer.free_symbols} - {s.name for s in syms} - set(COUNTS):
            raise MetricError(f"the group formula has parameters {sorted(free)} without values")
        reduced = [_reduce(node, counts, zero_division, labels) for node in nodes]
        fn = _lambdified((*syms, *_COUNT_SYMBOLS), outer)
        with np.errstate(divide="ignore", invalid="ignore"):
            total = np.moveaxis(counts.sum(-2), -1, 0)
            out.append(np.broadcast_to(np.asarray(fn(*reduced, *total), dtype=np.float64),
                                       counts.shape[:-2]))
    return np.asarray(out, dtype=np.float64)
