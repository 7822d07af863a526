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

import itertools
import keyword
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import sympy
from sympy import Indexed, IndexedBase, KroneckerDelta, Sum
from sympy.printing.str import StrPrinter

from .errors import MetricError

__all__ = [
    "EPS",
    "A",
    "B",
    "C",
    "K",
    "MatrixFormula",
    "Present",
    "contract",
    "display",
    "emit_matrix_kernels",
    "gradient",
    "guard_matrix",
    "is_matrix_expr",
]

#: The confusion matrix: ``C[i, j]`` counts true class ``i`` predicted as ``j``.
C = IndexedBase("C")
#: The number of classes.
K = sympy.Symbol("K", integer=True, positive=True)
#: The free indices of the gradient ``d f / d C[a, b]``.
A, B = sympy.symbols("a b", integer=True, nonnegative=True)
EPS = sympy.Symbol("eps", positive=True)

#: Functions a matrix formula may call besides the 2x2 language's own.
MATRIX_FUNCTIONS = ("sum", "row", "col", "present", "delta")


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


# --- placeholders the parser builds (resolved by resolve_matrix) --------------------------

class Entry(sympy.Function):
    """``BASE[i, j]`` as written: (base name, row index name, column index name)."""


class SumOf(sympy.Function):
    """``sum(i, j, body)`` as written: (body, index names...)."""


class RowTotal(sympy.Function):
    """``row(i)`` as written."""


class ColTotal(sympy.Function):
    """``col(j)`` as written."""


class Delta(sympy.Function):
    """``delta(i, j)`` as written."""


class PresentCall(sympy.Function):
    """``present(x)`` as written."""


PLACEHOLDERS = (Entry, SumOf, RowTotal, ColTotal, Delta, PresentCall)


def is_matrix_expr(expr: sympy.Expr) -> bool:
    """Whether a parsed (unresolved) expression uses any matrix construct."""
    return any(expr.has(p) for p in PLACEHOLDERS)


@dataclass(frozen=True)
class MatrixFormula:
    """A parsed matrix formula: ``expr`` in index form over :data:`C` and :data:`K`.

    ``parameters`` are scalar parameters, ``matrix_parameters`` the names of
    ``K x K`` parameters (written ``W[i, j]``).
    """

    text: str
    expr: sympy.Expr
    parameters: tuple[str, ...]
    matrix_parameters: tuple[str, ...]
    defaults: dict[str, Any] = field(default_factory=dict)
    #: Named metrics the formula uses (their parameter bounds apply).
    metrics: tuple[str, ...] = ()


# --- display --------------------------------------------------------------------------------

class _MatrixStrPrinter(StrPrinter):
    """Prints index form in the formula language: ``sum(i, ...)``, ``row(i)``, ``n``."""

    def _print_Dummy(self, expr: sympy.Dummy) -> str:
        return expr.name

    def _print_Indexed(self, expr: Indexed) -> str:
        return f"{expr.base}[{', '.join(self._print(i) for i in expr.indices)}]"

    def _print_KroneckerDelta(self, expr: KroneckerDelta) -> str:
        return f"delta({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _print_Present(self, expr: Present) -> str:
        return f"present({self._print(expr.args[0])})"

    def _print_Sum(self, expr: Sum) -> str:
        body = expr.function
        vars_ = [v for v, _, _ in expr.limits]
        if isinstance(body, Indexed) and body.base == C:
            i, j = body.indices
            if vars_ == [j] and i not in vars_:
                return f"row({self._print(i)})"
            if vars_ == [i] and j not in vars_:
                return f"col({self._print(j)})"
            if set(vars_) == {i, j} and i != j:
                return "n"
        return f"sum({', '.join(self._print(v) for v in vars_)}, {self._print(body)})"


def display(expr: sympy.Expr) -> str:
    """``expr`` in the formula language.

    >>> import metricc
    >>> display(metricc.compile("sum(i, C[i,i]) / n").expr)
    'sum(i, C[i, i])/n'
    """
    return _MatrixStrPrinter({"order": "none"}).doprint(expr)


# --- guard and derivatives -------------------------------------------------------------------

