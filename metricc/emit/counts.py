"""Stage 3: SymPy -> PyTorch source, and the loss class that runs it.

Only validated SymPy trees reach this module; the source it writes names
nothing from the user's text (parameters were substituted by numbers, and the
only variables are ``TP FP FN TN eps`` and the ``x0, x1, ...`` of ``sympy.cse``).
:func:`build_loss_class` executes that source (and nothing else) into a
subclass of :class:`metricc.runtime.loss.MetricLoss`.
"""

from __future__ import annotations

import sympy

from ..analysis.counts import backward_coefficients, guard
from ..analysis.size import derivative, rename
from ..language.limits import check_constants
from ..language.symbols import COUNTS, EPS, FROM_NONNEGATIVE, TO_NONNEGATIVE
from .printer import MetricPrinter, check_emittable, shared_subexpressions

KERNEL_NAMES = ("metric_value", "metric_and_coefficients")
#: The kernel of second derivatives a boosting objective's Hessian reads (:mod:`metricc.boosting`).
CURVATURE_KERNEL = "metric_curvature"
_ALLOWED_NAMES = {*COUNTS, "eps"}


def _function(name: str, doc: str, outputs: list[tuple[str, sympy.Expr]]) -> str:
    printer = MetricPrinter()
    exprs = [e for _, e in outputs]
    check_emittable(exprs, _ALLOWED_NAMES, "infinite or undefined everywhere")
    temps, reduced = shared_subexpressions(exprs)
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


def emit_kernels(expr: sympy.Expr, matrix_params: tuple[str, ...] = ()) -> str:
    """Torch source of the two kernels for a metric over ``TP FP FN TN``.

    ``metric_value(TP, FP, FN, TN, eps)`` is the metric with ``eps`` added to
    every denominator, root and log (see :func:`metricc.analysis.counts.guard`);
    ``metric_and_coefficients`` also returns ``g1 = f_TP - f_FN`` and
    ``g0 = f_FP - f_TN`` of that same guarded metric, which is all the backward
    pass needs. ``matrix_params`` (none for the 2x2 counts) keeps one signature for
    every statistic's kernel writer (``Statistic.emitter``).

    >>> print(emit_kernels(sympy.sympify("TP/(TP+FP)")).splitlines()[0])
    def metric_value(TP, FP, FN, TN, eps):
    """
    # Differentiate with nonnegative counts, so |x|' is sign(x), not re/im terms.
    guarded = guard(rename(expr, TO_NONNEGATIVE), EPS)
    g1, g0 = (rename(g, FROM_NONNEGATIVE) for g in backward_coefficients(guarded, TO_NONNEGATIVE))
    guarded = rename(guarded, FROM_NONNEGATIVE)
    value = _function(KERNEL_NAMES[0], "The metric, guarded by eps.", [("value", guarded)])
    both = _function(
        KERNEL_NAMES[1],
        "The metric and its backward coefficients g1 = f_TP - f_FN, g0 = f_FP - f_TN.",
        [("value", guarded), ("g1", g1), ("g0", g0)],
    )
    return value + "\n\n" + both




def emit_curvature_kernel(expr: sympy.Expr) -> str:
    """Torch source of ``metric_curvature(TP, FP, FN, TN, eps)``: the guarded metric, its
    backward coefficients ``g1, g0`` (as :func:`emit_kernels`) and their derivatives along
    the same moves, ``h1 = d g1/d TP - d g1/d FN`` and ``h0 = d g0/d FP - d g0/d TN``
    (the second derivative of the metric as one positive's, or one negative's, soft
    prediction moves): SymPy's exact second derivatives of the guarded metric. At the kinks
    of ``abs``/``min``/``max`` the first derivative jumps; its derivative there
    (``DiracDelta``) is taken as 0, the second derivative everywhere else.

    >>> print(emit_curvature_kernel(sympy.sympify("TP/(TP+FP)")).splitlines()[0])
    def metric_curvature(TP, FP, FN, TN, eps):
    """
    guarded = guard(rename(expr, TO_NONNEGATIVE), EPS)
    g1, g0 = backward_coefficients(guarded, TO_NONNEGATIVE)
    tp, fp, fn, tn = (TO_NONNEGATIVE[s] for s in COUNTS.values())
    h1, h0 = ((derivative(g, a) - derivative(g, b)).replace(sympy.DiracDelta, lambda *_: sympy.S.Zero)
              for g, a, b in ((g1, tp, fn), (g0, fp, tn)))
    outputs = [(n, rename(e, FROM_NONNEGATIVE))
               for n, e in (("value", guarded), ("g1", g1), ("g0", g0), ("h1", h1), ("h0", h0))]
    return _function(CURVATURE_KERNEL, "The guarded metric, g1, g0 and their derivatives h1, h0.",
                     outputs)
