"""Stage 3 for groups: resolved group expressions -> two torch kernels that work for every G.

``group_value(TP, FP, FN, TN, eps, tau)`` takes the counts of ``G`` groups, each of shape
``(G,)``, and returns the eps-guarded relaxed values ``(J,)``: the metric, then each
constraint's violation; ``group_and_gradient`` also returns ``dV/dTP ... dV/dTN`` of shape
``(J, G)``. Inside, ``TPa FPa FNa TNa`` are the overall counts (sums over groups); each
reduction's local formula ``f{j}`` is one vectorised expression over the groups, reduced by
the runtime's smooth maximum / minimum (``grp_reduce``, ``tau``); a group where the local
formula is undefined (a denominator ``<= eps``) takes no part. No Python loop over groups.
"""

from __future__ import annotations

import sympy

from ..analysis.groups import TAU, GroupForms, LocalTerm, group_forms, local_term
from ..language.groups import VsRest
from ..language.symbols import COUNTS, EPS
from .printer import assignments

__all__ = ["GROUP_KERNEL_NAMES", "emit_group_kernels"]

#: The kernels' names; both take ``(TP, FP, FN, TN, eps, tau)``.
GROUP_KERNEL_NAMES = ("group_value", "group_and_gradient")
_ARGS = "TP, FP, FN, TN, eps, tau"
_C = tuple(COUNTS)
#: The overall counts in the outer expressions, and each group's "rest" (the other groups).
_ALL = {s: sympy.Symbol(f"{s.name}a") for s in COUNTS.values()}
_REST = {s: sympy.Symbol(f"{s.name}r") for s in COUNTS.values()}


def _assignments(outputs: list[tuple[str, sympy.Expr]], prefix: str, anchor: str) -> list[str]:
    """The group kernels' lines (:func:`metricc.emit.printer.assignments`) over their names."""
    allowed = {*_C, *(s.name for s in _ALL.values()), *(s.name for s in _REST.values()), EPS.name,
               TAU.name, *(f"r{j}" for j in range(len(outputs) + 64))}
    return assignments(outputs, prefix, anchor, allowed, "the group formula")


def _locals(forms: GroupForms, terms: list[LocalTerm], gradient: bool) -> list[str]:
    """Each reduction's ``f{j}`` (and partials ``p{j}_tp ...``), its validity ``ok{j}`` and its
    value ``r{j}`` with weights ``w{j} = dr_j/df_j`` (``q{j}`` on the rest for ``vsrest``)."""
    outputs: list[tuple[str, sympy.Expr]] = []
    for j, (node, t) in enumerate(zip(forms.nodes, terms, strict=True)):
        places = [("", {})] + ([("x", _REST)] if isinstance(node, VsRest) else [])
        for tag, subs in places:
            outputs.append((f"f{j}{tag}", t.f.xreplace(subs)))
            outputs += [(f"d{j}{tag}_{k}", d.xreplace(subs)) for k, d in enumerate(t.denominators)]
            if gradient:
                outputs += [(f"p{j}{tag}_{c.lower()}", d.xreplace(subs))
                            for c, d in zip(_C, t.partials, strict=True)]
    lines = [f"    {c}r = {c}a - {c}" for c in _C] if any(isinstance(n, VsRest) for n in forms.nodes) else []
    lines += _assignments(outputs, "v", "TP")
    for j, (node, t) in enumerate(zip(forms.nodes, terms, strict=True)):
        ok = " & ".join(f"(d{j}_{k} > eps)" for k in range(len(t.denominators))) or "TP == TP"
        if isinstance(node, VsRest):
            okx = " & ".join(f"(d{j}x_{k} > eps)" for k in range(len(t.denominators))) or "TP == TP"
            lines += [f"    ok{j} = {ok} & {okx}",
                      f"    r{j}, w{j} = grp_reduce('{node.keyword}', f{j} - f{j}x, ok{j}, tau, eps)"]
        else:
            lines += [f"    ok{j} = {ok}",
                      f"    r{j}, w{j} = grp_reduce('{node.keyword}', f{j}, ok{j}, tau, eps)"]
    return lines


