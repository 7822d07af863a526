"""Stage 2 for groups: each reduction's local 2 x 2 term and its partials, and the outer form.

A group metric is ``h(r_0, r_1, ..., TP, FP, FN, TN)``: an outer expression over reductions
``r_j = R_j(f_j(c_0), ..., f_j(c_{G-1}))`` of a local 2 x 2 formula ``f_j`` at each group's
counts ``c_g``, and over the overall counts (the sums over groups). Its gradient with respect
to group ``g``'s counts is ``sum_j dh/dr_j * dR_j/df_g * df_j/dc_g + dh/dc`` (the overall
counts move with every group's), so the backward needs only SymPy's partials of each ``f_j``
(four, over nonnegative counts) and of ``h``: derivatives symbolic in ``G``, as the curve's
are in the number of thresholds. The reductions' own weights ``dR/df_g`` (a softmax for the
smooth maximum and minimum, ``docs/groups.md``) are written once in the kernel writer.
SymPy only; no parser, no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy

from ..errors import MetricError
from ..language.groups import GroupReduction, group_nodes
from ..language.symbols import COUNTS, EPS, TO_POSITIVE
from .counts import guard, undefined_where
from .curve import guard_outer
from .domain import reductions_domain_problem

__all__ = ["DEFAULT_GROUP_TAU", "TAU", "GroupForms", "LocalTerm", "group_domain_problem", "group_forms",
           "group_undefined_where", "local_term"]

#: The temperature of the smooth maximum and minimum over groups (a kernel argument).
TAU = sympy.Symbol("tau", positive=True)
#: Its default: the smooth maximum ``tau * logsumexp(f/tau)`` exceeds the maximum by at most
#: ``tau * log(G)`` (0.007 for two groups, 0.02 for eight), so a relaxed gap overstates the
#: gap by at most twice that: a relaxed constraint ``gap <= b`` is the stricter one.
DEFAULT_GROUP_TAU = 0.01
_COUNTS = tuple(COUNTS.values())
_NONNEG = {s: sympy.Symbol(s.name, nonnegative=True) for s in _COUNTS}
_BACK = {v: k for k, v in _NONNEG.items()}


@dataclass(frozen=True)
class LocalTerm:
    """A reduction's local formula ``f`` (eps-guarded), its four partials ``df/dTP ... df/dTN``,
    and ``denominators``: where ``f`` is undefined when one vanishes (a group without positives
    has no recall), so that group takes no part in the reduction."""

    f: sympy.Expr
    partials: tuple[sympy.Expr, sympy.Expr, sympy.Expr, sympy.Expr]
    denominators: tuple[sympy.Expr, ...]


def local_term(node: GroupReduction, eps: sympy.Expr = EPS) -> LocalTerm:
    """The guarded local term of one reduction and its partials.

    >>> from metricc.language.parse import parse
    >>> t = local_term(parse("gap(recall)").expr)
    >>> t.f, t.partials[0], t.denominators
    (TP/(FN + TP + eps), -TP/(FN + TP + eps)**2 + 1/(FN + TP + eps), (FN + TP,))
    """
    raw = node.args[0]
    f = guard(raw, eps).xreplace(_NONNEG)
    partials = tuple(sympy.diff(f, _NONNEG[s]).xreplace(_BACK) for s in _COUNTS)
    return LocalTerm(f.xreplace(_BACK), partials,  # type: ignore[arg-type]
                     tuple(undefined_where(raw)))


@dataclass(frozen=True)
class GroupForms:
    """Several outer expressions over the same reductions (the objective, then each constraint's
    violation): ``values[i]`` guarded by eps, ``reduction_partials[i][j] = dh_i/dr_j`` and
    ``count_partials[i] = (dh_i/dTP, ..., dh_i/dTN)`` at the overall counts."""

    nodes: tuple[GroupReduction, ...]
    symbols: tuple[sympy.Symbol, ...]
    values: tuple[sympy.Expr, ...]
    reduction_partials: tuple[tuple[sympy.Expr, ...], ...]
    count_partials: tuple[tuple[sympy.Expr, ...], ...]


def group_forms(exprs: tuple[sympy.Expr, ...], eps: sympy.Expr = EPS) -> GroupForms:
    """Split resolved group expressions into their reductions and guarded outer expressions.

    >>> from metricc.language.parse import parse
    >>> forms = group_forms((parse("accuracy - gap(fpr)").expr,))
    >>> forms.reduction_partials
    ((-1,),)
    """
    nodes = tuple(sorted({n for e in exprs for n in group_nodes(e)}, key=sympy.default_sort_key))
    syms = tuple(sympy.Symbol(f"r{j}") for j in range(len(nodes)))
    real = {s: sympy.Symbol(s.name, real=True) for s in (*syms, *_COUNTS)}
    back = {v: k for k, v in real.items()}
    values, by_node, by_count = [], [], []
    for e in exprs:
        outer = e.xreplace(dict(zip(nodes, syms, strict=True)))
        if outer.has(GroupReduction):  # pragma: no cover - every node was replaced
            raise MetricError("internal: a group reduction left in the outer expression")
        # the counts' own policy first (an overall rate's denominator gets + eps, as a 2 x 2
        # metric's), then the reductions' values, whose sign is open
        value = guard_outer(guard(outer, eps), set(syms), eps)
        on_reals = value.xreplace(real)
        values.append(value)
        by_node.append(tuple(sympy.diff(on_reals, real[s]).xreplace(back) for s in syms))
        by_count.append(tuple(sympy.diff(on_reals, real[s]).xreplace(back) for s in _COUNTS))
    return GroupForms(nodes, syms, tuple(values), tuple(by_node), tuple(by_count))


def group_undefined_where(exprs: tuple[sympy.Expr, ...]) -> list[tuple[str, sympy.Expr]]:
    """Where the (unguarded) metric is undefined: ``(where, expression that vanishes)``. A
    group whose local formula is undefined is left out of its reduction (as fairlearn leaves
    out groups absent from the data); the outer expression's own denominators are listed too.

    >>> from metricc.language.parse import parse
    >>> group_undefined_where((parse("gap(recall)").expr,))
    [('gap(...) in a group (that group is left out)', FN + TP)]
    """
    out: list[tuple[str, sympy.Expr]] = []
    for e in exprs:
        for node in group_nodes(e):
            for d in undefined_where(node.args[0]):
                item = (f"{node.keyword}(...) in a group (that group is left out)", d)
                if item not in out:
                    out.append(item)
        forms = group_forms((e,), sympy.S.Zero)
        for piece in sympy.preorder_traversal(forms.values[0]):
            if isinstance(piece, sympy.Pow) and piece.exp.is_negative and piece.base.free_symbols:
                item = ("the outer expression", piece.base)
                if item not in out:
                    out.append(item)
    return out


def group_domain_problem(expr: sympy.Expr,
                         samples: Callable[[tuple[GroupReduction, ...]], tuple[tuple[float, ...], ...]]
                         ) -> str | None:
    """Why a group metric is not real for some counts, or ``None``: each reduction's local formula
    over the counts (the 2 x 2 domain), then the outer expression over the reductions' values and
    the overall counts, searched at ``samples(nodes)``: rows ``(r_0, ..., TP, FP, FN, TN)`` that
    group counts reach (exact values at random counts, which the facade computes; called only
    where the outer expression has a piece that needs a nonnegative base)."""
    return reductions_domain_problem(expr, group_nodes(expr), _COUNTS, TO_POSITIVE, samples)
