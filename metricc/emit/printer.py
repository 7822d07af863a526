"""The printer of generated code: SymPy -> torch source text, validated names and literals only."""

from __future__ import annotations

import keyword
import math
import re
from typing import Any

import sympy
from sympy.printing.pytorch import TorchPrinter

from ..errors import MetricError
from ..language.functions import TORCH_CALLS
from ..language.limits import check_constants
from ..language.symbols import COUNTS


class MetricPrinter(TorchPrinter):
    """TorchPrinter with readable powers and elementwise min/max on tensors.

    One ``_print_X`` per node SymPy may produce for a metric or its derivative where
    TorchPrinter's own does not fit (``abs`` and ``sign`` are TorchPrinter's).
    """

    def __init__(self) -> None:
        super().__init__({"fully_qualified_modules": True, "strict": True})

    def doprint(self, expr: Any, assign_to: Any = None) -> str:
        """The torch text of ``expr``; refuses a ``torch.<name>`` outside the function table
        (no namespace that runs kernels would define it: ``torch.imag`` of a real tensor)."""
        text = super().doprint(expr, assign_to)
        unknown = sorted(set(re.findall(r"\btorch\.(\w+)", text)) - set(TORCH_CALLS))
        if unknown:
            raise MetricError(f"cannot generate code for {expr}: it needs torch.{unknown[0]}, "
                              "which no kernel may call (metricc.language.functions)")
        return text

    def _print_Pow(self, expr: sympy.Pow) -> str:
        base, exp = expr.args
        if exp == sympy.S.Half:
            return f"torch.sqrt({self._print(base)})"
        if exp == -sympy.S.Half:
            return f"torch.rsqrt({self._print(base)})"
        b = self.parenthesize(base, sympy.printing.precedence.PRECEDENCE["Pow"])
        if exp == -1:
            return f"1/{b}"
        if exp.is_Integer and exp > 0:
            return f"{b}**{exp}"
        return f"{b}**({self._print(exp)})"

    def _print(self, expr: Any, **kwargs: Any) -> str:
        if isinstance(expr, sympy.Expr) and expr.is_number and not expr.is_Rational:
            return self._constant(expr)
        return super()._print(expr, **kwargs)

    def _constant(self, expr: sympy.Expr) -> str:
        """A constant such as sqrt(2), exp(1/2), log(2): exact where Python can say it.

        ``torch.sqrt(2)`` fails (torch functions take tensors), so constants are
        Python arithmetic, with exp/log acting on ``torch.zeros_like(TP) + c``;
        both stay exact when ``metricc.verify`` runs the code on SymPy numbers.
        """
        _float_literal(expr)  # refuses complex and infinite constants

        def const(e: sympy.Expr) -> str:
            if e.is_Rational:
                return f"({super(MetricPrinter, self)._print(e)})"
            if isinstance(e, sympy.Add):
                return "(" + " + ".join(const(a) for a in e.args) + ")"
            if isinstance(e, sympy.Mul):
                return "(" + "*".join(const(a) for a in e.args) + ")"
            if isinstance(e, sympy.Pow):
                return f"({const(e.base)}**{const(e.exp)})"
            if e is sympy.E:
                return "torch.exp(torch.zeros_like(TP) + 1)"
            if isinstance(e, (sympy.exp, sympy.log)):
                name = "exp" if isinstance(e, sympy.exp) else "log"
                return f"torch.{name}(torch.zeros_like(TP) + {const(e.args[0])})"
            return _float_literal(e)

        return const(expr)

    def _print_Integer(self, expr: sympy.Integer) -> str:
        # Past 2**53 a Python int no longer converts exactly, and past 2**63 torch
        # refuses to multiply a tensor by it.
        return str(int(expr)) if abs(expr) <= 2**53 else _float_literal(expr)

    def _print_Rational(self, expr: sympy.Rational) -> str:
        if abs(expr.p) <= 2**53 and expr.q <= 2**53:
            return f"{expr.p}/{expr.q}"
        return _float_literal(expr)

    def _print_Float(self, expr: sympy.Float) -> str:
        return _float_literal(expr)

    def _minmax(self, expr: sympy.Expr, fold: str, clamp: str) -> str:
        numbers = [a for a in expr.args if a.is_number]
        # torch.minimum/maximum take tensors only: an operand without a count
        # (a cse temporary may be a Python float) is lifted to one.
        others = [self._print(a) if any(s.name in COUNTS for s in a.free_symbols)
                  else f"(torch.zeros_like(TP) + {self._print(a)})"
                  for a in expr.args if not a.is_number]
        out = others[0]
        for o in others[1:]:
            out = f"{fold}({out}, {o})"
        if numbers:
            bound = max(numbers) if fold == "torch.maximum" else min(numbers)
            out = _clamped(out, clamp, bound)
        return out

    def _print_Max(self, expr: sympy.Max) -> str:
        return self._minmax(expr, "torch.maximum", "min")

    def _print_Min(self, expr: sympy.Min) -> str:
        return self._minmax(expr, "torch.minimum", "max")

    def _print_Heaviside(self, expr: sympy.Heaviside) -> str:
        # H(0) = 1/2, the subgradient midpoint, as SymPy's default.
        return f"((torch.sign({self._print(expr.args[0])}) + 1)/2)"

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        name = expr.name
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or keyword.iskeyword(name):
            raise MetricError(f"internal: refusing to emit symbol {name!r}")
        return name


