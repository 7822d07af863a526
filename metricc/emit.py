"""Stage 3: SymPy -> PyTorch source, and the loss class that runs it.

Only validated SymPy trees reach this module; the source it writes names
nothing from the user's text (parameters were substituted by numbers, and the
only variables are ``TP FP FN TN eps`` and the ``x0, x1, ...`` of ``sympy.cse``).
:func:`build_loss_class` executes that source (and nothing else) into a
subclass of :class:`metricc.runtime.loss.MetricLoss`.
"""

from __future__ import annotations

import builtins
import inspect
import keyword
import linecache
import math
import re
import textwrap
import types
from typing import TYPE_CHECKING, Any

import sympy
from sympy.printing.pytorch import TorchPrinter

from .analyse import backward_coefficients, guard
from .budget import check_constants
from .errors import MetricError
from .symbols import COUNTS, EPS, FROM_NONNEGATIVE, TO_NONNEGATIVE

if TYPE_CHECKING:
    from .runtime.loss import MetricLoss

__all__ = ["KERNEL_NAMES", "MetricPrinter", "build_loss_class", "emit_kernels",
           "loss_parameters"]

KERNEL_NAMES = ("metric_value", "metric_and_coefficients")
_ALLOWED_NAMES = {*COUNTS, "eps"}


class MetricPrinter(TorchPrinter):
    """TorchPrinter with readable powers and elementwise min/max on tensors.

    One ``_print_X`` per node SymPy may produce for a metric or its derivative where
    TorchPrinter's own does not fit (``abs`` and ``sign`` are TorchPrinter's).
    """

    def __init__(self) -> None:
        super().__init__({"fully_qualified_modules": True, "strict": True})

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
            out = f"torch.clamp({out}, {clamp}={float(bound)!r})"
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


def _float_literal(expr: sympy.Expr) -> str:
    """``repr`` of a constant as a Python float; refuses complex and infinite values."""
    try:
        value = complex(expr)
    except (TypeError, ValueError, OverflowError):
        raise MetricError(f"cannot generate code: the constant {expr} is not a number") from None
    if value.imag != 0:
        raise MetricError(f"cannot generate code: the formula is complex-valued ({expr})")
    if not math.isfinite(value.real):
        raise MetricError(f"cannot generate code: the constant {expr} overflows a float")
    return repr(value.real)


def _check_emittable(exprs: list[sympy.Expr]) -> None:
    for e in exprs:
        extra = {s.name for s in e.free_symbols} - _ALLOWED_NAMES
        if extra:
            raise MetricError(
                "cannot generate code: the formula still has free parameters "
                f"{sorted(extra)}; give each a value"
            )
        if e.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
            raise MetricError("cannot generate code: the formula is infinite or undefined everywhere")


def _function(name: str, doc: str, outputs: list[tuple[str, sympy.Expr]]) -> str:
    printer = MetricPrinter()
    exprs = [e for _, e in outputs]
    _check_emittable(exprs)
    temps, reduced = sympy.cse(exprs, symbols=sympy.numbered_symbols("x"), optimizations="basic")
    # Constant temporaries (x0 = sqrt(2)) go back inline: printed as numbers they stay
    # Python floats, and torch functions or min/max applied to a float would fail.
    constants: dict[sympy.Symbol, sympy.Expr] = {}
    kept = []
    for sym, e in temps:
        e = e.xreplace(constants)
        if e.free_symbols:
            kept.append((sym, e))
        else:
            constants[sym] = e
    temps, reduced = kept, [e.xreplace(constants) for e in reduced]
    for e in [*(t for _, t in temps), *reduced]:
        # cse multiplies constants out: 1e299*TP/(1e-299*FP + TP) needs 1e598.
        check_constants(e, "the generated code for the formula and its derivative")
    lines = [f"def {name}(TP, FP, FN, TN, eps):", f'    """{doc}"""']
    for sym, e in temps:
        lines.append(f"    {sym} = {printer.doprint(e)}")
    names = []
    for (out, _), e in zip(outputs, reduced, strict=False):
        code = printer.doprint(e)
        if not any(s.name in COUNTS or s.name.startswith("x") for s in e.free_symbols):
            # A constant (e.g. 0 for a count the metric ignores) must still be a tensor.
            code = f"torch.zeros_like(TP) + {code}"
        lines.append(f"    {out} = {code}")
        names.append(out)
    lines.append(f"    return {', '.join(names)}")
    return "\n".join(lines) + "\n"


