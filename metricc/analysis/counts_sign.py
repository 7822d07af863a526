"""Proofs of the sign of an expression over positive counts, for ``check()`` and constraints.

SymPy's assumptions first, then the signs of numerator and denominator, of factors and
terms, and of the factored or expanded polynomial; each step within the time budget of
:mod:`metricc.analysis.budget` and a size limit, so reports are the same on every machine.
"""

from __future__ import annotations

import sympy

from ..language.symbols import TO_POSITIVE
from .budget import spent
from .size import MAX_EXPANSION, expansion_size, rename

__all__ = ["SIGN_SIZE_LIMIT", "positive_form", "proven_sign"]

#: Size (``sympy.count_ops``) past which :func:`proven_sign` tries no rewrite and no SymPy
#: sign query, only the signs of terms and factors: together/factor/expand grow fast on
#: nested fractions, and the query of a long sum looks for its polynomial's real roots. A
#: size limit, not a time limit, so that reports are the same on every machine.
SIGN_SIZE_LIMIT = 60


def positive_form(e: sympy.Expr) -> sympy.Expr:
    """``e`` over positive count symbols, the form :func:`proven_sign` takes."""
    return rename(e, TO_POSITIVE)


def proven_sign(e: sympy.Expr, depth: int = 0) -> int | None:
    """``1`` if ``e >= 0`` for all positive counts, ``-1`` if ``<= 0``, ``0`` if ``e == 0``.

    ``None`` where SymPy cannot tell. ``e`` must be over positive count symbols.
    Tries SymPy's assumptions, then the signs of numerator and denominator, of
    each factor, and of the factored or expanded polynomial.
    """
    if e == 0:
        return 0
    if spent():  # past the budget even SymPy's own sign query is a proof (of an Add: real roots)
        return None
    if sympy.count_ops(e) > SIGN_SIZE_LIMIT:
        return _structural_sign(e, depth)
    if e.is_nonnegative:
        return 1
    if e.is_nonpositive:
        return -1
    if depth > 4 or spent():  # (the queries above may have spent the budget)
        return None
    if isinstance(e, sympy.Mul):
        result = 1
        for a in e.args:
            s = proven_sign(a, depth + 1)
            if s is None or s == 0:
                return s
            result *= s
        return result
    if isinstance(e, sympy.Pow) and e.exp.is_number:
        s = proven_sign(e.base, depth + 1)
        if s == 1:
            return 1
        if s == -1 and e.exp.is_integer:
            return -1 if e.exp % 2 else 1
        return None
    num, den = sympy.fraction(sympy.together(e))
    if den != 1:
        sn = proven_sign(num, depth + 1)
        if sn == 0:
            return 0
        sd = proven_sign(den, depth + 1)
        return None if sn is None or sd is None else sn * sd
    if isinstance(e, sympy.Add) and expansion_size(e) <= MAX_EXPANSION:
        for rewrite in (sympy.factor, sympy.expand):
            try:
                g = rewrite(e)
            except (sympy.PolynomialError, TypeError, ValueError):  # pragma: no cover
                continue
            if g == e:
                continue
            if g.is_nonnegative:
                return 1
            if g.is_nonpositive:
                return -1
            if isinstance(g, sympy.Mul):
                return proven_sign(g, depth + 1)
    return None


def _structural_sign(e: sympy.Expr, depth: int) -> int | None:
    """The sign of a large ``e`` from the signs of its terms or factors.

    SymPy's own sign query of a long sum looks for the real roots of its polynomial (it ran
    for minutes on a 120-term sum, where no budget can stop it); this test is weaker and cheap.
    """
    if depth > 4 or not isinstance(e, (sympy.Add, sympy.Mul)):
        return None
    signs = []
    for a in e.args:  # stops at the first unknown sign
        s = proven_sign(a, depth + 1)
        if s is None:
            return None
        signs.append(s)
    if isinstance(e, sympy.Mul):
        return 0 if 0 in signs else (-1) ** signs.count(-1)
    kinds = set(signs) - {0}
    return 0 if not kinds else (kinds.pop() if len(kinds) == 1 else None)
