"""Symbolic execution of generated code, and equality of SymPy expressions.

``verify`` runs our own generated kernels (and the runtime's relaxation sources) on SymPy
symbols, through the stand-ins of the function table
(:mod:`metricc.language.functions`), and compares what they compute with SymPy's own
metric and derivatives: exactly, at random rational points to 30 digits, then by proof.
"""

from __future__ import annotations

import ast
import random
from types import SimpleNamespace
from typing import Any

import sympy

from ..analysis.budget import BudgetExceeded, bounded, evaluate_difference, evaluator, precision, spent
from ..analysis.size import MAX_EXPANSION, common_denominator_size, rename, small_enough, tame
from ..language.functions import TORCH_CALLS, sympy_torch
from ..language.symbols import TO_POSITIVE

__all__ = ["ExactNumbers", "as_printed", "equal_as_printed", "equal_at_points", "first_difference",
           "run_symbolically", "symbolic_equal", "undecided_torch", "vectorized_torch", "working_digits"]

#: Above this size (sympy.count_ops) of a difference no symbolic proof is tried.
MAX_PROOF_OPS = 600
#: Two sides differ where they disagree past this share of their size (30-digit evaluation).
RELATIVE = 1e-20
#: The same where a side's constants were rounded to float64 literals as the kernel prints them
#: (a 40-digit exponent): ``x**e / x`` and ``x**(e - 1)`` then agree to float64's precision only.
ROUNDED_RELATIVE = 1e-12


class ExactNumbers(ast.NodeTransformer):
    """Make number literals SymPy numbers, so ``1/2`` in generated code is exactly 1/2 and
    a float literal is the decimal it reads as (``1e+150`` is 10**150)."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            return node
        if isinstance(node.value, int):
            call = ast.Call(ast.Name("_sympy_Integer", ast.Load()), [node], [])
        else:
            call = ast.Call(ast.Name("_sympy_Rational", ast.Load()),
                            [ast.Constant(repr(node.value))], [])
        return ast.copy_location(call, node)


def as_printed(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each constant the printer writes as a float64 literal rounded as it is
    (integers and fractions past 2**53, floats): what the kernel text says, exactly.

    >>> as_printed(sympy.Integer(2**60) * sympy.Symbol("x"))
    1152921504606847000*x
    """
    big = 2**53

    def rounded(n: sympy.Number) -> sympy.Expr:
        try:
            return sympy.Rational(repr(float(n)))
        except (OverflowError, ValueError):
            return n

    subs: dict[sympy.Expr, sympy.Expr] = {}
    for n in expr.atoms(sympy.Number):
        if isinstance(n, sympy.Float) or (n.is_Rational and (abs(n.p) > big or n.q > big)):
            subs[n] = rounded(n)
    return expr.xreplace(subs) if subs else expr


def run_symbolically(source: str, fn: str, *args: Any, namespace: dict[str, Any] | None = None
                     ) -> Any:
    """Execute our own generated (or runtime) source on SymPy objects, numbers kept exact.

    ``namespace`` replaces the default globals (``torch`` as :func:`sympy_torch`).

    >>> run_symbolically("def f(x):\\n    return torch.sqrt(x) / 2", "f", sympy.Integer(4))
    1
    """
    tree = ast.fix_missing_locations(ExactNumbers().visit(ast.parse(source)))
    scope: dict[str, Any] = {"torch": sympy_torch(), "Tensor": object, "Any": object,
                             "staticmethod": lambda f: f}
    scope.update(namespace or {})
    scope.update(_sympy_Integer=sympy.Integer, _sympy_Rational=sympy.Rational)
    # Only text metricc generated from validated SymPy trees, or the runtime's own source.
    exec(compile(tree, f"<metricc verify {fn}>", "exec"), scope)
    return scope[fn](*args)


def _undecided(cls: type[sympy.Expr]) -> Any:
    """``cls(*args)`` flattened and deduplicated but not compared pairwise (numbers still are)."""

    def build(*args: Any) -> sympy.Expr:
        flat: list[sympy.Expr] = []
        for a in map(sympy.sympify, args):
            flat.extend(a.args if isinstance(a, cls) else (a,))
        if all(a.is_number for a in flat):
            return cls(*flat)
        return cls(*flat, evaluate=False)

    return build


