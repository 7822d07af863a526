"""The count symbols of the confusion matrix and their positivity substitutions.

Analysis, emission and verification need these and nothing of the parser, so
they live here: importing this module loads SymPy only (no lark, no torch).
"""

from __future__ import annotations

import sympy

__all__ = [
    "COUNTS",
    "DERIVED",
    "EPS",
    "FROM_NONNEGATIVE",
    "FROM_POSITIVE",
    "TO_NONNEGATIVE",
    "TO_POSITIVE",
]

#: The four counts of the confusion matrix, as SymPy symbols (no assumptions,
#: so ``sympy.Symbol("TP")`` in user code is the same symbol).
COUNTS: dict[str, sympy.Symbol] = {k: sympy.Symbol(k) for k in ("TP", "FP", "FN", "TN")}
_TP, _FP, _FN, _TN = COUNTS.values()

#: Handy totals, each a plain sum of counts.
DERIVED: dict[str, sympy.Expr] = {
    "P": _TP + _FN,
    "N": _FP + _TN,
    "PP": _TP + _FP,
    "PN": _FN + _TN,
    "n": _TP + _FP + _FN + _TN,
}

#: The symbol standing for the zero-division guard in guarded expressions.
EPS = sympy.Symbol("eps", positive=True)

#: Counts as positive symbols: SymPy simplifies ``sqrt(TP**2)`` to ``TP`` and
#: decides signs only under such assumptions. Swap in, work, swap back.
TO_POSITIVE: dict[sympy.Symbol, sympy.Symbol] = {
    s: sympy.Symbol(k, positive=True) for k, s in COUNTS.items()}
FROM_POSITIVE: dict[sympy.Symbol, sympy.Symbol] = {v: k for k, v in TO_POSITIVE.items()}
#: Counts as nonnegative reals, for differentiating ``|x|`` and ``min``/``max`` correctly.
TO_NONNEGATIVE: dict[sympy.Symbol, sympy.Symbol] = {
    s: sympy.Symbol(k, nonnegative=True) for k, s in COUNTS.items()}
FROM_NONNEGATIVE: dict[sympy.Symbol, sympy.Symbol] = {v: k for k, v in TO_NONNEGATIVE.items()}
