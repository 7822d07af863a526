"""How large an expression gets multiplied out: the size guard in front of ``cancel`` and ``factor``.

Their cost grows with the expanded polynomial, which the tree does not show:
``(n + 1)^16`` is 5 nodes and 10^9 terms, ``x^(343/1000) - 1`` a polynomial of degree 1000.
"""

from __future__ import annotations

import sympy

__all__ = ["MAX_EXPANSION", "MAX_ROOT_DEGREE", "TAME_DEGREE", "TAME_OPS", "TAME_TERMS", "expansion_size",
           "small_enough",
           "tame"]

#: Above this many terms (see :func:`expansion_size`) ``cancel`` and ``factor``
#: are skipped: their cost grows with the expanded polynomial, and an average
#: of six named metrics, or ``(n + 1)^16``, would take minutes.
MAX_EXPANSION = 400
#: Largest numerator or denominator of an exponent ``p/q`` that ``cancel`` may see: it writes
#: ``x^(p/q)`` as ``(x^(1/q))^p`` beside ``x = (x^(1/q))^q``, degree ``max(p, q)`` (``x^0.343``: 1000).
MAX_ROOT_DEGREE = 12
_SIZE_CAP = 10**9


def expansion_size(expr: sympy.Expr) -> int:
    """An upper bound on the number of terms of ``expr`` multiplied out.

    Roots, logs and other functions count as single atoms (``cancel`` treats them so),
    except powers ``p/q`` past :data:`MAX_ROOT_DEGREE`, too large. Capped at 10**9.

    >>> expansion_size(sympy.sympify("(TP + FP)**3 * (FN + 1)"))
    16
    >>> expansion_size(sympy.sympify("TP**(343/1000) - 1")) > MAX_EXPANSION
    True
    """

    def size(e: sympy.Expr) -> int:
        if isinstance(e, sympy.Add):
            return min(sum(size(a) for a in e.args), _SIZE_CAP)
        if isinstance(e, sympy.Mul):
            out = 1
            for a in e.args:
                out = min(out * size(a), _SIZE_CAP)
            return out
        if isinstance(e, sympy.Pow) and e.exp.is_Rational:
            if e.exp.q > 1 and e.base.free_symbols and max(abs(e.exp.p), e.exp.q) > MAX_ROOT_DEGREE:
                return _SIZE_CAP
            # n**(9/2) is n**4 * n**(1/2) to cancel()
            base = size(e.base)
            n = min(abs(int(e.exp)), 64)
            return _SIZE_CAP if base > 1 and n * base.bit_length() > 30 else base**n
        return 1

    return size(expr)


def small_enough(expr: sympy.Expr) -> bool:
    """Whether numerator and denominator of ``expr`` multiplied out have at most :data:`MAX_EXPANSION` terms."""
    num, den = sympy.fraction(expr)
    return expansion_size(num) + expansion_size(den) <= MAX_EXPANSION


#: Most terms, operations and exponent numerator/denominator of a :func:`tame` expression.
TAME_TERMS, TAME_OPS, TAME_DEGREE = 64, 80, 4


def tame(expr: sympy.Expr) -> bool:
    """Whether ``expr`` is small enough that SymPy's rewrites of it finish in milliseconds.

    At most :data:`TAME_TERMS` terms multiplied out (denominators counted as numerators),
    :data:`TAME_OPS` operations, only exponents ``p/q`` with ``|p|, q <=`` :data:`TAME_DEGREE`
    and no functions (``exp``, ``min``, ...): a rational function of low degree in the counts
    and their square roots, as the named metrics are. Such steps run in-process, with no
    worker round trip (:func:`metricc.analysis.budget.bounded`).

    >>> tame(sympy.sympify("(TP*TN - FP*FN)/sqrt((TP+FP)*(TP+FN)*(TN+FP)*(TN+FN))"))
    True
    >>> tame(sympy.sympify("(TP/(TP+FP))**(343/1000)"))
    False
    """
    if sympy.count_ops(expr) > TAME_OPS or expr.atoms(sympy.Function):  # exp, log, min, abs, ...
        return False
    for p in expr.atoms(sympy.Pow):
        if not (p.exp.is_Rational and max(abs(p.exp.p), p.exp.q) <= TAME_DEGREE):
            return False
    return expansion_size(expr) <= TAME_TERMS