def emit_kernels(expr: sympy.Expr) -> str:
    """Torch source of the two kernels for a metric over ``TP FP FN TN``.

    ``metric_value(TP, FP, FN, TN, eps)`` is the metric with ``eps`` added to
    every denominator, root and log (see :func:`metricc.analyse.guard`);
    ``metric_and_coefficients`` also returns ``g1 = f_TP - f_FN`` and
    ``g0 = f_FP - f_TN`` of that same guarded metric, which is all the backward
    pass needs.

    >>> print(emit_kernels(sympy.sympify("TP/(TP+FP)")).splitlines()[0])
    def metric_value(TP, FP, FN, TN, eps):
    """
    # Differentiate with nonnegative counts, so |x|' is sign(x), not re/im terms.
    guarded = guard(expr.xreplace(TO_NONNEGATIVE), EPS)
    g1, g0 = (g.xreplace(FROM_NONNEGATIVE) for g in backward_coefficients(guarded,
                                                                          TO_NONNEGATIVE))
    guarded = guarded.xreplace(FROM_NONNEGATIVE)
    value = _function(KERNEL_NAMES[0], "The metric, guarded by eps.", [("value", guarded)])
    both = _function(
        KERNEL_NAMES[1],
        "The metric and its backward coefficients g1 = f_TP - f_FN, g0 = f_FP - f_TN.",
        [("value", guarded), ("g1", g1), ("g0", g0)],
    )
    return textwrap.dedent(value) + "\n\n" + both


def loss_parameters() -> list[inspect.Parameter]:
    """The options of :class:`MetricLoss`: its ``__init__`` parameters after ``self``.

    ``Metric.loss`` checks option names against them and standalone files copy
    them into their class's signature.
    """
    from .runtime.loss import MetricLoss

    return list(inspect.signature(MetricLoss.__init__).parameters.values())[1:]


def build_loss_class(kernels_source: str, name: str | None, formula: str, expr: sympy.Expr,
                     higher_is_better: bool, micro_refusal: str = "") -> type[MetricLoss]:
    """A :class:`MetricLoss` subclass holding the kernels of ``kernels_source``.

    ``kernels_source`` must come from :func:`emit_kernels`: it is executed.
    ``micro_refusal`` (for metrics that use TN) is why multiclass micro-averaging is refused.
    """
    import torch

    from .runtime.loss import MetricLoss

    filename = remember_source(f"<metricc {abs(hash(kernels_source)):x}>", kernels_source)
    namespace: dict[str, Any] = {"torch": torch}
    exec(builtins.compile(kernels_source, filename, "exec"), namespace)
    attrs = {
        **{k: staticmethod(namespace[k]) for k in KERNEL_NAMES},
        "formula": formula,
        "source": kernels_source,
        "higher_is_better": higher_is_better,
        "micro_refusal": micro_refusal,
        "__module__": "metricc.generated",
        "__doc__": f"Loss for the metric {formula!r} = {expr}.",
    }
    class_name = ("".join(part.capitalize() for part in name.split("_")) + "Loss" if name
                  else "CustomMetricLoss")
    attrs["forward"] = own_copy(MetricLoss.forward, f"{class_name}.forward")
    return type(class_name, (MetricLoss,), attrs)


#: Generated sources kept in ``linecache`` (the compile cache holds 256 metrics).
LINECACHE_SIZE = 256
_LINECACHE_KEYS: dict[str, None] = {}


def remember_source(filename: str, source: str) -> str:
    """Put generated ``source`` in ``linecache`` under ``filename`` and return the name.

    linecache lets tracebacks and torch.compile show the generated lines; it keeps the
    latest LINECACHE_SIZE sources (like the compile cache), not one per formula forever.
    """
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    _LINECACHE_KEYS.pop(filename, None)
    _LINECACHE_KEYS[filename] = None
    while len(_LINECACHE_KEYS) > LINECACHE_SIZE:
        oldest = next(iter(_LINECACHE_KEYS))
        del _LINECACHE_KEYS[oldest]
        linecache.cache.pop(oldest, None)
    return filename


def own_copy(fn: Any, qualname: str) -> Any:
    """``fn`` with a code object of its own.

    torch.compile caches compiled frames per code object: every generated class
    sharing ``MetricLoss.forward`` made the 9th metric compiled in one process hit
    the recompile limit (``FailOnRecompileLimitHit`` under ``fullgraph=True``).
    """
    try:
        code = fn.__code__.replace(co_qualname=qualname)
    except TypeError:  # Python 3.10: no co_qualname; replace() still makes a new code object
        code = fn.__code__.replace(co_firstlineno=fn.__code__.co_firstlineno)
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__annotations__ = dict(fn.__annotations__)
    copy.__doc__ = fn.__doc__
    copy.__qualname__ = qualname
    return copy
