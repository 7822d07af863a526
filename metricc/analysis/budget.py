"""Bounded analysis: time budgets for symbolic proofs and a safe high-precision evaluator.

SymPy has no time limit of its own, and some inputs that pass the size limits
of :mod:`metricc.language.parse` still make one ``factor`` or ``cancel`` run for
minutes and gigabytes (``(TP/(TP+FP))^0.343`` is a polynomial of degree 343).
Two mechanisms bound it:

* :func:`bounded` runs a computation in a worker process (:mod:`metricc.analysis.worker`)
  with a hard CPU-time and memory limit, and raises :class:`BudgetExceeded` past them;
  the caller then gives the verdict it can reach without the proof (a sampled
  monotonicity, the unsimplified expression), which says so;
* a deadline (:func:`limit`, :func:`spent`) checked between SymPy calls, so that a
  slow sequence of fast calls stops early with the proofs it has. CPU that a
  worker spends is charged to the enclosing :func:`limit`.

Evaluating at a point is done with mpmath floats rather than SymPy numbers:
``Rational(7, 10)**Rational(3, 5)`` makes SymPy factor integers, which hangs
on the rationals that a fractional power of a fractional power produces.
mpmath's working precision is one setting for the whole process, so every
evaluation at a precision runs under :func:`precision`, which holds a lock:
threads that verify or check at once each compute at the digits they asked for.

>>> import sympy
>>> TP = sympy.Symbol("TP")
>>> f = evaluator(sympy.sqrt(TP) - sympy.Rational(1, 3), [TP])
>>> round(float(f(4)), 6)
1.666667
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import mpmath
import sympy
from sympy.printing.lambdarepr import MpmathPrinter
from sympy.printing.pycode import PythonCodePrinter

from ..language.functions import mpmath_functions
from . import worker
from .worker import BudgetExceeded

__all__ = [
    "MEMORY_BYTES",
    "PROOF_SECONDS",
    "BudgetExceeded",
    "bounded",
    "evaluate",
    "evaluate_difference",
    "evaluator",
    "float_evaluator",
    "limit",
    "precision",
    "remaining",
    "spent",
    "without_proofs",
]

#: Seconds one metric's symbolic proofs may take in ``check()`` (and in
#: ``verify()``) before the analysis falls back to sampling. The sampled
#: verdicts are deterministic; only which of them got a proof depends on the
#: machine's speed, and each verdict says which it is.
PROOF_SECONDS = 2.0
#: Bytes by which one :func:`bounded` computation may grow the worker's address space.
MEMORY_BYTES = 2 << 30


# exp/power arguments beyond this many e-folds are overflow: float64 ends at
# 709, and mpmath would spend minutes on exp(exp(exp(exp(2)))).
_MAX_EFOLDS = 10_000


@dataclass(slots=True, eq=False)
class _Deadline:
    at: float
    exhausted: bool = False


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


def without_proofs(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` under a :func:`limit` of 0: every proof gives up at once (sampled verdicts,
    unsimplified forms), for the fallback once the proofs ran out of budget."""
    with limit(0.0):
        return fn(*args)


def remaining(default: float = PROOF_SECONDS) -> float:
    """CPU seconds the current :func:`limit` has left (``default`` outside any)."""
    deadline = _CURRENT.get()
    return default if deadline is None else deadline.at - time.thread_time()


