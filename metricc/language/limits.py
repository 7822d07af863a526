"""Size limits of the language: every formula is refused or answered in bounded time and memory.

The parser refuses formulas past these limits before SymPy sees them (``docs/numerics.md``).
"""

from __future__ import annotations

import math

import sympy

from ..errors import MetricError

MAX_LENGTH = 100_000
#: Names, numbers and operators; counted before anything is parsed, so a huge
#: formula is refused in milliseconds (one token builds about one node, see MAX_NODES).
MAX_TOKENS = 10_000
MAX_NESTING = 500
#: Function calls inside function calls (``log(log(...))``): each level makes
#: SymPy's recursive steps (printing, derivatives, assumptions) one level deeper.
MAX_CALL_NESTING = 30
#: Depth of the expression tree once bindings are substituted (the deepest named
#: metric has 8), so no later recursive step meets Python's recursion limit.
MAX_DEPTH = 60
# Constants stay within 10**±MAX_EXPONENT (metricc.budget; floats reach 1e308), so neither
# `9^9^9` nor a chain of bindings squaring 1e300 makes SymPy build huge integers.
#: Largest |exponent| on a non-constant base: `(TP+1)^(10^6)` is no metric.
MAX_POWER = 100
#: Largest expression tree once bindings are substituted; the derivative of a
#: chain `b = a*(a+1); c = b*(b+1); ...` doubles with each line.
MAX_NODES = 2000
#: Most arguments of one min()/max(): its derivative grows with the square of the
#: count (each argument is compared with the min of the others): 8 took 11 s.
MAX_ARGS = 6
#: Largest (arguments - 1) * operations of one min()/max() once bindings are
#: substituted: min(mcc, f1, g_mean, cohen_kappa) is about 300 and takes 6 s
#: through compile, check, loss and verify; six named metrics took 12 s.
MAX_MINMAX_WORK = 400
#: Largest factors * operations of one product once bindings are substituted: its
#: derivative has one copy of the product per factor (a 20-line chain `a_i = a_(i-1) * (TP+i)/(n+i)`,
#: 12,500, took 10 s in compile + check + loss + verify; 100 lines did not finish).
MAX_PRODUCT_WORK = 6_000


#: Constants stay within 10**±MAX_EXPONENT (floats reach 1e308).
MAX_EXPONENT = 300


def log10_abs(n: sympy.Number) -> float:
    """``log10 |n|`` of a nonzero SymPy number, to within 1 (cheap for huge ints)."""
    if n.is_Rational:
        return (abs(int(n.p)).bit_length() - int(n.q).bit_length()) * math.log10(2)
    return math.log10(abs(float(n))) if float(n) != 0 else -math.inf


def check_constants(expr: sympy.Expr, what: str) -> None:
    """Raise MetricError if a constant of ``expr`` is beyond 10^±MAX_EXPONENT.

    For what SymPy derives from a formula: the derivative of
    ``1e299*TP/(1e-299*FP + TP)`` holds 10^598, which no float can hold.
    """
    for n in expr.atoms(sympy.Number):
        if n.is_finite and n != 0 and abs(log10_abs(n)) > MAX_EXPONENT:
            raise MetricError(
                f"{what} needs a constant near 10^{round(log10_abs(n))}, beyond "
                f"10^±{MAX_EXPONENT}; write the formula with smaller constants")