def undecided_torch() -> Any:
    """:func:`sympy_torch` whose ``minimum``/``maximum``/``clamp`` build ``Min``/``Max`` without
    deciding which argument is smaller.

    SymPy compares the arguments of every new ``Min`` pairwise (``factor_terms`` of each
    difference): 7 s to run the kernels of ``min(mcc, f1, g_mean, cohen_kappa)``. The kernels
    come from evaluated expressions, so no pair is decidable there anyway, and an undecided
    ``Min`` has the same value at every point.

    >>> x = sympy.Symbol("x")
    >>> undecided_torch().clamp(undecided_torch().minimum(x, x + 1), min=0)
    Max(0, Min(x, x + 1))
    """
    lo, hi = _undecided(sympy.Min), _undecided(sympy.Max)

    def clamp(x: Any, min: Any = None, max: Any = None) -> Any:
        x = x if min is None else hi(x, sympy.nsimplify(min))
        return x if max is None else lo(x, sympy.nsimplify(max))

    return SimpleNamespace(**{**vars(sympy_torch()), "minimum": lo, "maximum": hi, "clamp": clamp})


def vectorized_torch(undecided: bool = False) -> Any:
    """The SymPy stand-ins of :data:`TORCH_CALLS`, elementwise on numpy object arrays
    (``undecided``: those of :func:`undecided_torch`)."""
    import numpy as np

    def vec(fn: Any) -> Any:
        def call(*a: Any, **kw: Any) -> Any:
            if not any(isinstance(x, np.ndarray) for x in a):
                return fn(*a, **kw)
            return np.vectorize(lambda *x: fn(*x, **kw), otypes=[object])(*a)
        return call

    calls = vars(undecided_torch()) if undecided else {n: c.sympy for n, c in TORCH_CALLS.items()}
    return SimpleNamespace(**{n: vec(c) for n, c in calls.items()})


def working_digits(*exprs: sympy.Expr) -> int:
    """30 digits, plus the decades the constants span: ``1e150*TP + FP`` keeps ``FP``
    only at 150+ digits, and ``1 - 1e150*TP/(1e150*TP + FP)`` cancels to it.

    >>> working_digits(sympy.Integer(10)**150 * sympy.Symbol("x"))
    181
    """
    span = 0
    for e in exprs:
        for n in e.atoms(sympy.Number):
            if n != 0 and n.is_finite:
                span = max(span, _decades(n))
    return 30 + min(span, 1000)


def _decades(n: sympy.Number) -> int:
    """``|floor(log10|n|)|``, or one more (never less): in mpmath, as SymPy's ``log(n, 10)``
    took 0.5 s for the 200 constants of a binding chain."""
    import mpmath

    with precision(15):  # the process-wide precision, under its lock
        e = int(mpmath.floor(mpmath.log10(abs(mpmath.mpmathify(n.evalf(20))))))
    return max(abs(e - 1), abs(e), abs(e + 1))


def _differs(a: complex | None, b: complex | None, diff: complex | None,
             relative: float = RELATIVE) -> bool:
    """``a - b`` is past ``relative`` of the larger side (both evaluated to 30 digits)."""
    if diff is None:
        return False  # undefined or overflowing there
    scale = max(abs(a) if a is not None else 0.0, abs(b) if b is not None else 0.0)
    return abs(diff) > relative * scale if scale > 0 else abs(diff) > 1e-280


def symbolic_equal(a: sympy.Expr, b: sympy.Expr, seed: int = 0, points: int = 12,
                   relative: float = RELATIVE) -> tuple[bool, str, dict[str, float] | None]:
    """Whether ``a == b`` for all positive counts: ``(equal, how, counterexample)``.

    Evaluation to 30 digits at random rational points first (a cheap disproof
    with a counterexample; the tolerance is relative to the two sides, so values near
    1e-20 are compared as any other), then a symbolic proof that ``a - b`` simplifies
    to 0, skipped for large differences and once the time budget
    (:func:`metricc.analysis.budget.limit`) is spent: ``cancel`` on the partials of
    ``min(mcc, f1, g_mean, cohen_kappa)`` alone took a minute.

    >>> tp = sympy.Symbol("TP")
    >>> symbolic_equal(1e-25 * tp, 2e-25 * tp)[:2]
    (False, 'differs')
    """
    base, other = rename(a, TO_POSITIVE), rename(b, TO_POSITIVE)
    diff = base - other
    if (witness := _witness(base, other, seed, points, relative)) is not None:
        return False, "differs", witness
    sampled = f"equal at {points} random points to 30 digits"
    ops = sympy.count_ops(diff)
    if ops > MAX_PROOF_OPS:
        return True, f"{sampled} (no proof attempted: {ops} operations)", None
    if diff.has(sympy.Min, sympy.Max, sympy.Heaviside, sympy.sign, sympy.Piecewise):
        # cancel/simplify rebuild min()/max() on every rewrite, comparing their arguments
        # pairwise: 77 s for min() of six fractions (simplify: 250 s for -(max(mcc, 6))).
        return True, f"{sampled} (no proof attempted: min/max)", None
    # together() of a sum over many distinct denominators is itself the slow step
    together = None if common_denominator_size(diff) > MAX_EXPANSION else sympy.together(diff)
    if together is None or not small_enough(together):  # cancel would expand a huge polynomial first
        return True, f"{sampled} (no proof attempted: too large to expand)", None
    proofs = [sympy.cancel] + ([sympy.simplify] if ops <= 300 else [])
    for proof in proofs:
        if spent():
            return True, f"{sampled} (proof stopped at the time budget)", None
        try:
            # In the analysis worker: one cancel() can run for minutes and is not interruptible.
            if bounded(proves_zero, proof, together, inline=tame(together)):
                return True, f"proved equal ({proof.__name__})", None
        except BudgetExceeded:
            return True, f"{sampled} (proof stopped at the time budget)", None
    return True, f"{sampled} (no closed-form proof found)", None