def _clamped(out: str, clamp: str, bound: sympy.Expr) -> str:
    """``torch.clamp(out, clamp=bound)``, or ``out`` where the bound is past float's range on
    the side that never binds (``min(j, exp(3e39))`` is ``j`` for every float ``j``); a bound
    past the range on the other side is the overflowing constant itself, refused."""
    try:
        value = float(bound)
    except OverflowError:  # an Integer or Rational past float's range
        value = math.copysign(math.inf, float(sympy.sign(bound)))
    if math.isinf(value) and (value > 0) == (clamp == "max"):
        return out  # min(x, +inf) = x, max(x, -inf) = x
    if not math.isfinite(value):
        raise MetricError(f"cannot generate code: the constant {bound!s} overflows a float, and "
                          f"{'max' if clamp == 'min' else 'min'}() with it is that constant; "
                          "scale the formula's constants below 1.8e308")
    return f"torch.clamp({out}, {clamp}={value!r})"


def check_emittable(exprs: list[sympy.Expr], allowed: set[str],
                    undefined: str = "undefined everywhere") -> None:
    """Refuse kernel outputs naming anything outside ``allowed`` (a parameter given no value;
    matrix entries ``C[i, j]`` are not names) or holding ``zoo``, ``nan`` or ``oo``."""
    for e in exprs:
        extra = {s.name for s in e.free_symbols if not isinstance(s, sympy.Indexed)} - allowed
        if extra:
            raise MetricError("cannot generate code: the formula still has free parameters "
                              f"{sorted(extra)}; give each a value")
        if e.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
            raise MetricError(f"cannot generate code: the formula is {undefined}")


#: Operations in a kernel's outputs past which ``cse`` skips its "basic" preprocessing.
LARGE_KERNEL_OPS = 600


def shared_subexpressions(exprs: list[sympy.Expr], prefix: str = "x"
                          ) -> tuple[list[tuple[sympy.Symbol, sympy.Expr]], list[sympy.Expr]]:
    """``sympy.cse`` of the kernels' outputs, with constant temporaries put back inline.

    Printed as numbers, constants stay Python floats where a temporary ``x0 = sqrt(2)``
    would be a float variable that torch functions and ``min``/``max`` refuse.
    """
    # "basic" pulls signs and common factors out of sums first (more shared terms); on large
    # kernels that factor_terms pass alone took seconds (a 200-line binding chain: 1.2 s).
    large = sum(sympy.count_ops(e) for e in exprs) > LARGE_KERNEL_OPS
    temps, reduced = sympy.cse(exprs, symbols=sympy.numbered_symbols(prefix),
                               optimizations=None if large else "basic")
    constants: dict[sympy.Symbol, sympy.Expr] = {}
    kept = []
    for sym, e in temps:
        e = e.xreplace(constants)
        if e.free_symbols:
            kept.append((sym, e))
        else:
            constants[sym] = e
    return kept, [e.xreplace(constants) for e in reduced]


def _float_literal(expr: sympy.Expr) -> str:
    """``repr`` of a constant as a Python float; refuses complex and infinite values."""
    try:
        value = complex(expr)
    except (TypeError, ValueError, OverflowError):
        raise MetricError(f"cannot generate code: the constant {expr!s} is not a number") from None
    if value.imag != 0:
        raise MetricError(f"cannot generate code: the formula is complex-valued ({expr!s})")
    if not math.isfinite(value.real):
        raise MetricError(f"cannot generate code: the constant {expr!s} overflows a float")
    return repr(value.real)



def assignments(outputs: list[tuple[str, sympy.Expr]], prefix: str, anchor: str, allowed: set[str],
                what: str) -> list[str]:
    """``name = expression`` kernel lines for ``outputs`` after one :func:`shared_subexpressions`.

    Every name an output uses must be in ``allowed`` (or be an earlier output); a constant
    output becomes a tensor shaped as ``anchor``, and so do the constants the printer lifts
    with ``zeros_like(TP)`` (kernels over several shapes name their own anchor). ``what``
    names the formula in the constants' size errors.
    """
    check_emittable([e for _, e in outputs], allowed | {n for n, _ in outputs})
    kept, reduced = shared_subexpressions([e for _, e in outputs], prefix)
    printer = MetricPrinter()
    lines = []
    for sym, e in kept:
        check_constants(e, f"the generated code for {what}")
        lines.append(f"    {sym} = {printer.doprint(e)}")
    for (name, _), e in zip(outputs, reduced, strict=True):
        check_constants(e, f"the generated code for {what}")
        code = printer.doprint(e)
        lines.append(f"    {name} = {code}" if e.free_symbols else
                     f"    {name} = torch.zeros_like({anchor}) + {code}")
    return [line.replace("torch.zeros_like(TP)", f"torch.zeros_like({anchor})") for line in lines]