def _positive_fallback(e: sympy.Add) -> bool:
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
            if args == {sympy.S.One, a, x} and _nonnegative(x):
                return True
    return False


def _nonnegative(e: sympy.Expr) -> bool:
    """``e >= 0`` for every nonnegative matrix, by structure (``False``: not shown)."""
    if e.is_number:
        return bool(e.is_extended_real and e >= 0)
    if isinstance(e, Indexed):
        return e.base == C
    if isinstance(e, sympy.Symbol):
        return bool(e.is_nonnegative)
    if isinstance(e, sympy.Add) and _positive_fallback(e):
        return True
    if isinstance(e, (sympy.Add, sympy.Mul)):
        return all(_nonnegative(a) for a in e.args)
    if isinstance(e, sympy.Pow):
        return _nonnegative(e.base) or bool(e.exp.is_even)
    if isinstance(e, Sum):
        return _nonnegative(e.function)
    if isinstance(e, (sympy.Abs, Present, KroneckerDelta)):
        return True
    return bool(e.is_nonnegative)


def guard_matrix(expr: sympy.Expr, eps: sympy.Expr = EPS) -> sympy.Expr:
    """The eps policy of :func:`metricc.analyse.guard`, for index form.

    A denominator that is ``>= 0`` for every nonnegative matrix gets ``+ eps``,
    one that may take either sign becomes ``d / (d^2 + eps^2)``, and root and log
    arguments get ``+ eps``.

    >>> import metricc
    >>> display(guard_matrix(metricc.compile("sum(i, C[i,i]) / n").expr))
    'sum(i, C[i, i])/(eps + n)'
    """

    def visit(e: sympy.Expr) -> sympy.Expr:
        if not e.has(C) or isinstance(e, Indexed):
            return e
        if isinstance(e, Sum):
            return Sum(visit(e.function), *e.limits)
        args = [visit(a) for a in e.args]
        if isinstance(e, sympy.Pow):
            base, exp = args
            if not exp.is_number:
                return sympy.Pow(base + eps, exp) if _nonnegative(e.base) else sympy.Pow(base, exp)
            if exp.is_negative and exp.is_integer and not _nonnegative(e.base):
                return sympy.Pow(base / (base**2 + eps**2), -exp)
            if exp.is_negative or not exp.is_integer:
                return sympy.Pow(base + eps, exp)
            return sympy.Pow(base, exp)
        if isinstance(e, sympy.log):
            return sympy.log(args[0] + eps)
        if isinstance(e, Present):
            return e  # flat: no guard needed inside
        return e.func(*args)

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
    >>> display(gradient(metricc.compile("sum(i, C[i,i]) / n").expr))
    'delta(a, b)/n - sum(i, C[i, i])/n**2'
    """
    return contract(sympy.diff(expr, C[A, B]))


# --- emission -------------------------------------------------------------------------------

#: Kernel names and the runtime helpers they call.
MATRIX_KERNEL_NAMES = ("matrix_value", "matrix_and_gradient")


def _ordered_dummies(exprs: Iterable[sympy.Expr]) -> list[sympy.Symbol]:
    seen: dict[sympy.Symbol, None] = {}
    for e in exprs:
        for node in sympy.preorder_traversal(e):
            if isinstance(node, Sum):
                for v, _, _ in node.limits:
                    seen.setdefault(v, None)
    return list(seen)


def share_sums(exprs: list[sympy.Expr]) -> list[sympy.Expr]:
    """Make sums that differ only in the names of their indices one object.

    ``n`` written three times holds three sets of fresh indices; once they are
    one object, ``cse`` computes it once.
    """
    canon: dict[sympy.Expr, sympy.Expr] = {}
    memo: dict[sympy.Expr, sympy.Expr] = {}

    def visit(e: sympy.Expr) -> sympy.Expr:
        if not e.args or isinstance(e, Indexed):
            return e
        if e in memo:
            return memo[e]
        args = [visit(a) for a in e.args]
        out = e.func(*args) if args != list(e.args) else e
        if isinstance(out, Sum):
            bound = [v for v, _, _ in out.limits]
            key = out.xreplace({v: sympy.Symbol(f"_bound{n}") for n, v in enumerate(bound)})
            out = canon.setdefault(key, out)
        memo[e] = out
        return out

    return [visit(e) for e in exprs]


def _uses_index(expr: sympy.Expr, sym: sympy.Symbol) -> bool:
    """Whether ``sym`` occurs in ``expr`` outside entry subscripts and sum limits."""
    if isinstance(expr, Indexed):
        return False
    if isinstance(expr, Sum):
        return _uses_index(expr.function, sym)
    if expr == sym:
        return True
    return any(_uses_index(a, sym) for a in expr.args)


def _matrix_printer(axes: dict[str, int]) -> Any:
    from .emit import MetricPrinter

    class MatrixPrinter(MetricPrinter):
        def _print_Sum(self, expr: Sum) -> str:
            dims = tuple(axes[v.name] for v, _, _ in expr.limits)
            return f"_sum({self._print(expr.function)}, {dims}, K)"

        def _print_KroneckerDelta(self, expr: KroneckerDelta) -> str:
            return f"_delta({self._print(expr.args[0])}, {self._print(expr.args[1])})"

        def _print_Present(self, expr: Present) -> str:
            return f"_present({self._print(expr.args[0])})"

        def _print_Indexed(self, expr: Indexed) -> str:
            return "_".join([str(expr.base), *(self._print(i) for i in expr.indices)])

    return MatrixPrinter()


def _kernel(name: str, doc: str, outputs: list[tuple[str, sympy.Expr]],
            matrix_params: tuple[str, ...]) -> str:
    exprs = share_sums([e for _, e in outputs])
    dummies = _ordered_dummies(exprs)
    # Axes: 0 batch, 1 and 2 the gradient's (a, b), then one per summed index.
    names: dict[sympy.Symbol, sympy.Symbol] = {A: sympy.Symbol("a"), B: sympy.Symbol("b")}
    for n_, d in enumerate(dummies, start=1):
        names[d] = sympy.Symbol(f"i{n_}")
    axes = {"a": 1, "b": 2, **{names[d].name: 2 + n_ for n_, d in enumerate(dummies, start=1)}}
    dims = 3 + len(dummies)
    entries: dict[sympy.Symbol, tuple[str, str, str]] = {}

    def rename(e: sympy.Expr) -> sympy.Expr:
        # Entries stay Indexed through cse: as plain symbols SymPy would see no index
        # in them and move them out of their sums.
        e = e.xreplace(names).xreplace({K: sympy.Symbol("K")})
        for node in e.atoms(Indexed):
            i, j = node.indices
            entries[sympy.Symbol(f"{node.base}_{i}_{j}")] = (str(node.base), str(i), str(j))
        return e

    renamed = [rename(e) for e in exprs]
    allowed = {"K", "eps", *(s.name for s in names.values()), "C", *matrix_params}
    for e in renamed:
        extra = {s.name for s in e.free_symbols if not isinstance(s, Indexed)} - allowed
        if extra:
            raise MetricError("cannot generate code: the formula still has free parameters "
                              f"{sorted(extra)}; give each a value")
        if e.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
            raise MetricError("cannot generate code: the formula is undefined everywhere")
    temps, reduced = sympy.cse(renamed, symbols=sympy.numbered_symbols("x"),
                               optimizations="basic")
    printer = _matrix_printer(axes)
    for s in [*names.values(), *entries]:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s.name) or keyword.iskeyword(s.name):
            raise MetricError(f"internal: refusing to emit symbol {s.name!r}")
    args = ", ".join(["C", "eps", *matrix_params])
    lines = [f"def {name}({args}):", f'    """{doc}"""', "    K = _num_classes(C)",
             "    _zero = C.new_zeros(())"]
    for sym in names.values():
        if any(_uses_index(e, sym) for e in renamed):
            lines.append(f"    {sym} = _index(C, {dims}, {axes[sym.name]})")
    for sym, (base, i, j) in entries.items():
        lines.append(f"    {sym} = _entry({base}, {dims}, {axes[i]}, {axes[j]})")
    for sym, e in temps:
        lines.append(f"    {sym} = {printer.doprint(e)}")
    outs = []
    for (out, _), e in zip(outputs, reduced, strict=True):
        shaper = "_as_rows" if out == "value" else "_as_matrices"
        lines.append(f"    {out} = {shaper}({printer.doprint(e)}, C, {dims})")
        outs.append(out)
    lines.append(f"    return {', '.join(outs)}")
    # Temporaries cse made of sum limits (K - 1) are never printed; drop them.
    while True:
        unused = [n_ for n_, line in enumerate(lines)
                  if (m := re.match(r"    (x\d+) = ", line))
                  and not any(re.search(rf"\b{m.group(1)}\b", other)
                              for k_, other in enumerate(lines) if k_ != n_)]
        if not unused:
            break
        lines = [line for n_, line in enumerate(lines) if n_ not in unused]
    text = "\n".join(lines).replace("torch.zeros_like(TP)", "_zero")
    if "_zero" not in text.split('"""')[-1].replace("    _zero = C.new_zeros(())", ""):
        text = text.replace("    _zero = C.new_zeros(())\n", "")
    return text + "\n"


