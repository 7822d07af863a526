"""How large an expression gets multiplied out: the size guard in front of ``cancel`` and ``factor``.

Their cost grows with the expanded polynomial, which the tree does not show:
``(n + 1)^16`` is 5 nodes and 10^9 terms, ``x^(343/1000) - 1`` a polynomial of degree 1000.
"""

from __future__ import annotations

import functools

import sympy

__all__ = ["MAX_EXPANSION", "MAX_ROOT_DEGREE", "TAME_DEGREE", "TAME_OPS", "TAME_TERMS", "derivative",
           "expansion_size", "rename", "small_enough", "tame"]

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


def common_denominator_size(expr: sympy.Expr) -> int:
    """The terms, multiplied out, of the common denominator ``together`` gives a sum.

    That is the least common multiple of its terms' denominators (each factor at its
    highest power); past :data:`MAX_EXPANSION` the result of ``together`` cannot be
    shorter than the sum (60 fractions ``TP/(FP+i)``: ``2**60`` terms).

    >>> common_denominator_size(sympy.sympify("TP/(TP+FP) + TN/(TN+FN) + FP/(TP+FP)**2"))
    8
    """
    if not isinstance(expr, sympy.Add):
        return 1
    powers: dict[sympy.Expr, int] = {}
    for term in expr.args:
        for factor in sympy.Mul.make_args(sympy.fraction(term)[1]):
            base, exp = factor.as_base_exp()
            if not exp.is_Integer:
                base, exp = factor, sympy.Integer(1)
            powers[base] = max(powers.get(base, 0), int(exp))
    out = 1
    for base, exp in powers.items():
        out = min(out * min(expansion_size(base) ** min(exp, 64), _SIZE_CAP), _SIZE_CAP)
    return out


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


def rename(expr: sympy.Expr, symbols: dict[sympy.Symbol, sympy.Symbol],
           also: tuple[type[sympy.Basic], ...] = ()) -> sympy.Expr:
    """``expr.xreplace(symbols)`` for a symbol-for-symbol map, without re-deciding ``min``/``max``.

    ``xreplace`` rebuilds every ``Min``/``Max`` node, and SymPy then compares its arguments
    pairwise again (``factor_terms`` of each difference): 0.5 s for one partial of
    ``min(mcc, f1, g_mean, cohen_kappa)``, paid at every swap between plain and positive
    counts. Their arguments are only renamed, so the node is rebuilt unevaluated (still
    ordered and deduplicated); every other node is rebuilt as ``xreplace`` does, so
    ``Abs``, ``sign`` and ``Heaviside`` still use the new symbols' assumptions. A comparison
    the new assumptions alone decide (``Min(TP, 0)`` over positive ``TP``) stays unresolved,
    which changes no value. ``also``: more node types rebuilt so (``Heaviside``, whose
    re-evaluation over plain symbols works out imaginary parts), for maps onto plain symbols.

    >>> x, p = sympy.Symbol("x"), sympy.Symbol("p", positive=True)
    >>> rename(sympy.Min(x, 1 / x) + abs(x), {x: p})
    p + Min(1/p, p)
    """
    # Symbols without assumptions decide nothing the old ones did not: no node around a
    # min() can simplify further (its sign() or Heaviside() queries are the slow part).
    plain = all(s == sympy.Symbol(s.name) for s in symbols.values())
    if also and not plain:
        raise ValueError("rename(also=...) needs a map onto symbols without assumptions")
    kinds = (sympy.Min, sympy.Max, *also)
    if not expr.has(*kinds):
        return expr.xreplace(symbols)
    done: dict[sympy.Basic, sympy.Basic] = {}

    def go(e: sympy.Basic) -> sympy.Basic:
        if e in done:
            return done[e]
        if not isinstance(e, kinds) and not e.has(*kinds):
            out = e.xreplace(symbols)
        else:
            args = []
            for a in e.args:  # a loop, not a comprehension: one frame per level of nesting
                args.append(go(a))
            if all(a is b for a, b in zip(args, e.args, strict=True)):
                out = e
            elif isinstance(e, kinds) or plain:
                out = _unevaluated(e, args)
            else:
                out = e.func(*args)
        done[e] = out
        return out

    return go(expr)  # type: ignore[return-value]


@functools.lru_cache(maxsize=64)
def derivative(expr: sympy.Expr, symbol: sympy.Symbol) -> sympy.Expr:
    """``sympy.diff(expr, symbol)``, remembered: the emitter's backward coefficients and
    ``verify()``'s expected partials differentiate the same guarded formula, and SymPy's
    ``diff`` of a 200-term sum over nonnegative symbols takes 1-2 s. (SymPy expressions
    are immutable, so the answer is the one a second ``diff`` would give.)

    >>> derivative(sympy.sympify("x**3"), sympy.Symbol("x"))
    3*x**2
    """
    return sympy.diff(expr, symbol)


def _unevaluated(e: sympy.Basic, args: list[sympy.Basic]) -> sympy.Basic:
    try:
        return e.func(*args, evaluate=False)
    except TypeError:  # a node without the keyword (Piecewise's pairs, Tuple)
        return e.func(*args)
