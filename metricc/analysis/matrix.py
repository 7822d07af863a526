"""Metrics over the whole K x K confusion matrix: symbols, derivatives and torch kernels.

A matrix formula (``docs/matrix.md``) is resolved into SymPy in *index form*:
``C[i, j]`` is an :class:`sympy.Indexed` entry of :data:`C`, ``sum(i, ...)`` a
:class:`sympy.Sum` over ``i = 0 .. K-1`` with :data:`K` a symbol, ``row(i)``
and ``col(j)`` sums of one row or column. Nothing is expanded for a concrete K:

* the gradient ``G[a, b] = d f / d C[a, b]`` is SymPy's derivative of the index
  form, with the Kronecker deltas it produces contracted (:func:`contract`), so
  it is symbolic in K and stays a handful of terms;
* the kernels print each index as its own broadcast axis and each sum as a
  tensor reduction over that axis (:func:`emit_matrix_kernels`), so one kernel
  serves every K and costs O(size of the formula) tensor operations.

Expanding the K^2 partials instead is what the issue first suggested; for
quadratic kappa at K = 10 SymPy needs 13 s to differentiate and 120 s to
``cse`` the 10^2 partials into 12,575 scalar operations (``docs/matrix.md``),
and every K would need its own code.
"""

from __future__ import annotations

from typing import Any

import sympy
from sympy import Indexed, KroneckerDelta, Sum

from ..language.symbols import EPS, A, B, C, K, Present
from .guard import guard_node

# --- guard and derivatives -------------------------------------------------------------------

def positive_fallback(e: sympy.Add) -> bool:
    """Sums that are >= 0 though not term by term: ``1 - delta(i, j)``, ``1 - present(x)``,
    and ``x + 1 - present(x)`` with ``x >= 0`` (``x`` where it is positive, else 1: the
    denominator that leaves absent classes out of a mean, as balanced accuracy does).
    """
    args = set(e.args)
    if len(args) == 2 and sympy.S.One in args:
        (other,) = args - {sympy.S.One}
        if isinstance(other, sympy.Mul) and other.args[0] == -1 and len(other.args) == 2 \
                and isinstance(other.args[1], (KroneckerDelta, Present)):
            return True  # 1 - delta(i, j) and 1 - present(x) are 0 or 1
    for a in args:
        if isinstance(a, sympy.Mul) and a.args == (-1, a.args[1]) and \
                isinstance(a.args[1], Present):
            x = a.args[1].args[0]
            if args == {sympy.S.One, a, x} and is_nonnegative(x):
                return True
    return False


def is_nonnegative(e: sympy.Expr) -> bool:
    """``e >= 0`` for every nonnegative matrix, by structure (``False``: not shown)."""
    if e.is_number:
        return bool(e.is_extended_real and e >= 0)
    if isinstance(e, Indexed):
        return e.base == C
    if isinstance(e, sympy.Symbol):
        return bool(e.is_nonnegative)
    if isinstance(e, sympy.Add) and positive_fallback(e):
        return True
    if isinstance(e, (sympy.Add, sympy.Mul)):
        return all(is_nonnegative(a) for a in e.args)
    if isinstance(e, sympy.Pow):
        return is_nonnegative(e.base) or bool(e.exp.is_even)
    if isinstance(e, Sum):
        return is_nonnegative(e.function)
    if isinstance(e, (sympy.Abs, Present, KroneckerDelta)):
        return True
    return bool(e.is_nonnegative)


def guard_matrix(expr: sympy.Expr, eps: sympy.Expr = EPS) -> sympy.Expr:
    """The eps policy of :mod:`metricc.analysis.guard`, for index form (nonnegative: for every
    nonnegative matrix, :func:`is_nonnegative`).

    >>> import metricc
    >>> from metricc.language.matrix import display
    >>> display(guard_matrix(metricc.compile("sum(i, C[i,i]) / n").expr))
    'sum(i, C[i, i])/(eps + n)'
    """

    def visit(e: sympy.Expr) -> sympy.Expr:
        if not e.has(C) or isinstance(e, Indexed):
            return e
        if isinstance(e, Sum):
            return Sum(visit(e.function), *e.limits)
        if isinstance(e, Present):
            return e  # flat: no guard needed inside
        return guard_node(e, [visit(a) for a in e.args], eps, is_nonnegative)

    return visit(expr)


