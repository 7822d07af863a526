"""Compile-time domain check: a metric must be real wherever it is defined.

A negative number to a fractional power (``mcc^f1``, ``sqrt(TP - FP)``) or the
log of a negative number has no real value, and the loss would be NaN, with
NaN gradients, on every batch that lands there. Such a formula is refused when
it is compiled, with a witness: counts where the base is negative.

The test is by example, so that no formula is refused on a mere failure to
prove a sign: a piece is refused when SymPy cannot show its base nonnegative
*and* a sample point (confirmed at 30 digits) makes it negative.

>>> import sympy
>>> TP, FP = sympy.symbols("TP FP")
>>> print(domain_problem(sympy.sqrt(TP - FP)))  # doctest: +NORMALIZE_WHITESPACE
a negative number to a non-integer power is not real, and the base -FP + TP < 0 at
TP=0.5, FP=1, FN=1, TN=1; raise only a nonnegative base to such a power (abs(x)^p,
or ((x + 1)/2)^p for x in [-1, 1])
>>> domain_problem(sympy.sqrt(TP + FP)) is None
True
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy

from ..language.symbols import COUNTS, TO_POSITIVE
from .budget import BudgetExceeded, bounded, evaluate, evaluator, float_evaluator
from .size import tame

__all__ = ["COUNTS_DOMAIN", "Domain", "candidates", "describe", "domain_problem", "negative_at",
           "reductions_domain_problem", "sample_points"]


def sample_points(n: int, seed: int = 18, count: int = 120) -> tuple[tuple[float, ...], ...]:
    """``count`` log-uniform points in ``[0.01, 1000]^n``, fixed seed: the same formula gets the
    same answer."""
    rng = random.Random(seed)
    return tuple(tuple(round(10 ** rng.uniform(-2, 3), 3) for _ in range(n)) for _ in range(count))


@dataclass(frozen=True)
class Domain:
    """Where a statistic's formula takes its values, as the statistic tells the domain check:
    its variables, points of them it can reach (the witnesses are searched there), how each
    variable is named in a witness, and the renaming that gives SymPy's sign proofs their
    assumptions (``TP`` -> a positive ``TP``). Pickles (it travels to the bounded worker)."""

    symbols: tuple[sympy.Symbol, ...]
    points: tuple[tuple[float, ...], ...]
    names: tuple[str, ...]
    assume: Mapping[sympy.Symbol, sympy.Symbol] = field(default_factory=dict)


# A few simple points first (they make readable witnesses), then log-uniform counts.
_SIMPLE = ((1.0, 1.0, 1.0, 1.0), (0.5, 1.0, 1.0, 1.0), (1.0, 0.5, 1.0, 1.0),
           (1.0, 1.0, 0.5, 1.0), (1.0, 1.0, 1.0, 0.5), (3.0, 1.0, 2.0, 5.0),
           (1.0, 3.0, 5.0, 2.0), (5.0, 2.0, 1.0, 3.0), (2.0, 5.0, 3.0, 1.0))
#: The 2 x 2 counts: four nonnegative numbers.
COUNTS_DOMAIN = Domain(tuple(COUNTS.values()), _SIMPLE + sample_points(4), tuple(COUNTS), TO_POSITIVE)


def negative_at(base: sympy.Expr, domain: Domain = COUNTS_DOMAIN) -> tuple[float, ...] | None:
    """A point of ``domain`` where ``base`` is negative (confirmed at 30 digits), or ``None``."""
    symbols = list(domain.symbols)
    try:
        fast = float_evaluator(base, symbols)
    except (NameError, SyntaxError, TypeError, KeyError):  # a node SymPy cannot print
        return None
    precise: Any = None
    for point in domain.points:
        try:
            v = float(fast(*point))
        except (ZeroDivisionError, ValueError, OverflowError, TypeError):
            continue
        if not (math.isfinite(v) and v < 0):
            continue
        # Rounding can make a tiny positive value look negative: confirm at 30 digits.
        precise = precise or evaluator(base, symbols)
        exact = evaluate(precise, point)
        if exact is not None and exact.imag == 0 and exact.real < 0:
            return point
    return None


def candidates(expr: sympy.Expr, variables: Sequence[sympy.Symbol] | None = None
               ) -> list[tuple[sympy.Expr, bool]]:
    """The pieces that are real only where their base is nonnegative: ``(base, is_log)`` for
    every non-integer power and log in ``expr`` whose base holds one of ``variables`` (all
    free symbols where ``None``). ``log`` of 0 and ``0`` to a negative power are left to the
    zero-division guard (``docs/numerics.md``)."""
    out: list[tuple[sympy.Expr, bool]] = []
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and not node.exp.is_integer:
            piece = (node.base, False)
        elif isinstance(node, sympy.log):
            piece = (node.args[0], True)
        else:
            continue
        if (variables is None and piece[0].free_symbols) or piece[0].free_symbols & set(variables or ()):
            out.append(piece)
    return out


def describe(base: str, is_log: bool, at: str) -> str:
    """Why a piece is not real: its ``base`` (as shown), negative ``at`` a witness."""
    shown = base if len(base) <= 60 else base[:57] + "..."
    if is_log:
        return (f"the log of a negative number is not real, and {shown} < 0 at {at}; "
                "take the log of a nonnegative expression")
    return (f"a negative number to a non-integer power is not real, and the base {shown} < 0 at {at}; "
            "raise only a nonnegative base to such a power (abs(x)^p, or ((x + 1)/2)^p for x in [-1, 1])")


def domain_problem(expr: sympy.Expr, domain: Domain = COUNTS_DOMAIN,
                   shown: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> str | None:
    """Why ``expr`` (over ``domain``'s variables; the 2 x 2 counts by default) is not real
    somewhere, or ``None``. ``shown``: what each variable stands for in the message.

    SymPy's sign proofs run in a worker (:func:`metricc.analysis.budget.bounded`,
    :data:`DOMAIN_SECONDS`); past it every piece is decided by the sample points alone.
    """
    try:
        return bounded(_problem, expr, domain, shown, True, seconds=DOMAIN_SECONDS,  # type: ignore[no-any-return]
                       inline=tame(expr))
    except BudgetExceeded:
        return _problem(expr, domain, shown, False)


#: CPU seconds for SymPy's proofs that the bases are nonnegative.
DOMAIN_SECONDS = 1.0


def _problem(expr: sympy.Expr, domain: Domain, shown: Mapping[sympy.Symbol, sympy.Expr] | None,
             prove: bool) -> str | None:
    for base, is_log in candidates(expr, domain.symbols):
        if prove and base.xreplace(domain.assume).is_nonnegative:
            continue
        point = negative_at(base, domain)
        if point is not None:
            at = ", ".join(f"{k}={v:g}" for k, v in zip(domain.names, point, strict=True))
            return describe(str(base.xreplace(shown) if shown else base), is_log, at)
    return None


def reductions_domain_problem(expr: sympy.Expr, nodes: Sequence[Any], totals: Sequence[sympy.Symbol],
                              assume: Mapping[sympy.Symbol, sympy.Symbol],
                              samples: Any) -> str | None:
    """The domain check of a statistic built of reductions (the curve's over thresholds, the
    groups' over groups): each node's local 2 x 2 arguments over the counts, then the outer
    expression over the nodes' values (``r_j``) and ``totals``, searched at ``samples(nodes)``:
    rows ``(r_0, ..., *totals)`` that the statistic reaches (computed only where the outer
    expression has a piece that needs a nonnegative base)."""
    counts = set(COUNTS.values())
    for node in nodes:
        for arg in node.args:
            if arg.free_symbols & counts and (problem := domain_problem(arg)) is not None:
                return f"in {node.keyword}(...), {problem}"
    syms = tuple(sympy.Symbol(f"r{j}") for j in range(len(nodes)))
    outer = expr.xreplace(dict(zip(nodes, syms, strict=True)))
    variables = (*syms, *totals)
    if not candidates(outer, variables):
        return None
    names = tuple(str(n) if len(str(n)) <= 40 else f"{n.keyword}(...)" for n in nodes)
    domain = Domain(variables, samples(tuple(nodes)), (*names, *(t.name for t in totals)), assume)
    return domain_problem(outer, domain, shown=dict(zip(syms, nodes, strict=True)))
