"""The eps policy at one node of a formula, written once for every statistic.

Each statistic walks its own tree (the 2 x 2 counts, the K x K matrix's sums) and says which
bases are nonnegative; what a singular node becomes is decided here
(``docs/numerics.md``):

* a denominator ``d`` that is ``>= 0`` becomes ``d + eps``; one that can take either sign
  (``TPR - FPR``) becomes ``d / (d**2 + eps**2)`` in place of ``1/d``: odd in ``d``, smooth,
  within ``(eps/d)**2`` of ``1/d`` and bounded by ``1/(2 eps)`` (``d + eps`` would vanish at
  ``-eps``);
* a root or log argument ``r`` becomes ``r + eps`` (a finite derivative at 0), and so does a
  nonnegative, non-constant base of a power with a variable exponent.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from ..language.functions import ARGUMENT_GUARDED

__all__ = ["guard_node"]


def guard_node(e: sympy.Expr, args: list[sympy.Expr], eps: sympy.Expr,
               nonnegative: Callable[[sympy.Expr], bool]) -> sympy.Expr:
    """``e`` rebuilt on its already guarded ``args``, with the guard its own kind needs.

    ``nonnegative`` answers for the *unguarded* base (``e.args[0]``).

    >>> TP, FP, eps = sympy.symbols("TP FP eps", nonnegative=True)
    >>> guard_node(1/(TP + FP), [TP + FP, sympy.Integer(-1)], eps, lambda b: True)
    1/(FP + TP + eps)
    """
    if isinstance(e, sympy.Pow):
        base, exp = args
        if not exp.is_number:
            # b**e = exp(e log b): log b needs the guard where b can be 0.
            if base.free_symbols and nonnegative(e.base):
                return sympy.Pow(base + eps, exp)
            return sympy.Pow(base, exp)
        if exp.is_negative and exp.is_integer and not nonnegative(e.base):
            return sympy.Pow(base / (base**2 + eps**2), -exp)
        if exp.is_negative or not exp.is_integer:
            return sympy.Pow(base + eps, exp)
        return sympy.Pow(base, exp)
    if any(isinstance(e, g) for g in ARGUMENT_GUARDED):  # log(x) -> log(x + eps)
        return e.func(args[0] + eps)
    return e.func(*args)
