"""Stage 3 for the K x K matrix: index form -> torch kernels that work for every K.

Each index is printed as its own broadcast axis and each sum as a tensor reduction over
that axis, so one kernel serves every K (``docs/matrix.md``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import sympy
from sympy import Indexed, KroneckerDelta, Sum

from ..analysis.matrix import gradient, guard_matrix
from ..analysis.size import rename as rename_symbols
from ..language.matrix import share_sums
from ..language.symbols import EPS, A, B, K, Present
from .printer import MetricPrinter, check_emittable

#: The kernels' names; both take ``(C, eps, *matrix parameters)``.
MATRIX_KERNEL_NAMES = ("matrix_value", "matrix_and_gradient")


def _uses_index(expr: sympy.Expr, sym: sympy.Symbol) -> bool:
    """Whether ``sym`` occurs in ``expr`` outside entry subscripts and sum limits."""
    if isinstance(expr, Indexed):
        return False
    if isinstance(expr, Sum):
        return _uses_index(expr.function, sym)
    if expr == sym:
        return True
    return any(_uses_index(a, sym) for a in expr.args)


def ordered_dummies(exprs: list[sympy.Expr]) -> list[sympy.Symbol]:
    """The summation indices in an order that does not depend on how they were created.

    SymPy orders a sum's terms partly by its indices' creation counters, which differ between
    processes (SymPy creates indices while iterating hash-seeded sets); numbered in plain
    traversal order, the kernels would differ too. Here each node's children are visited in
    the order of their shape with every index masked and, where two shapes tie, of their
    text with the indices already met written as their number.
    """
    bound = {v for e in exprs for node in sympy.preorder_traversal(e) if isinstance(node, Sum)
             for v, _, _ in node.limits}
    shapes: dict[sympy.Basic, str] = {}
    seen: dict[sympy.Symbol, str] = {}

    def shape(e: sympy.Basic) -> str:
        if e not in shapes:
            parts = [shape(a) for a in e.args]
            if e.is_commutative and isinstance(e, (sympy.Add, sympy.Mul)):
                parts.sort()
            text = "_" if e in bound else (
                f"{type(e).__name__}({','.join(parts)})" if e.args else sympy.srepr(e))
            shapes[e] = hashlib.sha1(text.encode()).hexdigest()
        return shapes[e]

    def named(e: sympy.Basic) -> str:
        return sympy.srepr(e.xreplace({v: sympy.Symbol(seen.get(v, "_")) for v in bound}))

    def walk(e: sympy.Basic) -> None:
        if isinstance(e, Sum):
            for v, _, _ in e.limits:
                seen.setdefault(v, f"#{len(seen)}")
        children = sorted(e.args, key=shape)
        if len({shape(c) for c in children}) < len(children):  # a tie: the text decides
            children.sort(key=lambda c: (shape(c), named(c)))
        for child in children:
            walk(child)

    for e in exprs:
        walk(e)
    return list(seen)


def _matrix_printer(axes: dict[str, int]) -> Any:

    class MatrixPrinter(MetricPrinter):
        def _print_Sum(self, expr: Sum) -> str:
            dims = tuple(axes[v.name] for v, _, _ in expr.limits)
            return f"mx_sum({self._print(expr.function)}, {dims}, K)"

        def _print_KroneckerDelta(self, expr: KroneckerDelta) -> str:
            return f"mx_delta({self._print(expr.args[0])}, {self._print(expr.args[1])})"

        def _print_Present(self, expr: Present) -> str:
            return f"mx_present({self._print(expr.args[0])})"

        def _print_Indexed(self, expr: Indexed) -> str:
            return "_".join([str(expr.base), *(self._print(i) for i in expr.indices)])

    return MatrixPrinter()


def _kernel(name: str, doc: str, outputs: list[tuple[str, sympy.Expr]],
            matrix_params: tuple[str, ...]) -> str:
    exprs = share_sums([e for _, e in outputs])
    dummies = ordered_dummies(exprs)
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
        # without re-evaluating Heaviside and min/max nodes (seconds for a min() of two metrics)
        e = rename_symbols(e, {**names, K: sympy.Symbol("K")}, also=(sympy.Heaviside,))
        for node in e.atoms(Indexed):
            i, j = node.indices
            entries[sympy.Symbol(f"{node.base}_{i}_{j}")] = (str(node.base), str(i), str(j))
        return e

    renamed = [rename(e) for e in exprs]
    allowed = {"K", "eps", *(s.name for s in names.values()), "C", *matrix_params}
    check_emittable(renamed, allowed)
    temps, reduced = sympy.cse(renamed, symbols=sympy.numbered_symbols("x"),
                               optimizations="basic")
    printer = _matrix_printer(axes)
    for s in [*names.values(), *entries]:
        printer.doprint(s)  # they are written as they are: refused unless plain identifiers
    args = ", ".join(["C", "eps", *matrix_params])
    lines = [f"def {name}({args}):", f'    """{doc}"""', "    K = mx_size(C)",
             "    _zero = C.new_zeros(())"]
    for sym in names.values():
        if any(_uses_index(e, sym) for e in renamed):
            lines.append(f"    {sym} = mx_index(C, {dims}, {axes[sym.name]})")
    # sorted: atoms() is a set, whose order changes with the hash seed between processes
    for sym, (base, i, j) in sorted(entries.items(), key=lambda kv: kv[0].name):
        lines.append(f"    {sym} = mx_entry({base}, {dims}, {axes[i]}, {axes[j]})")
    for sym, e in temps:
        lines.append(f"    {sym} = {printer.doprint(e)}")
    outs = []
    for (out, _), e in zip(outputs, reduced, strict=True):
        shaper = "mx_rows" if out == "value" else "mx_matrices"
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
    They call the helpers ``mx_sum``, ``mx_index``, ``mx_entry`` ... of :mod:`metricc.runtime.matrix`.

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