def equal_as_printed(got: sympy.Expr, want: sympy.Expr, seed: int = 0
                     ) -> tuple[bool, str, dict[str, float] | None]:
    """:func:`symbolic_equal` of a kernel's output ``got`` and SymPy's ``want`` as the kernel
    prints it: constants past 2**53 are float64 literals there, so such a ``want`` is compared
    as printed, at the tolerance those roundings need (``ROUNDED_RELATIVE``).

    >>> equal_as_printed(sympy.Symbol("TP") / 2, sympy.Symbol("TP") * sympy.Rational(1, 2))[:2]
    (True, 'proved equal (cancel)')
    """
    printed = as_printed(want)
    return symbolic_equal(got, printed, seed, relative=RELATIVE if printed == want else ROUNDED_RELATIVE)


def first_difference(pairs: list[tuple[str, sympy.Expr, sympy.Expr]], seed: int = 0
                     ) -> tuple[str | None, set[str]]:
    """Each ``(what, kernel's, SymPy's)`` by :func:`equal_as_printed`: ``"<what> differs from
    SymPy's at <counterexample>"`` for the first pair that differs (``None`` when none does), and
    how the equal ones were shown."""
    hows: set[str] = set()
    for what, got, want in pairs:
        ok, how, cex = equal_as_printed(got, want, seed)
        if not ok:
            at = ", ".join(f"{k}={v:g}" for k, v in (cex or {}).items())
            return f"{what} differs from SymPy's at {at}", hows
        hows.add(how)
    return None, hows


def proves_zero(proof: Any, expr: sympy.Expr) -> bool:
    """Whether ``proof(expr)`` (``cancel``, ``simplify``) gives 0; False where SymPy gives up."""
    try:
        return bool(proof(expr) == 0)
    except (sympy.PolynomialError, TypeError, ValueError, NotImplementedError):
        return False


def equal_at_points(a: sympy.Expr, b: sympy.Expr, seed: int, prove: bool, points: int = 8
                    ) -> tuple[bool, str, dict[str, float] | None]:
    """``a == b`` for nonnegative entries: exact random points, then (``prove``) a proof.

    For written-out K x K metrics, rational functions whose ``cancel`` takes minutes at
    K = 3: there a nonzero difference vanishing at 8 random rational points is itself a
    coincidence of probability ~0.
    """
    if prove and sympy.count_ops(a) + sympy.count_ops(b) <= 400:
        return symbolic_equal(a, b, seed)
    if (witness := _witness(a, b, seed, points)) is not None:
        return False, "differs", witness
    return True, f"equal at {points} random exact points", None


def _witness(a: sympy.Expr, b: sympy.Expr, seed: int, points: int,
             relative: float = RELATIVE) -> dict[str, float] | None:
    """A random exact point where ``a`` and ``b`` differ at the working precision, or None."""
    symbols = sorted(a.free_symbols | b.free_symbols, key=lambda s: s.name)
    rng = random.Random(seed)
    # Two evaluators, not three: the difference is taken at the working precision, as exact
    # as evaluating a - b (lambdify's printing was most of the cost of a comparison).
    f_a, f_b = (evaluator(e, symbols) for e in (a, b))
    digits = working_digits(a, b)
    for _ in range(points):
        pt = [sympy.Rational(rng.randint(1, 60), rng.randint(1, 7)) for _ in symbols]
        if _differs(*evaluate_difference(f_a, f_b, pt, digits), relative):
            return {s.name: float(v) for s, v in zip(symbols, pt, strict=True)}
    return None
