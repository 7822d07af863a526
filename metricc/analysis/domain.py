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
from typing import Any

import sympy

from ..language.symbols import COUNTS, TO_POSITIVE
from .budget import BudgetExceeded, bounded, evaluate, evaluator, float_evaluator
from .size import tame

__all__ = ["domain_problem"]


def _points() -> list[tuple[float, ...]]:
    # A few simple points first (they make readable witnesses), then log-uniform
    # counts in [0.01, 1000], fixed seed: the same formula gets the same answer.
    simple = [(1.0, 1.0, 1.0, 1.0), (0.5, 1.0, 1.0, 1.0), (1.0, 0.5, 1.0, 1.0),
              (1.0, 1.0, 0.5, 1.0), (1.0, 1.0, 1.0, 0.5), (3.0, 1.0, 2.0, 5.0),
              (1.0, 3.0, 5.0, 2.0), (5.0, 2.0, 1.0, 3.0), (2.0, 5.0, 3.0, 1.0)]
    rng = random.Random(18)
    return simple + [tuple(round(10 ** rng.uniform(-2, 3), 3) for _ in range(4))
                     for _ in range(120)]


_POINTS = _points()


def _negative_at(base: sympy.Expr) -> tuple[float, ...] | None:
    """A sample point where ``base`` is negative, or ``None``."""
    symbols = list(COUNTS.values())
    try:
        fast = float_evaluator(base, symbols)
    except (NameError, SyntaxError, TypeError, KeyError):  # a node SymPy cannot print
        return None
    precise: Any = None
    for point in _POINTS:
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


def domain_problem(expr: sympy.Expr) -> str | None:
    """Why ``expr`` (over the counts) is not real somewhere, or ``None``.

    ``log`` of 0 and ``0`` to a negative power are left to the zero-division
    guard (``docs/numerics.md``); only negative bases and log arguments count.
    SymPy's sign proofs run in a worker (:func:`metricc.analysis.budget.bounded`,
    :data:`DOMAIN_SECONDS`); past it every piece is decided by the sample points alone.
    """
    try:
        return bounded(_problem, expr, True, seconds=DOMAIN_SECONDS, inline=tame(expr))  # type: ignore[no-any-return]
    except BudgetExceeded:
        return _problem(expr, False)


#: CPU seconds for SymPy's proofs that the bases are nonnegative.
DOMAIN_SECONDS = 1.0


def _problem(expr: sympy.Expr, prove: bool) -> str | None:
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and not node.exp.is_integer:
            base = node.base
        elif isinstance(node, sympy.log):
            base = node.args[0]
        else:
            continue
        if not base.free_symbols & set(COUNTS.values()):
            continue
        if prove and base.xreplace(TO_POSITIVE).is_nonnegative:
            continue
        point = _negative_at(base)
        if point is not None:
            at = ", ".join(f"{k}={v:g}" for k, v in zip(COUNTS, point, strict=True))
            shown = str(base) if len(str(base)) <= 60 else str(base)[:57] + "..."
            if isinstance(node, sympy.log):
                return (f"the log of a negative number is not real, and {shown} < 0 "
                        f"at {at}; take the log of a nonnegative expression")
            return (f"a negative number to a non-integer power is not real, and the base "
                    f"{shown} < 0 at {at}; raise only a nonnegative base to such a power "
                    "(abs(x)^p, or ((x + 1)/2)^p for x in [-1, 1])")
    return None
