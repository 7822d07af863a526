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


# --- the K x K matrix --------------------------------------------------------------------

from sympy import IndexedBase  # noqa: E402

#: The confusion matrix: ``C[i, j]`` counts true class ``i`` predicted as ``j``.
C = IndexedBase("C")
#: The number of classes.
K = sympy.Symbol("K", integer=True, positive=True)
#: The free indices of the gradient ``d f / d C[a, b]``.
A, B = sympy.symbols("a b", integer=True, nonnegative=True)


class Present(sympy.Function):
    """``present(x)``: 1 where ``x > 0``, else 0.

    A step, flat wherever it is differentiable, so its derivative is taken as 0.
    Applied to a row total it is exact for the loss too: a row of the soft
    matrix sums ``w_n`` over the samples of that true class, whatever the
    predictions, so it does not move during training.
    """

    nargs = 1

    @classmethod
    def eval(cls, x: sympy.Expr) -> sympy.Expr | None:
        if x.is_number and x.is_extended_real:
            return sympy.S.One if x > 0 else sympy.S.Zero
        return None

    def fdiff(self, argindex: int = 1) -> sympy.Expr:
        return sympy.S.Zero

    def _eval_is_nonnegative(self) -> bool:
        return True