def _limited(fn: Callable[..., Any], seconds: float, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[Any, bool]:
    # A fresh context: the worker was forked inside some caller's limit(), whose
    # deadline is on the parent's clock.
    def go() -> tuple[Any, bool]:
        with limit(seconds) as deadline:
            return fn(*args, **kwargs), deadline.exhausted

    return contextvars.Context().run(go)


def bounded(fn: Callable[..., Any], *args: Any, seconds: float | None = None,
            memory: int = MEMORY_BYTES, inline: bool = False, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with at most ``seconds`` of CPU and ``memory`` more bytes.

    ``seconds`` defaults to what the enclosing :func:`limit` has left (else
    :data:`PROOF_SECONDS`). ``fn`` sees a :func:`limit` of ``seconds`` (so its
    between-call checks stop it gracefully) and is interrupted half as long again
    later (at least 0.5 s); it
    runs in a worker process (:mod:`metricc.analysis.worker`), so ``fn``, the
    arguments and the result must pickle (SymPy expressions do). Raises
    :class:`BudgetExceeded` (a :class:`metricc.MetricError`) when a limit is hit
    or the worker dies, and re-raises what ``fn`` raised. The CPU it used is
    charged to the enclosing :func:`limit`. Without ``fork``, or with ``inline``
    (for work that cannot run away, :func:`metricc.analysis.size.tame`: no round
    trip), it runs in-process under :func:`limit` only.

    >>> bounded(sum, [1, 2, 3])
    6
    >>> import sympy
    >>> bounded(sympy.factor, sympy.sympify("x**2 - 1"), seconds=1.0)
    (x - 1)*(x + 1)
    """
    outer = _CURRENT.get()
    seconds = remaining() if seconds is None else seconds
    if seconds <= 0:
        if outer is not None:
            outer.exhausted = True
        raise BudgetExceeded("time", 0.0, seconds)
    if inline or not worker.AVAILABLE or worker.in_worker():  # the enclosing limit (or worker) bounds it
        with limit(seconds):
            return fn(*args, **kwargs)
    hard = seconds + max(0.5, seconds / 2)
    try:
        (value, exhausted), cpu = worker.run(_limited, (fn, seconds, args, kwargs), {}, hard, memory)
    except BudgetExceeded as e:
        _charge(outer, e.cpu, exhausted=True)
        raise
    _charge(outer, cpu, exhausted)
    return value


def _charge(deadline: _Deadline | None, cpu: float, exhausted: bool) -> None:
    # The worker's CPU is not this thread's: move the deadline instead.
    if deadline is not None:
        deadline.at -= cpu
        deadline.exhausted = deadline.exhausted or exhausted


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
        # Terms in the tree's order, not sorted for display: sorting was most of the
        # printing time of a 200-term sum; at 30 digits the order of a sum changes nothing.
        printer=_GuardedPrinter({**_SETTINGS, "order": "none"}),
        # no docstring: lambdify writes one with str(expr), sorted, for anything under
        # 1000 nodes (2.5 s of verifying min(multiclass_mcc, quadratic_kappa))
        docstring_limit=0,
    )


def float_evaluator(expr: sympy.Expr, symbols: Sequence[sympy.Symbol]) -> Callable[..., Any]:
    """``expr`` as a function of ``symbols`` on Python floats (fast, for sampling)."""
    return sympy.lambdify(  # type: ignore[no-any-return]
        list(symbols), expr, modules=[{"_heaviside": _heaviside, **mpmath_functions()}, "math"],
        printer=_FloatPrinter({**_SETTINGS, "order": "none"}), docstring_limit=0,  # as evaluator()
    )


def _mpf(x: Any) -> Any:
    """An exact rational or a decimal as written (``0.1`` is 1/10), at the working precision."""
    if isinstance(x, float):
        return mpmath.mpf(repr(x))
    q = sympy.Rational(x)
    return mpmath.mpf(int(q.p)) / int(q.q)


_PRECISION_LOCK = threading.RLock()


@contextmanager
def precision(digits: int) -> Iterator[None]:
    """mpmath's working precision set to ``digits`` decimal digits inside, for this thread alone.

    mpmath keeps its precision in one process-global context (``mpmath.mp``): two threads
    inside ``mpmath.workdps`` interleave their settings and restores, so one computes at
    the other's digits (four threads running ``verify()`` at once failed three of them).
    The lock (reentrant: nested uses keep working) makes the setting and the computation
    one step; every precision-dependent evaluation in metricc goes through here.

    >>> with precision(50):
    ...     mpmath.mp.dps
    50
    """
    with _PRECISION_LOCK, mpmath.workdps(digits):
        yield


def evaluate(fn: Callable[..., Any], values: Sequence[Any], digits: int = 30) -> complex | None:
    """``fn(*values)`` to ``digits`` digits, or ``None`` where it is undefined or overflows."""
    with precision(digits):
        v = _value(fn, values)
        return None if v is None else complex(v)


def evaluate_difference(f: Callable[..., Any], g: Callable[..., Any], values: Sequence[Any],
                        digits: int = 30) -> tuple[complex | None, complex | None, complex | None]:
    """``(f, g, f - g)`` at ``values``, each to ``digits`` digits (the difference taken before
    rounding to float64), ``None`` where undefined.

    >>> import sympy
    >>> x = sympy.Symbol("x")
    >>> d = evaluate_difference(evaluator(x + sympy.Rational(1, 10**25), [x]), evaluator(x, [x]), [1])[2]
    >>> abs(d - 1e-25) < 1e-29  # float64 values would differ by 0
    True
    """
    with precision(digits):
        a, b = _value(f, values), _value(g, values)
        diff = None if a is None or b is None else _finite(a - b)
        return (None if a is None else complex(a), None if b is None else complex(b),
                None if diff is None else complex(diff))


def _value(fn: Callable[..., Any], values: Sequence[Any]) -> Any:
    """``fn(*values)`` as an mpmath number at the current precision, ``None`` where undefined."""
    try:
        return _finite(fn(*(_mpf(x) for x in values)))
    except (ZeroDivisionError, ValueError, OverflowError, TypeError, ArithmeticError):
        return None


def _finite(v: Any) -> Any:
    out = complex(v)  # raises TypeError for a value that is not a number
    return v if math.isfinite(out.real) and math.isfinite(out.imag) else None
