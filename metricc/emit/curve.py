"""Stage 3 for the curve: a resolved curve formula -> two torch kernels that work for every T.

``curve_value(TP, FP, P, N, eps, tau, tau_gate)`` takes the counts at ``T`` thresholds,
``TP, FP`` of shape ``(..., T)`` (ascending thresholds, ``k = 0`` everything positive) and the
totals ``P, N`` of shape ``(...)``, and returns the eps-guarded relaxed metric ``(...)``;
``curve_and_gradient`` also returns ``dV/dTP`` and ``dV/dFP`` ``(..., T)``. Each reduction is
vectorised over ``k`` (the slices ``[..., :-1]`` and ``[..., 1:]`` are the points ``k`` and
``k + 1``; zero padding puts ``g_cur(k) + g_next(k-1)`` in place): no Python loop over ``k``.
The source names only ``TP FP FN TN``, their slices ``TP0 TP1 ...``, ``P N eps tau tau_gate``,
the kernel's own ``r0 h0 ...`` and the ``u/v/x`` temporaries of ``sympy.cse``.
"""

from __future__ import annotations

import sympy

from ..analysis.curve import NEXT, TAU, TAU_GATE, OuterForm, PairTerm, PointTerm, local_form, outer_form
from ..language.curve import TOTALS
from ..language.symbols import COUNTS, EPS
from .printer import assignments

__all__ = ["CURVE_KERNEL_NAMES", "emit_curve_kernels"]

#: The kernels' names; both take ``(TP, FP, P, N, eps, tau, tau_gate)``.
CURVE_KERNEL_NAMES = ("curve_value", "curve_and_gradient")
_ARGS = "TP, FP, P, N, eps, tau, tau_gate"
#: The point-``k`` counts of a pair term, renamed to their ``[..., :-1]`` slices.
_CURRENT = {s: sympy.Symbol(f"{s.name}0") for s in COUNTS.values()}
_PAD = "torch.nn.functional.pad"


def _assignments(outputs: list[tuple[str, sympy.Expr]], prefix: str, anchor: str) -> list[str]:
    """The curve's kernel lines (:func:`metricc.emit.printer.assignments`) over its names."""
    allowed = {*COUNTS, *(s.name for s in _CURRENT.values()), *(s.name for s in NEXT.values()),
               *TOTALS, EPS.name, TAU.name, TAU_GATE.name, *(f"r{j}" for j in range(len(outputs) + 64))}
    return assignments(outputs, prefix, anchor, allowed, "the curve formula")


def _pairs(terms: list[tuple[int, PairTerm]], gradient: bool) -> list[str]:
    lines = [f"    {s}{n} = {s}[..., {cut}]" for s in COUNTS for n, cut in ((0, ":-1"), (1, "1:"))]
    outputs: list[tuple[str, sympy.Expr]] = []
    for j, t in terms:
        outputs.append((f"g{j}", t.term))
        if gradient:
            outputs += [(f"c{j}_tp", t.cur_tp), (f"c{j}_fp", t.cur_fp),
                        (f"n{j}_tp", t.next_tp), (f"n{j}_fp", t.next_fp)]
    lines += _assignments([(n, e.xreplace(_CURRENT)) for n, e in outputs], "u", "TP0")
    lines += [f"    r{j} = torch.sum(g{j}, -1)" for j, _ in terms]
    return lines


def _points(terms: list[tuple[int, PointTerm]], gradient: bool) -> list[str]:
    outputs: list[tuple[str, sympy.Expr]] = []
    for j, t in terms:
        outputs.append((f"f{j}", t.f))
        if t.d is not None:
            outputs.append((f"d{j}", t.d))
        if gradient:
            outputs += [(f"f{j}_tp", t.f_tp), (f"f{j}_fp", t.f_fp)]
            if t.d is not None and t.d_tp is not None and t.d_fp is not None:
                outputs += [(f"d{j}_tp", t.d_tp), (f"d{j}_fp", t.d_fp)]
    lines = _assignments(outputs, "v", "TP")
    for j, t in terms:
        a = f"f{j}"
        if t.d is not None:
            # the gated value p = k f + tau tau_gate log k, k = sigmoid(d/tau_gate): f where the
            # bound holds, about tau d (a little below 0, the exact value) where it fails
            lines += [f"    k{j} = torch.sigmoid(d{j}/tau_gate)",
                      f"    p{j} = k{j}*f{j} + tau*tau_gate*torch.nn.functional.logsigmoid(d{j}/tau_gate)"]
            a = f"p{j}"
        # R = tau log(mean_k exp(a_k/tau)): monotone in every a_k, within tau log T below the max
        lines.append(f"    r{j} = tau*(torch.logsumexp({a}/tau, -1) - "
                     f"torch.logsumexp(torch.zeros_like({a}), -1))")
        if gradient:
            lines.append(f"    w{j} = torch.softmax({a}/tau, -1)")
    return lines


