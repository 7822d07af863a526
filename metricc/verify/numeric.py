"""Numeric checks shared by every statistic, in float64: a loss against a plain reference
implementation (differentiated by autograd) and against central finite differences.

Tolerances scale with the quantities compared: a value or gradient agrees to ``1e-9`` /
``1e-7`` of its own size, and finite differences are trusted only as far as they resolve
at the loss's magnitude (a loss of 1e19 changes by nothing measurable under a step of 1e-6).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import sympy
from sympy.printing.lambdarepr import LambdaPrinter

from ..language.functions import lambdify_torch
from .report import Check, VerificationReport

__all__ = ["against_reference", "finite_difference_check", "reference_lambdify"]

#: Step of the central differences, on inputs of size ~1.
STEP = 1e-6
#: float64 rounding of one operation.
ULP = 2.0**-52


class _ReferencePrinter(LambdaPrinter):
    """Integers past 2**53 as floats: a Python int above 2**63 times a tensor overflows."""

    def _print_Integer(self, expr: sympy.Integer) -> str:
        return str(int(expr)) if abs(expr) <= 2**53 else repr(float(expr))

    def _print_Rational(self, expr: sympy.Rational) -> str:
        if abs(expr.p) <= 2**53 and expr.q <= 2**53:
            return f"{expr.p}/{expr.q}"
        return repr(float(expr))


def reference_lambdify(symbols: Sequence[sympy.Symbol], expr: sympy.Expr) -> Callable[..., Any]:
    """SymPy's own ``lambdify`` of ``expr`` on float64 tensors, through the function table.

    >>> import torch
    >>> x = sympy.Symbol("x")
    >>> reference_lambdify([x], 10**30 * sympy.sqrt(x))(torch.tensor(4.0, dtype=torch.float64))
    tensor(2.0000e+30, dtype=torch.float64)
    """
    return sympy.lambdify(list(symbols), expr, modules=[lambdify_torch(), "math"],  # type: ignore[no-any-return]
                          printer=_ReferencePrinter({"fully_qualified_modules": False, "inline": True,
                                                     "allow_unknown_functions": True, "user_functions": {},
                                                     # unsorted terms: sorting a 200-term sum for
                                                     # display was most of the printing time
                                                     "order": "none"}),
                          docstring_limit=0)  # as metricc.analysis.budget.evaluator


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    """``a == b`` to ``rtol`` of their size plus ``atol`` times the tensor's largest
    magnitude (at least 1): a gradient entry near 0 beside entries of 1e12 rounds at 1e-4,
    and values near 0 (1e-20 against 0) are compared absolutely, not relatively."""
    import torch

    scale = torch.maximum(a.abs(), b.abs())
    floor = max(float(scale.max()) if scale.numel() else 0.0, 1.0)
    tol = rtol * scale + atol * floor
    return bool(torch.isfinite(a).all() and torch.isfinite(b).all() and ((a - b).abs() <= tol).all())


def finite_difference_check(name: str, fn: Callable[[Any], Any], x0: Any, grad: Any,
                            elements: int | None = None) -> Check:
    """``grad`` (of ``fn`` at ``x0``) against central differences of ``fn``, to what they
    resolve: ``1e-4`` of the gradient's size, plus the rounding of ``fn`` at its magnitude
    divided by the step (``gradcheck``'s fixed ``atol`` reports a loss of 1e19 FAILED).
    ``elements``: only the first that many entries of ``x0`` (two loss evaluations each)."""
    import torch

    with torch.no_grad():
        base = x0.detach().clone()
        flat = base.view(-1)
        count = flat.numel() if elements is None else min(elements, flat.numel())
        numeric = torch.empty_like(flat[:count])
        magnitude = abs(float(fn(base)))
        for i in range(count):
            old = float(flat[i])
            flat[i] = old + STEP
            hi = float(fn(base))
            flat[i] = old - STEP
            lo = float(fn(base))
            flat[i] = old
            magnitude = max(magnitude, abs(hi), abs(lo))
            numeric[i] = (hi - lo) / (2 * STEP)
    g = grad.detach().reshape(-1)[:count]
    resolution = 64 * ULP * magnitude / STEP  # rounding of fn, a few dozen ops deep
    tol = 1e-4 * g.abs() + 1e-5 * max(float(g.abs().max()), 1.0) + resolution
    worst = float((numeric - g).abs().max())
    ok = bool(torch.isfinite(numeric).all() and ((numeric - g).abs() <= tol).all())
    at = "" if count == flat.numel() else f" at the first {count} of {flat.numel()} elements"
    how = f"central differences{at}, step {STEP:g}, float64; max difference {worst:.2e}"
    if resolution > float(g.abs().max()):
        how += (f" (at a loss of {magnitude:.3g} they resolve gradients only to "
                f"{resolution:.2g}: this check says little)")
    return Check(f"{name}: gradient == finite differences", ok, how)


def against_reference(report: VerificationReport, label: str, make_module: Any, x0: Any,
                      target: Any, reference: Any, where: str,
                      finite_differences: tuple[str, ...] = ("symbolic", "autograd"),
                      constant: bool = False, elements: int | None = None,
                      backwards: tuple[str, ...] = ("symbolic", "autograd")) -> None:
    """The loss of each backward mode (``make_module(backward)``) at ``x0`` against a plain
    implementation's (``reference(x, target)``, differentiated by autograd): value and
    gradient, then the gradient of the modes in ``finite_differences`` against central
    differences, all in float64. ``constant``: the metric ignores the predictions, so the
    gradient must be exactly 0 (finite differences of it would measure rounding).
    ``label`` has a ``{backward}`` field; ``elements`` as in :func:`finite_difference_check`;
    ``backwards``: the modes the loss has (a curve loss has only the symbolic one).
    ``make_module`` must not warn (``warn_monotonicity=False``: verify() checks gradients of
    any formula, wise as a loss or not): a ``warnings.catch_warnings`` here was process state
    that threads verifying at once left changed.
    """
    import torch

    xr = x0.clone().requires_grad_(True)
    ref_value = reference(xr, target)
    (ref_grad,) = torch.autograd.grad(ref_value, xr)
    for backward in backwards:
        name = label.format(backward=backward)
        module = make_module(backward)
        x = x0.clone().requires_grad_(True)
        value = module(x, target)
        (grad,) = torch.autograd.grad(value, x)
        close = (_close(value.detach(), ref_value.detach(), 1e-9, 1e-12)
                 and _close(grad, ref_grad, 1e-7, 1e-10))
        worst = float((grad - ref_grad).abs().max())
        report.checks.append(Check(f"{name}: loss and gradient == autograd of a plain "
                                   "implementation", close,
                                   f"max |grad difference| {worst:.2e} ({where})"))
        if backward not in finite_differences:
            continue
        if constant:
            report.checks.append(Check(
                f"{name}: gradient == finite differences", bool((grad == 0).all()),
                "the metric does not depend on the predictions (P and N only): the "
                "gradient is exactly zero; finite differences of it measure rounding"))
            continue
        report.checks.append(finite_difference_check(
            name, functools.partial(_call, module, target=target), x0, grad, elements))


def _call(module: Any, t: Any, target: Any) -> Any:
    """``module(t, target)``: the loss as a function of its input alone, for finite differences."""
    return module(t, target)