def emit_matrix_kernels(expr: sympy.Expr, matrix_params: tuple[str, ...] = ()) -> str:
    """Torch source of ``matrix_value(C, eps, *W)`` and ``matrix_and_gradient(C, eps, *W)``.

    ``C`` is a float64 ``(R, K, K)`` batch of matrices; the kernels return the
    eps-guarded metric ``(R,)`` and its gradient ``d f / d C`` ``(R, K, K)``.
    They call the helpers ``_sum``, ``_index``, ``_entry`` ... of :mod:`metricc.runtime.matrix`.

    >>> import metricc
    >>> print(emit_matrix_kernels(metricc.compile("sum(i, C[i,i]) / n").expr).splitlines()[0])
    def matrix_value(C, eps):
    """
    guarded = guard_matrix(expr, EPS)
    grad = gradient(guarded)
    value = _kernel(MATRIX_KERNEL_NAMES[0], "The metric, guarded by eps.", [("value", guarded)],
                    matrix_params)
    both = _kernel(MATRIX_KERNEL_NAMES[1],
                   "The metric and its gradient d metric / d C[a, b], guarded by eps.",
                   [("value", guarded), ("grad", grad)], matrix_params)
    return value + "\n\n" + both


# --- expansion for a concrete K (verification, check and references) ------------------------