def contract(expr: sympy.Expr) -> sympy.Expr:
    """Evaluate the sums a derivative leaves over Kronecker deltas.

    ``sum(i, delta(i, a) * x(i))`` is ``x(a)`` (every index lies in ``0..K-1``),
    and a sum whose body does not use its index is ``K`` times the body.

    >>> i = sympy.Dummy("i", integer=True)
    >>> contract(Sum(KroneckerDelta(i, A) * C[i, B], (i, 0, K - 1)))
    C[a, b]
    """
    if not expr.args or isinstance(expr, Indexed):
        return expr
    if not isinstance(expr, Sum):
        return expr.func(*(contract(a) for a in expr.args))
    body = contract(expr.function)
    limits = list(expr.limits)
    if isinstance(body, sympy.Add):
        return sympy.Add(*(contract(Sum(t, *limits)) for t in body.args))
    changed = True
    while changed:
        changed = False
        for lim in limits:
            v = lim[0]
            if v not in body.free_symbols:
                body = body * (lim[2] - lim[1] + 1)
                limits.remove(lim)
                changed = True
                break
            for f in sympy.Mul.make_args(body):
                if isinstance(f, KroneckerDelta) and v in f.args and f.args[0] != f.args[1]:
                    other = f.args[1] if f.args[0] == v else f.args[0]
                    rest = sympy.Mul(*(g for g in sympy.Mul.make_args(body) if g is not f))
                    body = rest.xreplace({v: other})
                    limits.remove(lim)
                    changed = True
                    break
            if changed:
                break
    if isinstance(body, sympy.Add) and limits:
        return sympy.Add(*(contract(Sum(t, *limits)) for t in body.args))
    return Sum(body, *limits) if limits else body


def gradient(expr: sympy.Expr) -> sympy.Expr:
    """``d expr / d C[a, b]`` in index form, free in :data:`A`, :data:`B` (and K).

    >>> import metricc
    >>> from metricc.language.matrix import display
    >>> display(gradient(metricc.compile("sum(i, C[i,i]) / n").expr))
    'delta(a, b)/n - sum(i, C[i, i])/n**2'
    """
    # Entries are real: |u|' = sign(u) u' (SymPy's Abs over an Indexed of unknown sign
    # differentiates into re()/im() terms that no kernel can run).
    real_abs = expr.replace(sympy.Abs, _RealAbs)
    return contract(sympy.diff(real_abs, C[A, B]).replace(_RealAbs, sympy.Abs))


class _RealAbs(sympy.Function):
    """``abs`` of a real argument, for differentiating: its derivative is ``sign``."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sympy.Expr:
        return sympy.sign(self.args[0])


# --- expansion for a concrete K (verification, check and references) ------------------------

def entry_symbols(k: int) -> list[list[sympy.Symbol]]:
    """``C_i_j`` symbols for a ``k x k`` matrix, nonnegative."""
    return [[sympy.Symbol(f"C_{i}_{j}", nonnegative=True) for j in range(k)] for i in range(k)]


#: Stand-ins for ``Min``/``Max`` while :func:`expand` writes sums out: SymPy would re-compare
#: a min()'s arguments pairwise at every rebuild (most of verifying a min() of three metrics).
_OPAQUE = {sympy.Min: sympy.Function("opaque_min"), sympy.Max: sympy.Function("opaque_max")}


def expand(expr: sympy.Expr, k: int, matrices: dict[str, Any] | None = None
           ) -> tuple[sympy.Expr, list[list[sympy.Symbol]]]:
    """``expr`` written out for ``K = k`` over the symbols of :func:`entry_symbols`.

    ``min``/``max`` come back unevaluated (same values; their arguments are not compared).
    """
    sym = entry_symbols(k)
    e = expr
    for kind, stand_in in _OPAQUE.items():
        e = e.replace(kind, stand_in)
    e = e.xreplace({K: sympy.Integer(k)}).doit()
    subs: dict[sympy.Expr, sympy.Expr] = {}
    for node in e.atoms(Indexed):
        i, j = (int(x) for x in node.indices)
        if node.base == C:
            subs[node] = sym[i][j]
        else:
            values = (matrices or {})[str(node.base)]
            subs[node] = sympy.nsimplify(values[i][j])
    e = e.xreplace(subs)
    for kind, stand_in in _OPAQUE.items():
        e = e.replace(stand_in, lambda *args, kind=kind: kind(*args, evaluate=False))
    return e, sym

