"""Group formulas in the language: 2 x 2 formulas taken per group and reduced over the groups.

A group metric is a function of the 2 x 2 counts of every group ``g = 0 .. G-1``
(``TP_g FP_g FN_g TN_g``). A reduction takes one 2 x 2 formula, evaluates it per group and
reduces the ``G`` values: ``gap(f)`` (largest minus smallest), ``ratio(f)`` (smallest over
largest), ``worst(f)`` (the smallest), ``groupmax(f)`` (the largest), ``groupmean(f)`` and
``vsrest(f)`` (the largest ``|f(group) - f(the other groups together)|``). Outside the
reductions ``TP FP FN TN`` (and ``P N PP PN n``) are the overall counts, so
``accuracy - 0.5 * gap(fpr)`` mixes an overall rate with a gap, and a ``subject to``
clause may bound reductions: ``accuracy subject to gap(recall) <= 0.05``
(``docs/groups.md``). The parser builds :class:`GroupCall` placeholders while it reads;
:func:`resolve_groups` turns them into the index form: reduction nodes
(:class:`GroupReduction`) holding their local 2 x 2 expression.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import sympy

from ..errors import MetricError
from ..library import lookup
from .curve import AreaCall, BestCall, StepsCall
from .matrix import PLACEHOLDERS
from .reductions import ReductionResolver
from .symbols import COUNTS, DERIVED

__all__ = ["GROUP_REDUCTIONS", "Gap", "GroupCall", "GroupConstraint", "GroupFormula", "GroupMax",
           "GroupMean", "GroupReduction", "Ratio", "VsRest", "Worst", "group_call", "group_nodes",
           "resolve_groups", "uses_groups"]


class GroupCall(sympy.Function):
    """``gap(f)`` (and the other reductions) as written: (keyword symbol, f)."""


def group_call(pos: Any, tok: Any, fname: str, args: list[Any]) -> sympy.Expr:
    """The placeholder for a group reduction call, or a positioned error for its misuse."""
    if len(args) != 1:
        raise pos.error(f"{fname}() takes one 2 x 2 formula, taken per group, got {len(args)} "
                        f"arguments: {fname}(recall)", tok)
    pos.call_tokens.setdefault(fname, tok)
    return GroupCall(sympy.Symbol(fname), args[0])


class GroupReduction(sympy.Function):
    """A reduction over groups; its one argument is a local 2 x 2 expression."""

    nargs = 1
    #: The name in the formula language.
    keyword = ""

    def _sympystr(self, printer: Any) -> str:
        return f"{self.keyword}({printer._print(self.args[0])})"


class Gap(GroupReduction):
    """``max_g f_g - min_g f_g`` (fairlearn's ``difference()``)."""

    keyword = "gap"


class Ratio(GroupReduction):
    """``min_g f_g / max_g f_g`` (fairlearn's ``ratio()``)."""

    keyword = "ratio"


class Worst(GroupReduction):
    """``min_g f_g``: the worst-served group for a rate where higher is better."""

    keyword = "worst"


class GroupMax(GroupReduction):
    """``max_g f_g``: the worst group for an error rate."""

    keyword = "groupmax"


class GroupMean(GroupReduction):
    """The mean of ``f_g`` over the groups."""

    keyword = "groupmean"


class VsRest(GroupReduction):
    """``max_g |f(counts_g) - f(counts of the other groups)|``: each group against the rest."""

    keyword = "vsrest"


_NODES: dict[str, type[GroupReduction]] = {c.keyword: c for c in (Gap, Ratio, Worst, GroupMax,
                                                                   GroupMean, VsRest)}
#: The reductions a group formula may call.
GROUP_REDUCTIONS = tuple(_NODES)


def group_nodes(expr: sympy.Expr) -> list[GroupReduction]:
    """The distinct reduction nodes of an outer expression, in a stable order."""
    return sorted(expr.atoms(GroupReduction), key=sympy.default_sort_key)


@dataclass(frozen=True)
class GroupConstraint:
    """One ``lhs op rhs`` of a group formula's ``subject to`` clause, sides resolved."""

    text: str
    lhs: sympy.Expr
    op: str
    rhs: sympy.Expr


@dataclass(frozen=True)
class GroupFormula:
    """A parsed group formula: ``expr`` over reduction nodes, the overall counts and parameters;
    ``constraints`` its ``subject to`` clause."""

    text: str
    expr: sympy.Expr
    parameters: tuple[str, ...]
    defaults: dict[str, Any] = field(default_factory=dict)
    metrics: tuple[str, ...] = ()
    group_constraints: tuple[GroupConstraint, ...] = ()
    #: The statistic it is over (``metricc.analysis.statistics.STATISTICS``).
    statistic: ClassVar[str] = "groups"
    #: The 2 x 2 constraint objects of ``Metric.constraints`` (none: the clause is above).
    constraints: ClassVar[tuple[Any, ...]] = ()


def _group_metric(name: str) -> bool:
    metric = lookup(name)
    return metric is not None and metric.groups


def uses_groups(exprs: Iterable[sympy.Expr]) -> bool:
    """Whether any parsed (unresolved) expression calls a group reduction or names a group metric."""
    return any(e.has(GroupCall) or any(_group_metric(s.name) for s in e.atoms(sympy.Symbol))
               for e in exprs)


_FOREIGN = (*PLACEHOLDERS, AreaCall, StepsCall, BestCall)


class _Resolver(ReductionResolver):
    """One group formula's names: bindings, counts, named metrics and parameters."""

    reductions = GROUP_REDUCTIONS

    def reserved(self, name: str) -> str | None:
        if name in COUNTS:
            return (f"'{name}' is one of the four counts (TP, FP, FN, TN) and cannot be redefined; "
                    "choose another name")
        return None

    def name(self, e: sympy.Symbol, local: bool) -> sympy.Expr:
        n = e.name
        if n in self.defined:
            return self.walk(self.defined[n], local)
        if n in COUNTS:
            return COUNTS[n]
        if n in DERIVED:
            return DERIVED[n]
        metric = lookup(n)
        if metric is None:
            self.params.add(n)
            return sympy.Symbol(n)
        if metric.matrix or metric.curve:
            kind = "K x K" if metric.matrix else "curve"
            raise self.fail(f"'{n}' is a {kind} metric and cannot be mixed with a group formula", n)
        if metric.groups and local:
            raise self.fail(f"'{n}' is a group metric and cannot stand inside another reduction; "
                            "reductions take a 2 x 2 formula, such as gap(recall)", n)
        return self.library(n).expr  # type: ignore[no-any-return]

    def walk(self, e: sympy.Expr, local: bool) -> sympy.Expr:
        if isinstance(e, sympy.Symbol):
            return self.name(e, local)
        if isinstance(e, GroupCall):
            keyword = e.args[0].name
            if local:
                raise self.fail(f"{keyword}() stands inside another reduction; reductions do not "
                                "nest (their argument is a 2 x 2 formula per group)", keyword)
            inner = self.walk(e.args[1], True)
            if not inner.free_symbols & set(COUNTS.values()):
                raise self.fail(f"{keyword}() takes a formula over the counts, such as "
                                f"{keyword}(recall); its argument depends on no count", keyword)
            return _NODES[keyword](inner)
        if isinstance(e, _FOREIGN):
            raise MetricError("a group formula cannot be mixed with K x K constructs (C[i, j], sum, "
                              "row, col, delta, present) or curve reductions (area, steps, best); "
                              "write them as separate metrics")
        if not e.args:
            return e
        return e.func(*(self.walk(a, local) for a in e.args))


def resolve_groups(text: str, bindings: list[tuple[Any, sympy.Expr]], body: sympy.Expr,
                   clause: list[Any] | None, pos: Any, functions: Collection[str],
                   parse_metric: Callable[[str], Any], written: list[str] | None = None) -> GroupFormula:
    """Turn the parser's placeholders into index form, with positioned errors.

    ``clause`` holds the raw ``subject to`` constraints ``(lhs, op, rhs)``; each side is
    resolved as the body is (reductions and overall counts). ``written``: each constraint's own
    text, which names it (in logs and checkpoints); the resolved form where not given.
    """
    resolver = _Resolver(pos, parse_metric)
    resolver.bind(bindings, functions)
    result = resolver.walk(body, False)
    constraints = []
    for i, raw in enumerate(clause or []):
        lhs, op, rhs = raw
        sides = [resolver.walk(s, False) for s in (lhs, rhs)]
        shown = f"{sympy.sstr(sides[0])} {op} {sympy.sstr(sides[1])}"
        if not (sides[0] - sides[1]).free_symbols & {*COUNTS.values()} and \
                not (sides[0] - sides[1]).has(GroupReduction):
            raise MetricError(f"constraint {shown!r} depends on no prediction; bound a rate or a "
                              "reduction, such as gap(recall) <= 0.05")
        constraints.append(GroupConstraint(written[i].strip() if written else shown, sides[0], str(op),
                                           sides[1]))
    if not result.has(GroupReduction) and not any(
            (c.lhs - c.rhs).has(GroupReduction) for c in constraints):
        raise MetricError(f"formula {text.strip()!r} uses no group reduction; a group formula uses "
                          f"{', '.join(GROUP_REDUCTIONS)}")
    params = resolver.params - set(resolver.defined)
    return GroupFormula(text, result, tuple(sorted(params)), resolver.defaults, tuple(resolver.used),
                        tuple(constraints))