def entry_symbols(k: int) -> list[list[sympy.Symbol]]:
    """``C_i_j`` symbols for a ``k x k`` matrix, nonnegative."""
    return [[sympy.Symbol(f"C_{i}_{j}", nonnegative=True) for j in range(k)] for i in range(k)]


def expand(expr: sympy.Expr, k: int, matrices: dict[str, Any] | None = None
           ) -> tuple[sympy.Expr, list[list[sympy.Symbol]]]:
    """``expr`` written out for ``K = k`` over the symbols of :func:`entry_symbols`."""
    sym = entry_symbols(k)
    e = expr.xreplace({K: sympy.Integer(k)}).doit()
    subs: dict[sympy.Expr, sympy.Expr] = {}
    for node in e.atoms(Indexed):
        i, j = (int(x) for x in node.indices)
        if node.base == C:
            subs[node] = sym[i][j]
        else:
            values = (matrices or {})[str(node.base)]
            subs[node] = sympy.nsimplify(values[i][j])
    return e.xreplace(subs), sym


def matrix_value_function(expr: sympy.Expr, k: int, matrices: dict[str, Any] | None = None
                          ) -> Callable[..., Any]:
    """A torch function of a ``(k, k)`` matrix computing ``expr`` written out (no eps)."""
    import torch

    e, sym = expand(expr, k, matrices)
    flat = list(itertools.chain.from_iterable(sym))
    fn = sympy.lambdify(flat, e, modules=[{"sqrt": torch.sqrt, "log": torch.log,
                                           "exp": torch.exp, "Abs": torch.abs}, "math"])
    return lambda m: fn(*m.reshape(-1).unbind())
