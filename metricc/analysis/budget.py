"""Bounded analysis: time budgets for symbolic proofs and a safe high-precision evaluator.

SymPy has no time limit of its own, and some inputs that pass the size limits
of :mod:`metricc.language.parse` still make a proof run for minutes (the sign of the
partials of ``mcc^f1``, ``simplify`` on a difference of four named metrics).
The analysis therefore checks a deadline (:func:`limit`, :func:`spent`)
between SymPy calls and, once it has passed, gives the verdict it can reach without the proof (a sampled
monotonicity, an equality at exact random points), which says so.

Evaluating at a point is done with mpmath floats rather than SymPy numbers:
``Rational(7, 10)**Rational(3, 5)`` makes SymPy factor integers, which hangs
on the rationals that a fractional power of a fractional power produces.

>>> import sympy
>>> TP = sympy.Symbol("TP")
>>> f = evaluator(sympy.sqrt(TP) - sympy.Rational(1, 3), [TP])
>>> round(float(f(4)), 6)
1.666667
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import mpmath
import sympy
from sympy.printing.lambdarepr import MpmathPrinter
from sympy.printing.pycode import PythonCodePrinter

from ..language.functions import mpmath_functions

__all__ = [
    "PROOF_SECONDS",
    "evaluate",
    "evaluator",
    "float_evaluator",
    "limit",
    "spent",
]

#: Seconds one metric's symbolic proofs may take in ``check()`` (and in
#: ``verify()``) before the analysis falls back to sampling. The sampled
#: verdicts are deterministic; only which of them got a proof depends on the
#: machine's speed, and each verdict says which it is.
PROOF_SECONDS = 2.0


# exp/power arguments beyond this many e-folds are overflow: float64 ends at
# 709, and mpmath would spend minutes on exp(exp(exp(exp(2)))).
_MAX_EFOLDS = 10_000


class _Deadline:
    __slots__ = ("at", "exhausted")

    def __init__(self, at: float) -> None:
        self.at = at
        self.exhausted = False


_CURRENT: ContextVar[_Deadline | None] = ContextVar("metricc_deadline", default=None)


@contextmanager
def limit(seconds: float = PROOF_SECONDS) -> Iterator[_Deadline]:
    """Give the symbolic steps run inside at most ``seconds`` of this thread's CPU time.

    CPU time, not wall time, so a busy machine does not cut proofs short. Nested
    limits keep the earlier deadline. The yielded object's ``exhausted`` tells
    whether some step gave up.

    >>> with limit(0.0) as d:
    ...     spent()
    True
    """
    outer = _CURRENT.get()
    at = time.thread_time() + seconds
    deadline = _Deadline(min(at, outer.at) if outer is not None else at)
    token = _CURRENT.set(deadline)
    try:
        yield deadline
    finally:
        _CURRENT.reset(token)
        if outer is not None and deadline.exhausted:
            outer.exhausted = True


def spent() -> bool:
    """Whether the current :func:`limit` has run out (and note that a step gave up)."""
    deadline = _CURRENT.get()
    if deadline is None:
        return False
    if deadline.exhausted or time.thread_time() >= deadline.at:
        deadline.exhausted = True
        return True
    return False


def _exp(x: Any) -> Any:
    if mpmath.re(x) > _MAX_EFOLDS:
        raise OverflowError("exp overflow")
    return mpmath.exp(x)


def _pow(a: Any, b: Any) -> Any:
    if a != 0 and abs(mpmath.re(b)) * abs(mpmath.log(abs(a))) > _MAX_EFOLDS:
        raise OverflowError("power overflow")
    return mpmath.power(a, b)


def _heaviside(x: Any) -> Any:
    return 0 if x < 0 else (1 if x > 0 else 0.5)


class _StepPrinter:
    """Heaviside as a call: the stock printers rewrite it as a Piecewise, which took
    10 s for one partial of a min() of eight arguments."""

    def _print_Heaviside(self, expr: sympy.Heaviside) -> str:
        return f"_heaviside({self._print(expr.args[0])})"  # type: ignore[attr-defined]


class _GuardedPrinter(_StepPrinter, MpmathPrinter):  # type: ignore[misc]
    """Powers go through :func:`_pow`, so ``b**e`` cannot build a number of a million digits."""

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        if expr.exp == sympy.S.Half:
            return f"{self._module_format('mpmath.sqrt')}({self._print(expr.base)})"
        return f"_pow({self._print(expr.base)}, {self._print(expr.exp)})"


class _FloatPrinter(_StepPrinter, PythonCodePrinter):  # type: ignore[misc]
    pass


_SETTINGS = {"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True,
             "user_functions": {}}


def evaluator(expr: sympy.Expr, symbols: Sequence[sympy.Symbol]) -> Callable[..., Any]:
    """``expr`` as a function of ``symbols`` on mpmath numbers (30 digits by :func:`evaluate`)."""
    return sympy.lambdify(  # type: ignore[no-any-return]
        list(symbols), expr,
        modules=[{"exp": _exp, "_pow": _pow, "_heaviside": _heaviside, **mpmath_functions()}, "mpmath"],
        printer=_GuardedPrinter(_SETTINGS),
    )


def float_evaluator(expr: sympy.Expr, symbols: Sequence[sympy.Symbol]) -> Callable[..., Any]:
    """``expr`` as a function of ``symbols`` on Python floats (fast, for sampling)."""
    return sympy.lambdify(  # type: ignore[no-any-return]
        list(symbols), expr, modules=[{"_heaviside": _heaviside, **mpmath_functions()}, "math"],
        printer=_FloatPrinter(_SETTINGS),
    )


def _mpf(x: Any) -> Any:
    """An exact rational or a decimal as written (``0.1`` is 1/10), at the working precision."""
    if isinstance(x, float):
        return mpmath.mpf(repr(x))
    q = sympy.Rational(x)
    return mpmath.mpf(int(q.p)) / int(q.q)


def evaluate(fn: Callable[..., Any], values: Sequence[Any], digits: int = 30) -> complex | None:
    """``fn(*values)`` to ``digits`` digits, or ``None`` where it is undefined or overflows."""
    try:
        with mpmath.workdps(digits):
            v = fn(*(_mpf(x) for x in values))
            out = complex(v)
    except (ZeroDivisionError, ValueError, OverflowError, TypeError, ArithmeticError):
        return None
    if not (math.isfinite(out.real) and math.isfinite(out.imag)):
        return None
    return out
