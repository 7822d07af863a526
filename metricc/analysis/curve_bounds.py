"""The bounds written into a curve formula, checked against the range of what they bound.

``best(f, g >= b)`` with ``b`` above every value ``g`` can take is never met, so the metric
is 0 (its value where no threshold qualifies) for every model; ``b`` below every value is
met everywhere and bounds nothing. ``area(y, x, lo, hi)`` with ``lo`` or ``hi`` outside the
range of ``x`` cuts nothing there. Both are refused, naming the valid range: the range is
the one SymPy proves for ``g`` (or ``x``) over nonnegative counts, with ends among -1, 0, 1
(``[0, 1]`` for every rate); a side it cannot prove is not checked. SymPy only.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import sympy

from ..errors import MetricError
from ..language.curve import AreaWithin, BestWhere, reductions
from ..language.symbols import COUNTS
from .counts_sign import positive_form, proven_sign

__all__ = ["check_bounds", "proven_range"]


@lru_cache(maxsize=256)
def proven_range(g: sympy.Expr) -> tuple[int | None, int | None]:
    """``(lower, upper)`` of a 2 x 2 expression over nonnegative counts, each among -1, 0, 1
    where SymPy proves it (``None`` where it cannot).

    >>> proven_range(sympy.sympify("TP/(TP + FP)"))
    (0, 1)
    """
    e = positive_form(g)
    lower = next((c for c in (1, 0, -1) if proven_sign(e - c) == 1), None)
    upper = next((c for c in (-1, 0, 1) if proven_sign(c - e) == 1), None)
    return lower, upper


@lru_cache(maxsize=1)
def _names() -> dict[sympy.Expr, str]:
    """The named 2 x 2 metrics without parameters, by their expression (for messages)."""
    from ..language.parse import parse
    from ..library import METRICS

    out: dict[sympy.Expr, str] = {}
    for name, metric in METRICS.items():
        if not metric.params:
            out.setdefault(parse(metric.formula).expr, name)
    return out


def _show(e: sympy.Expr) -> str:
    if e.is_number:
        return f"{float(e):g}"
    return _names().get(e, str(e))


def _number(e: sympy.Expr, values: Mapping[str, Any]) -> float | None:
    v = e.xreplace({s: sympy.sympify(values[s.name]) for s in e.free_symbols if s.name in values})
    return float(v) if v.is_number and v.is_finite else None


def _span(lower: int | None, upper: int | None) -> str:
    return f"[{'-inf' if lower is None else lower}, {'inf' if upper is None else upper}]"


def _given(e: sympy.Expr, values: Mapping[str, Any]) -> str:
    named = sorted(s.name for s in e.free_symbols if s.name in values)
    return "".join(f" ({n} = {values[n]!r})" for n in named)


def _check_best(node: BestWhere, values: Mapping[str, Any], what: str) -> None:
    d = node.args[1]
    const, g = d.as_independent(*COUNTS.values(), as_Add=True)
    if g == 0:  # a bound on numbers alone
        v = _number(d, values)
        if v is not None and v < 0:
            raise MetricError(f"{what}: the bound of best({_show(node.args[0])}, ...) is never met "
                              "(it does not depend on the threshold); bound a rate such as precision")
        return
    op, b = ">=", -const
    if g.could_extract_minus_sign():
        op, b, g = "<=", const, -g
    bound = _number(b, values)
    if bound is None:
        return
    lower, upper = proven_range(g)
    low_side, high_side = (lower, upper) if op == ">=" else (upper, lower)
    never = high_side is not None and (bound > high_side if op == ">=" else bound < high_side)
    always = low_side is not None and (bound < low_side if op == ">=" else bound > low_side)
    if never or always:
        written = f"best({_show(node.args[0])}, {_show(g)} {op} {_show(b)})"
        verdict = ("can never be met, so the metric is 0 for every model" if never else
                   "holds at every threshold and bounds nothing")
        raise MetricError(f"{what}: {written}{_given(b, values)}: the bound {verdict}; "
                          f"{_show(g)} lies in {_span(lower, upper)}, give a bound in that range")


def _check_area(node: AreaWithin, values: Mapping[str, Any], what: str) -> None:
    y, x, lo, hi = node.args
    ends = [_number(lo, values), _number(hi, values)]
    lower, upper = proven_range(x)
    if any(v is not None and ((lower is not None and v < lower) or (upper is not None and v > upper))
           for v in ends):
        raise MetricError(f"{what}: area({_show(y)}, {_show(x)}, {_show(lo)}, {_show(hi)}){_given(lo + hi, values)}: "
                          f"the range [lo, hi] reaches outside {_show(x)}'s range "
                          f"{_span(lower, upper)}; give lo and hi within it")


def check_bounds(expr: sympy.Expr, values: Mapping[str, Any] | None = None, what: str = "the curve formula"
                 ) -> None:
    """Refuse every ``best(f, g >= b)`` bound outside the range of ``g`` and every
    ``area(y, x, lo, hi)`` range reaching outside that of ``x``; ``expr`` is a resolved curve
    formula, its parameters given in ``values`` (a bound without a value is not checked).

    >>> from metricc.language.parse import parse
    >>> check_bounds(parse("recall_at_precision").expr, {"min_precision": 0.9})
    >>> check_bounds(parse("recall_at_precision").expr, {"min_precision": 90})
    Traceback (most recent call last):
    ...
    metricc.errors.MetricError: the curve formula: best(recall, precision >= min_precision) (min_precision = 90): \
the bound can never be met, so the metric is 0 for every model; precision lies in [0, 1], give a bound in that range
    """
    for node in reductions(expr):
        if isinstance(node, BestWhere):
            _check_best(node, values or {}, what)
        elif isinstance(node, AreaWithin):
            _check_area(node, values or {}, what)
