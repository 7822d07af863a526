"""K x K formulas in the language: the parser's placeholders, index form and its display.

The parser builds placeholders (:class:`Entry`, :class:`SumOf`, ...) while it reads a formula;
:func:`resolve_matrix` turns them into *index form*: ``C[i, j]`` an :class:`sympy.Indexed` entry,
``sum(i, ...)`` a :class:`sympy.Sum` over ``i = 0 .. K-1`` with ``K`` a symbol (``docs/matrix.md``).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, ClassVar

import sympy
from sympy import Indexed, IndexedBase, KroneckerDelta, Sum
from sympy.printing.str import StrPrinter

from ..errors import MetricError
from ..library import lookup
from .functions import MATRIX_FUNCTIONS
from .limits import check_size, substituted
from .symbols import COUNTS, DERIVED, C, K, Present

__all__ = ["PLACEHOLDERS", "MatrixFormula", "col_total", "display", "is_matrix_expr", "resolve_matrix",
           "row_total", "share_sums", "total"]

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

#: Names a K x K parameter cannot take: a matrix parameter becomes an argument of the
#: generated kernel, beside ``C`` and ``eps``, and the kernel body reads ``K``, ``torch``,
#: the ``mx_*`` helpers and the ``x0, x1, ...`` temporaries of common subexpressions.
KERNEL_NAMES = frozenset({"C", "K", "eps", "torch"})


def reserved_matrix_name(name: str) -> str | None:
    """Why ``name`` cannot be a K x K parameter (``W[i, j]``), or ``None`` when it can.

    >>> reserved_matrix_name("W") is None
    True
    >>> reserved_matrix_name("lambda")
    "'lambda' is a Python keyword"
    """
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return f"'{name}' is a Python keyword"
    if name in KERNEL_NAMES or name.startswith("mx_") or re.fullmatch(r"x\d+", name):
        return f"'{name}' is a name the generated K x K kernel uses"
    return None


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
    #: The statistic the formula is over (a key of ``metricc.analysis.statistics.STATISTICS``).
    statistic: ClassVar[str] = "matrix"
    constraints: ClassVar[tuple[Any, ...]] = ()


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


def _index_symbol(name: str) -> sympy.Dummy:
    # A Dummy is unique, so an index bound inside a binding or a named metric never
    # captures one of the same name outside it.
    return sympy.Dummy(name, integer=True, nonnegative=True)


def row_total(i: sympy.Expr) -> sympy.Expr:
    """``row(i) = sum_k C[i, k]``: the (weighted) number of samples of true class ``i``."""
    k = _index_symbol("k")
    return Sum(C[i, k], (k, 0, K - 1))


def col_total(j: sympy.Expr) -> sympy.Expr:
    """``col(j) = sum_k C[k, j]``: the (weighted) number of samples predicted as ``j``."""
    k = _index_symbol("k")
    return Sum(C[k, j], (k, 0, K - 1))


def total() -> sympy.Expr:
    """``n = sum_ij C[i, j]``."""
    i, j = _index_symbol("i"), _index_symbol("j")
    return Sum(C[i, j], (i, 0, K - 1), (j, 0, K - 1))


class _Resolver:
    """The state of one :func:`resolve_matrix` call: bindings, parameters, indices in use."""

    def __init__(self, bindings: list[tuple[Any, sympy.Expr]], body: sympy.Expr, pos: Any,
                 functions: Collection[str], library_formula: Callable[[str], MatrixFormula]) -> None:
        self.pos, self.functions, self.library_formula = pos, functions, library_formula
        self.fail = pos.fail
        self.defined: dict[str, sympy.Expr] = {}
        self.params: set[str] = set()
        self.matrices: set[str] = set()
        self.defaults: dict[str, Any] = {}
        self.used_metrics: list[str] = []
        self.index_names: set[str] = set()
        for e in [*(x for _, x in bindings), body]:
            for s in sympy.preorder_traversal(e):
                if isinstance(s, (SumOf, Entry)):
                    self.index_names.update(v.name for v in s.args[1:])
                elif isinstance(s, (RowTotal, ColTotal, Delta)):
                    self.index_names.update(v.name for v in s.args if isinstance(v, sympy.Symbol))

    def index(self, x: sympy.Expr, bound: dict[str, sympy.Expr], what: str) -> sympy.Expr:
        if not isinstance(x, sympy.Symbol):  # pragma: no cover - the parser checks this
            raise MetricError(f"{what} takes class-index names")
        if x.name not in bound:
            raise self.fail(f"index '{x.name}' is not summed over here: write it inside "
                            f"sum({x.name}, ...)", x.name)
        return bound[x.name]

    def add_bindings(self, bindings: list[tuple[Any, sympy.Expr]]) -> None:
        pos = self.pos
        for name_tok, expr in bindings:
            name = str(name_tok)
            if name in COUNTS:
                raise pos.error(f"'{name}' is a built-in count and cannot be redefined", name_tok)
            if name in self.functions or name in MATRIX_FUNCTIONS:
                raise pos.error(f"'{name}' is a function and cannot be redefined", name_tok)
            if name in ("C", "K"):
                raise pos.error(f"'{name}' is built into K x K formulas and cannot be redefined",
                                name_tok)
            if name in self.defined:
                raise pos.error(f"'{name}' is defined twice", name_tok)
            if name in self.index_names:
                raise pos.error(f"'{name}' is a class index and cannot be a binding", name_tok)
            self.defined[name] = expr
        names = list(self.defined)  # in binding order, each once (a repeat was refused above)
        for i, (_, expr) in enumerate(bindings):  # a binding may only use the ones above it
            for s in expr.atoms(sympy.Symbol):
                if s.name in names[i:]:
                    raise pos.error(f"'{s.name}' is used before it is defined", pos.first_use[s.name])

    def name(self, name: str, bound: dict[str, sympy.Expr], stack: tuple[str, ...]) -> sympy.Expr:
        """A name as written: an index, a binding, ``K``, ``n``, a named metric or a parameter."""
        if name in bound:
            return bound[name]
        if name in self.defined:
            if name in stack:  # pragma: no cover - bindings only see earlier ones
                raise self.fail(f"'{name}' refers to itself", name)
            return self.walk(self.defined[name], bound, (*stack, name))
        if name == "K":
            return K
        if name == "n":
            return total()
        if name in COUNTS or name in DERIVED:
            raise self.fail(f"'{name}' is a 2x2 count; a K x K formula uses C[i,j], row(i), "
                            "col(j), n and K (docs/matrix.md)", name)
        if name in self.index_names:
            raise self.fail(f"index '{name}' is used outside a sum over it", name)
        metric = lookup(name)
        if metric is None:
            self.params.add(name)
            return sympy.Symbol(name)
        if not metric.matrix:
            raise self.fail(f"'{name}' is a 2x2 metric and cannot be mixed with the K x K "
                            "matrix; use a multiclass metric such as multiclass_accuracy", name)
        inner = self.library_formula(metric.name)
        if metric.name not in self.used_metrics:
            self.used_metrics.append(metric.name)
        for k, v in inner.defaults.items():
            self.defaults.setdefault(k, v)
        self.params.update(inner.parameters)
        self.matrices.update(inner.matrix_parameters)
        return inner.expr

    def entry(self, e: Entry, bound: dict[str, sympy.Expr]) -> sympy.Expr:
        base, i, j = e.args
        ii, jj = self.index(i, bound, "an entry"), self.index(j, bound, "an entry")
        if base.name == "C":
            return C[ii, jj]
        if base.name in COUNTS or base.name in DERIVED or base.name in self.functions \
                or base.name in self.defined or lookup(base.name) is not None:
            raise self.fail(f"'{base.name}' cannot be indexed; C[i, j] is the confusion matrix "
                            "and other indexed names are K x K parameters", base.name)
        reason = reserved_matrix_name(base.name)
        if reason is not None:
            raise self.fail(f"{reason} and cannot name a K x K parameter; rename it "
                            "(for example W[i, j])", base.name)
        self.matrices.add(base.name)
        return IndexedBase(base.name)[ii, jj]

    def walk(self, e: sympy.Expr, bound: dict[str, sympy.Expr], stack: tuple[str, ...]) -> sympy.Expr:
        if isinstance(e, sympy.Symbol):  # in a raw tree every symbol is a name as written
            return self.name(e.name, bound, stack)
        if isinstance(e, SumOf):
            inner_body, *names = e.args
            new = dict(bound)
            limits = []
            for v in names:
                if v.name in bound:
                    raise self.fail(f"index '{v.name}' is already summed over; use another name", v.name)
                s = _index_symbol(v.name)
                new[v.name] = s
                limits.append((s, 0, K - 1))
            return Sum(self.walk(inner_body, new, stack), *limits)
        if isinstance(e, Entry):
            return self.entry(e, bound)
        if isinstance(e, RowTotal):
            return row_total(self.index(e.args[0], bound, "row()"))
        if isinstance(e, ColTotal):
            return col_total(self.index(e.args[0], bound, "col()"))
        if isinstance(e, Delta):
            return KroneckerDelta(self.index(e.args[0], bound, "delta()"),
                                  self.index(e.args[1], bound, "delta()"))
        if isinstance(e, PresentCall):
            return Present(self.walk(e.args[0], bound, stack))
        if not e.args:
            return e
        return e.func(*(self.walk(a, bound, stack) for a in e.args))


def resolve_matrix(text: str, bindings: list[tuple[Any, sympy.Expr]], body: sympy.Expr,
                   pos: Any, functions: Collection[str],
                   library_formula: Callable[[str], MatrixFormula]) -> MatrixFormula:
    """Turn the parser's placeholders into index-form SymPy, with positioned errors.

    ``bindings`` and ``body`` are the parser's raw trees, whose only symbols are
    the names as written; ``pos`` makes positioned errors, ``functions`` are the
    2x2 language's function names and ``library_formula`` parses a named K x K
    metric (the parser passes its own, so this module needs no parser).
    Bindings are substituted where they are used, so a binding may mention an
    index (``recall = C[i,i]/row(i)``) that a ``sum`` around its use binds.
    """
    r = _Resolver(bindings, body, pos, functions, library_formula)
    r.add_bindings(bindings)
    (expr,) = share_sums([r.walk(body, {}, ())])
    if not expr.has(C):
        raise MetricError(f"formula {text.strip()!r} does not depend on the confusion matrix "
                          "C; a metric must use C[i, j], row(i), col(j) or n")
    # the 2 x 2 formulas' size limits: a min() of three K x K metrics took 14 s to verify
    check_size(expr, expanded=substituted(bindings, r.used_metrics))
    return MatrixFormula(text, expr, tuple(sorted(r.params)), tuple(sorted(r.matrices)), r.defaults,
                         tuple(r.used_metrics))