def _gradient(forms: GroupForms, terms: list[LocalTerm]) -> list[str]:
    """``dTP ... dTN`` ``(J, G)``: each output's ``dh/dr_j`` times the reduction's weights times
    the local partials, plus ``dh/dc`` at the overall counts (which every group's counts move)."""
    lines = []
    for c in _C:
        rows = []
        for i in range(len(forms.values)):
            parts = [f"a{i}_{c.lower()}"]
            for j, node in enumerate(forms.nodes):
                parts.append(f"h{i}_{j}*w{j}*p{j}_{c.lower()}")
                if isinstance(node, VsRest):
                    # u_h = f(rest_h) moves with every other group's counts: sum_h - own term
                    lines.append(f"    z{i}_{j}_{c.lower()} = -h{i}_{j}*w{j}*p{j}x_{c.lower()}")
                    parts.append(f"(torch.sum(z{i}_{j}_{c.lower()}, -1) - z{i}_{j}_{c.lower()})")
            rows.append("torch.zeros_like(TP) + " + " + ".join(parts))
        lines.append(f"    d{c} = torch.stack([{', '.join(rows)}], 0)")
    return lines


def _kernel(name: str, doc: str, forms: GroupForms, terms: list[LocalTerm], gradient: bool) -> str:
    lines = [f"def {name}({_ARGS}):", f'    """{doc}"""',
             *(f"    {c}a = torch.sum({c}, -1)" for c in _C)]
    lines += _locals(forms, terms, gradient)
    outer: list[tuple[str, sympy.Expr]] = []
    for i, value in enumerate(forms.values):
        outer.append((f"value{i}", value.xreplace(_ALL)))
        if gradient:
            outer += [(f"h{i}_{j}", p.xreplace(_ALL)) for j, p in enumerate(forms.reduction_partials[i])]
            outer += [(f"a{i}_{c.lower()}", p.xreplace(_ALL))
                      for c, p in zip(_C, forms.count_partials[i], strict=True)]
    lines += _assignments(outer, "x", "TPa")
    lines.append(f"    value = torch.stack([{', '.join(f'value{i}' for i in range(len(forms.values)))}], 0)")
    if gradient:
        lines += _gradient(forms, terms)
    lines.append("    return value, dTP, dFP, dFN, dTN" if gradient else "    return value")
    return "\n".join(lines) + "\n"


def emit_group_kernels(expr: sympy.Expr | sympy.Tuple, matrix_params: tuple[str, ...] = ()) -> str:
    """Torch source of ``group_value`` and ``group_and_gradient`` for resolved group expressions
    whose parameters have values: one expression, or a ``sympy.Tuple`` of the metric then each
    constraint's violation (``GroupMetric.kernel_exprs``). ``matrix_params`` (none for groups)
    keeps one signature for every statistic's kernel writer.

    >>> from metricc.language.parse import parse
    >>> print(emit_group_kernels(parse("gap(recall)").expr).splitlines()[0])
    def group_value(TP, FP, FN, TN, eps, tau):
    """
    exprs = tuple(expr) if isinstance(expr, sympy.Tuple) else (expr,)
    forms = group_forms(exprs, EPS)
    terms = [local_term(node, EPS) for node in forms.nodes]
    value = _kernel(GROUP_KERNEL_NAMES[0], "The relaxed group metric (and constraint violations), "
                    "guarded by eps.", forms, terms, gradient=False)
    both = _kernel(GROUP_KERNEL_NAMES[1], "The relaxed values and their gradients d value / d "
                   "TP ... d value / d TN per group, guarded by eps.", forms, terms, gradient=True)
    return value + "\n\n" + both
