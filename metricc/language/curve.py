"""Curve formulas in the language: the reductions over thresholds and their index form.

A curve metric is a functional of the 2 x 2 counts at every threshold ``k = 0 .. T-1``,
ascending (``k = 0``: everything predicted positive, ``TP = P, FP = N``). The parser builds
placeholders (:class:`AreaCall`, :class:`StepsCall`, :class:`BestCall`) while it reads;
:func:`resolve_curve` turns them into *index form*: an outer SymPy expression over reduction
nodes (:class:`Area`, :class:`AreaWithin`, :class:`Steps`, :class:`Best`, :class:`BestWhere`),
``P``, ``N`` and parameters, each node holding its local 2 x 2 expressions over the counts
``TP FP FN TN`` at one threshold (``docs/curve.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import sympy

from ..errors import MetricError
from ..library import lookup
from .matrix import PLACEHOLDERS, ColTotal, Delta, Entry, PresentCall, RowTotal, SumOf
from .reductions import ReductionResolver
from .symbols import COUNTS, DERIVED

__all__ = [
    "REDUCTIONS",
    "TOTALS",
    "Area",
    "AreaWithin",
    "Best",
    "BestWhere",
    "Comparison",
    "CurveFormula",
    "CurveReduction",
    "Steps",
    "curve_call",
    "reductions",
    "resolve_curve",
    "uses_curve",
]

#: The reductions a curve formula may call.
REDUCTIONS = ("area", "steps", "best")
#: The totals over all samples; constant along the curve, so they may stand outside reductions.
TOTALS: dict[str, sympy.Symbol] = {"P": sympy.Symbol("P"), "N": sympy.Symbol("N")}


# --- placeholders the parser builds (resolved by resolve_curve) ------------------------------

class AreaCall(sympy.Function):
    """``area(y, x)`` or ``area(y, x, lo, hi)`` as written."""


class StepsCall(sympy.Function):
    """``steps(y, x)`` as written."""


class BestCall(sympy.Function):
    """``best(f)`` or ``best(f, lhs >= rhs)`` as written: (f[, lhs, rhs, sense]), sense +1 for >=."""


_CALLS = (AreaCall, StepsCall, BestCall)


class Comparison:
    """``lhs op rhs`` as a call argument; only ``best()`` takes one (its second)."""

    def __init__(self, lhs: sympy.Expr, op: Any, rhs: sympy.Expr) -> None:
        self.lhs, self.op, self.rhs = lhs, op, rhs


def curve_call(pos: Any, tok: Any, fname: str, args: list[Any]) -> sympy.Expr:
    """The placeholder for a reduction call, or a positioned error for its misuse
    (also for a comparison given to any other function)."""
    for n, a in enumerate(args):
        if isinstance(a, Comparison) and (fname != "best" or n != 1):
            raise pos.error(f"a comparison ('{a.op}') is an argument only of best(f, g >= b), its "
                            f"second; {fname}() takes expressions", a.op)
    arity = {"area": (2, 4), "steps": (2,), "best": (1, 2)}[fname]
    if len(args) not in arity:
        want = " or ".join(str(a) for a in arity)
        usage = {"area": "area(y, x) or area(y, x, lo, hi)", "steps": "steps(y, x)",
                 "best": "best(f) or best(f, g >= b)"}[fname]
        raise pos.error(f"{fname}() takes {want} arguments, got {len(args)}: {usage}", tok)
    pos.call_tokens.setdefault(fname, tok)
    if fname == "area":
        return AreaCall(*args)
    if fname == "steps":
        return StepsCall(*args)
    if len(args) == 1:
        return BestCall(args[0])
    bound = args[1]
    if not isinstance(bound, Comparison):
        raise pos.error("best(f, ...) takes a bound as its second argument, such as "
                        "best(recall, precision >= 0.9)", tok)
    if bound.op not in (">=", "<="):
        raise pos.error(f"'{bound.op}' is not a bound; best(f, g >= b) takes >= or <= (on a "
                        "curve, a strict bound is the same bound)", bound.op)
    return BestCall(args[0], bound.lhs, bound.rhs, sympy.Integer(1 if bound.op == ">=" else -1))


# --- index form ----------------------------------------------------------------------------

class CurveReduction(sympy.Function):
    """A reduction over thresholds; its arguments are local 2 x 2 expressions (and bounds)."""

    #: The name in the formula language.
    keyword = ""

    def _sympystr(self, printer: Any) -> str:
        return f"{self.keyword}({', '.join(printer._print(a) for a in self.args)})"


class Area(CurveReduction):
    """``area(y, x) = sum_k (x_k - x_{k+1}) (y_k + y_{k+1}) / 2``."""

    nargs = 2
    keyword = "area"


class AreaWithin(CurveReduction):
    """``area(y, x, lo, hi)``: the part of :class:`Area` with ``x`` in ``[lo, hi]``."""

    nargs = 4
    keyword = "area"


class Steps(CurveReduction):
    """``steps(y, x) = sum_k (x_k - x_{k+1}) y_k``."""

    nargs = 2
    keyword = "steps"


class Best(CurveReduction):
    """``best(f) = max_k f_k``."""

    nargs = 1
    keyword = "best"


class BestWhere(CurveReduction):
    """``best(f, g >= b)`` as (f, d) with ``d = g - b`` (``b - g`` for ``<=``): ``max f_k`` over
    the thresholds where ``d_k >= 0``."""

    nargs = 2
    keyword = "best"

    def _sympystr(self, printer: Any) -> str:
        return f"best({printer._print(self.args[0])}, {printer._print(self.args[1])} >= 0)"


def reductions(expr: sympy.Expr) -> list[CurveReduction]:
    """The distinct reduction nodes of an outer expression, in a stable order."""
    return sorted(expr.atoms(CurveReduction), key=sympy.default_sort_key)


@dataclass(frozen=True)
class CurveFormula:
    """A parsed curve formula: ``expr`` over reduction nodes, ``P``, ``N`` and parameters."""

    text: str
    expr: sympy.Expr
    parameters: tuple[str, ...]
    defaults: dict[str, Any] = field(default_factory=dict)
    #: Named metrics the formula uses (their parameter bounds apply).
    metrics: tuple[str, ...] = ()
    #: The statistic it is over (``metricc.analysis.statistics.STATISTICS``).
    statistic: ClassVar[str] = "curve"
    #: A curve formula takes no ``subject to`` clause (the bound goes into ``best()``).
    constraints: ClassVar[tuple[Any, ...]] = ()


# --- resolution ----------------------------------------------------------------------------

def uses_curve(exprs: Iterable[sympy.Expr]) -> bool:
    """Whether any parsed (unresolved) expression calls a reduction or names a curve metric."""
    return any(e.has(*_CALLS) or any((m := lookup(s.name)) is not None and m.curve
                                     for s in e.atoms(sympy.Symbol)) for e in exprs)


_MATRIX_NAMES = {SumOf: "sum", RowTotal: "row", ColTotal: "col", Delta: "delta", PresentCall: "present"}
_KEYWORDS = {AreaCall: "area", StepsCall: "steps", BestCall: "best"}


class _Resolver(ReductionResolver):
    """One curve formula's names: bindings, counts, totals, named metrics and parameters."""

    reductions = REDUCTIONS

    def reserved(self, name: str) -> str | None:
        if name in COUNTS or name in TOTALS or name == "n":
            return f"'{name}' is built in and cannot be redefined in a curve formula; choose another name"
        return None

    def name(self, e: sympy.Symbol, local: bool) -> sympy.Expr:
        n = e.name
        if n in self.defined:
            return self.walk(self.defined[n], local)
        if local and n in COUNTS:
            return COUNTS[n]
        if local and n in DERIVED:
            return DERIVED[n]  # inside a reduction P is TP + FN at that threshold, and so on
        if n in TOTALS:
            return TOTALS[n]
        if n == "n":
            return TOTALS["P"] + TOTALS["N"]
        if n in COUNTS or n in DERIVED:
            raise self.fail(f"'{n}' is a count at one threshold; in a curve formula it stands only "
                            "inside area(), steps() or best(), e.g. area(recall, fpr)", n)
        metric = lookup(n)
        if metric is None:
            self.params.add(n)
            return sympy.Symbol(n)
        if metric.matrix:
            raise self.fail(f"'{n}' is a K x K metric and cannot be mixed with a curve formula", n)
        if metric.curve and local:
            raise self.fail(f"'{n}' is a curve metric and cannot stand inside another reduction", n)
        if not metric.curve and not local:
            raise self.fail(f"'{n}' is a 2x2 metric at one threshold; in a curve formula it stands "
                            f"only inside area(), steps() or best(), e.g. best({n})", n)
        return self.library(n).expr  # type: ignore[no-any-return]

    def constant(self, e: sympy.Expr, what: str, keyword: str) -> sympy.Expr:
        out = self.walk(e, False)
        if out.has(CurveReduction) or out.free_symbols & set(TOTALS.values()):
            raise self.fail(f"{what} takes numbers or parameters", keyword)
        return out

    def reduction(self, e: sympy.Expr, local: bool) -> sympy.Expr:
        keyword = _KEYWORDS[type(e)]
        if local:
            raise self.fail(f"{keyword}() stands inside another reduction; reductions do not nest "
                            "(their arguments are formulas at one threshold)", keyword)
        inner = [self.walk(a, True) for a in e.args[:2]]
        if isinstance(e, StepsCall):
            return Steps(*inner)
        if isinstance(e, AreaCall):
            if len(e.args) == 2:
                return Area(*inner)
            lo, hi = (self.constant(a, "area()'s range [lo, hi]", "area") for a in e.args[2:])
            return AreaWithin(*inner, lo, hi)
        if len(e.args) == 1:
            return Best(inner[0])
        f, lhs = inner
        return BestWhere(f, (lhs - self.walk(e.args[2], True)) * e.args[3])

    def walk(self, e: sympy.Expr, local: bool) -> sympy.Expr:
        if isinstance(e, sympy.Symbol):
            return self.name(e, local)
        if isinstance(e, PLACEHOLDERS):
            what = e.args[0].name if isinstance(e, Entry) else _MATRIX_NAMES[type(e)]
            raise self.fail("a curve formula cannot be mixed with K x K constructs (C[i, j], sum, "
                            "row, col, delta, present); write them as separate metrics", what)
        if isinstance(e, _CALLS):
            return self.reduction(e, local)
        if not e.args:
            return e
        return e.func(*(self.walk(a, local) for a in e.args))


def resolve_curve(text: str, bindings: list[tuple[Any, sympy.Expr]], body: sympy.Expr,
                  pos: Any, functions: Collection[str],
                  parse_metric: Callable[[str], Any]) -> CurveFormula:
    """Turn the parser's placeholders into index form, with positioned errors.

    ``bindings`` and ``body`` are the parser's raw trees (every symbol a name as written);
    ``parse_metric`` parses a named metric's formula (the parser passes its own, so this
    module needs no parser). Bindings are substituted where they are used, so one binding
    may be a local 2 x 2 expression (used inside a reduction) or an outer one.
    """
    resolver = _Resolver(pos, parse_metric)
    resolver.bind(bindings, functions)
    result = resolver.walk(body, False)
    if not result.has(CurveReduction):
        raise MetricError(f"formula {text.strip()!r} uses no reduction; a curve formula uses "
                          "area(), steps() or best()")
    return CurveFormula(text, result, tuple(sorted(resolver.params)), resolver.defaults,
                        tuple(resolver.used))
