"""The function table: each function of the formula language, and each ``torch`` call a
generated kernel makes, declared once.

Readers: the parser (names, arity, SymPy constructor), the eps guards
(:data:`ARGUMENT_GUARDED`), the printers (torch names), ``verify`` (the SymPy
stand-ins that execute kernels on symbols) and the lambdified references
(:func:`lambdify_torch`). The runtime is torch-only and cannot import this module, so
its float twin :data:`metricc.runtime.symbolic.HOST_MATH` keeps its own copy; a test
checks it against the :attr:`TorchCall.host` twins here.

>>> FUNCTIONS["sqrt"].torch
('sqrt', 'rsqrt')
>>> sorted(TORCH_CALLS)[:4]
['abs', 'clamp', 'exp', 'log']
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy

from .symbols import Present

__all__ = ["ARGUMENT_GUARDED", "FUNCTIONS", "KERNEL_METHODS", "MATRIX_FUNCTIONS", "TORCH_CALLS",
           "Function", "TorchCall", "lambdify_torch", "mpmath_functions", "sympy_torch"]


@dataclass(frozen=True)
class Function:
    """A function of the formula language (``name`` as written in formulas).

    ``node`` is the SymPy class its calls build (or ``None`` for the K x K helpers the
    index resolver turns into sums and entries); ``guard`` is ``"argument"`` where the
    eps guard adds ``eps`` to the argument (``log``; roots are powers, guarded as such),
    else ``""``; ``torch`` the ``torch.<name>`` calls the printer emits for it.
    """

    name: str
    build: Callable[..., Any] | None
    min_args: int
    max_args: int | None
    node: type | None
    guard: str
    torch: tuple[str, ...]
    matrix_only: bool = False


@dataclass(frozen=True)
class TorchCall:
    """One ``torch.<name>`` a kernel (or a relaxation's source) may call.

    ``sympy`` acts on SymPy expressions (``verify`` runs kernels through it); ``host`` on
    Python floats, as torch's float64 where finite (``None``: no float twin, so a kernel
    calling it runs as tensors).
    """

    name: str
    sympy: Callable[..., Any]
    host: Callable[..., Any] | None


def _host_maximum(a: float, b: float) -> float:
    return a if a >= b else b if b > a else a + b  # NaN in, NaN out, as torch.maximum


def _host_minimum(a: float, b: float) -> float:
    return a if a <= b else b if b < a else a + b


def _host_clamp(x: float, min: float | None = None, max: float | None = None) -> float:
    if min is not None:
        x = _host_maximum(x, min)
    return x if max is None else _host_minimum(x, max)


def _sympy_clamp(x: sympy.Expr, min: Any = None, max: Any = None) -> sympy.Expr:
    if min is not None:
        x = sympy.Max(x, sympy.nsimplify(min))
    if max is not None:
        x = sympy.Min(x, sympy.nsimplify(max))
    return x


FUNCTIONS: dict[str, Function] = {f.name: f for f in (
    Function("sqrt", sympy.sqrt, 1, 1, sympy.Pow, "", ("sqrt", "rsqrt")),
    Function("log", sympy.log, 1, 1, sympy.log, "argument", ("log",)),
    Function("exp", sympy.exp, 1, 1, sympy.exp, "", ("exp",)),
    Function("abs", sympy.Abs, 1, 1, sympy.Abs, "", ("abs", "sign")),
    Function("min", sympy.Min, 2, None, sympy.Min, "", ("minimum", "clamp", "sign")),
    Function("max", sympy.Max, 2, None, sympy.Max, "", ("maximum", "clamp", "sign")),
    # K x K helpers: the index resolver (language/matrix.py) builds their nodes.
    Function("sum", None, 2, None, sympy.Sum, "", (), matrix_only=True),
    Function("row", None, 1, 1, sympy.Sum, "", (), matrix_only=True),
    Function("col", None, 1, 1, sympy.Sum, "", (), matrix_only=True),
    Function("present", Present, 1, 1, Present, "", (), matrix_only=True),
    Function("delta", sympy.KroneckerDelta, 2, 2, sympy.KroneckerDelta, "", (), matrix_only=True),
)}

#: Functions only a K x K formula may call.
MATRIX_FUNCTIONS = tuple(n for n, f in FUNCTIONS.items() if f.matrix_only)
#: Nodes whose argument the eps guards shift by ``eps`` (``log(x) -> log(x + eps)``).
ARGUMENT_GUARDED: tuple[type, ...] = tuple(f.node for f in FUNCTIONS.values()
                                           if f.guard == "argument" and f.node is not None)

TORCH_CALLS: dict[str, TorchCall] = {c.name: c for c in (
    TorchCall("sqrt", sympy.sqrt, math.sqrt),
    TorchCall("rsqrt", lambda x: 1 / sympy.sqrt(x), lambda x: 1.0 / math.sqrt(x)),
    TorchCall("log", sympy.log, math.log),
    TorchCall("exp", sympy.exp, math.exp),
    TorchCall("abs", sympy.Abs, abs),
    TorchCall("sign", sympy.sign, lambda x: float((x > 0) - (x < 0))),  # 0 for NaN, as torch
    TorchCall("maximum", sympy.Max, _host_maximum),
    TorchCall("minimum", sympy.Min, _host_minimum),
    TorchCall("clamp", _sympy_clamp, _host_clamp),
    TorchCall("where", lambda c, a, b: sympy.Piecewise((a, c), (b, True)),
              lambda c, a, b: a if c else b),
    TorchCall("zeros_like", lambda x: sympy.Integer(0), lambda x: 0.0),
    TorchCall("ones_like", lambda x: sympy.Integer(1), lambda x: 1.0),
    # The runtime's relaxations call sigmoid (verify runs their source on symbols too).
    TorchCall("sigmoid", lambda x: 1 / (1 + sympy.exp(-x)), None),
)}

#: Tensor methods the K x K kernels call on ``C`` (``C.new_zeros(())``: a 0-d zero on
#: C's device and dtype), with their SymPy stand-in.
KERNEL_METHODS: dict[str, Callable[..., Any]] = {"new_zeros": lambda *shape: sympy.Integer(0)}


def sympy_torch() -> Any:
    """A ``torch`` stand-in whose functions act on SymPy expressions (kernels run on symbols).

    >>> x = sympy.Symbol("x")
    >>> sympy_torch().clamp(x, min=0)
    Max(0, x)
    """
    import types

    return types.SimpleNamespace(**{n: c.sympy for n, c in TORCH_CALLS.items()})


def lambdify_torch() -> dict[str, Callable[..., Any]]:
    """A ``sympy.lambdify`` module mapping each node of the language to torch, float64.

    Constants (``sqrt(2)`` of a weight) reach these as Python numbers, so each argument
    becomes a tensor; lambdify prints Min/Max as the builtins ``min``/``max`` (which pick
    one tensor), so those fold elementwise.

    >>> import torch
    >>> lambdify_torch()["sqrt"](4)
    tensor(2., dtype=torch.float64)
    """
    import torch

    def tensor(x: Any) -> Any:
        return torch.as_tensor(x, dtype=torch.float64)

    def each(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *a: fn(*(tensor(v) for v in a))

    def fold(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *a: functools.reduce(fn, (tensor(v) for v in a))

    return {"sqrt": each(torch.sqrt), "log": each(torch.log), "exp": each(torch.exp),
            "Abs": each(torch.abs), "sign": each(torch.sign), "min": fold(torch.minimum),
            "max": fold(torch.maximum), "Present": each(lambda v: (v > 0).to(v.dtype)),
            "KroneckerDelta": lambda i, j: tensor(float(i == j))}


def mpmath_functions() -> dict[str, Callable[..., Any]]:
    """Stand-ins for the language's own nodes that mpmath lacks (``Present``), for the
    30-digit evaluators of :mod:`metricc.analysis.budget`."""
    return {"Present": lambda x: 1 if x > 0 else 0}