def _gradient(locals_: list[PairTerm | PointTerm]) -> list[str]:
    """``dTP, dFP``: each reduction's adjoint times ``dh/dr_j`` (``h{j}``)."""
    lines: list[str] = []
    parts: dict[str, list[str]] = {"tp": [], "fp": []}
    for j, t in enumerate(locals_):
        lines.append(f"    e{j} = h{j}[..., None]")
        if isinstance(t, PairTerm):
            for c in parts:
                parts[c].append(f"e{j}*({_PAD}(c{j}_{c}, (0, 1)) + {_PAD}(n{j}_{c}, (1, 0)))")
            continue
        lines.append(f"    q{j} = e{j}*w{j}")  # dR/da_k = w_k = softmax(a/tau)_k
        if t.d is None:
            for c in parts:
                parts[c].append(f"q{j}*f{j}_{c}")
            continue
        # dp/df = k, dp/dd = (1 - k)(k f/tau_gate + tau)
        lines += [f"    z{j} = q{j}*(k{j}*f{j}/tau_gate + tau)*torch.sigmoid(-d{j}/tau_gate)",
                  f"    q{j} = q{j}*k{j}"]
        for c in parts:
            parts[c].append(f"q{j}*f{j}_{c} + z{j}*d{j}_{c}")
    for c, terms in parts.items():
        lines.append(f"    d{c.upper()} = torch.zeros_like({c.upper()}) + " + " + ".join(terms))
    return lines


def _kernel(name: str, doc: str, form: OuterForm, locals_: list[PairTerm | PointTerm],
            gradient: bool) -> str:
    lines = [f"def {name}({_ARGS}):", f'    """{doc}"""',
             "    FN = P[..., None] - TP", "    TN = N[..., None] - FP"]
    pairs = [(j, t) for j, t in enumerate(locals_) if isinstance(t, PairTerm)]
    points = [(j, t) for j, t in enumerate(locals_) if isinstance(t, PointTerm)]
    if pairs:
        lines += _pairs(pairs, gradient)
    if points:
        lines += _points(points, gradient)
    outer = [("value", form.value)]
    if gradient:
        outer += [(f"h{j}", p) for j, p in enumerate(form.partials)]
    lines += _assignments(outer, "x", "P")
    if gradient:
        lines += _gradient(locals_)
    lines.append("    return value, dTP, dFP" if gradient else "    return value")
    return "\n".join(lines) + "\n"


def emit_curve_kernels(expr: sympy.Expr, matrix_params: tuple[str, ...] = ()) -> str:
    """Torch source of ``curve_value`` and ``curve_and_gradient`` for a resolved curve formula
    whose parameters have values (``CurveFormula.expr`` with numbers substituted).

    ``tau`` is the temperature of the smooth maximum of ``best()`` (``tau log mean_k
    exp(f_k/tau)``), ``tau_gate`` that of its bound's gate ``sigmoid(d_k/tau_gate)``; formulas
    without ``best()`` ignore both. ``matrix_params`` (none for curves) keeps one signature
    for every statistic's kernel writer (``Statistic.emitter``).

    >>> from metricc.language.parse import parse
    >>> print(emit_curve_kernels(parse("auroc").expr).splitlines()[0])
    def curve_value(TP, FP, P, N, eps, tau, tau_gate):
    """
    form = outer_form(expr, EPS)
    locals_ = [local_form(node, EPS) for node in form.nodes]
    value = _kernel(CURVE_KERNEL_NAMES[0], "The relaxed curve metric, guarded by eps.", form,
                    locals_, gradient=False)
    both = _kernel(CURVE_KERNEL_NAMES[1], "The relaxed curve metric and its gradient "
                   "d value / d TP, d value / d FP, guarded by eps.", form, locals_, gradient=True)
    return value + "\n\n" + both
