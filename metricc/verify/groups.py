"""``verify()`` of a group metric: the generated gradient proved, the loss's gradient compared.

Symbolically: the generated ``group_and_gradient`` is run on SymPy symbols ``TP_0 .. TP_{G-1},
FP_0 ..`` for ``G = 2`` and ``3`` groups (the function table's stand-ins, as for the curve,
plus :func:`smooth_reduce` for the runtime's ``grp_reduce``) and each of its ``J x 4 x G``
partials and ``J`` values is compared with SymPy's derivative of the guarded metric written out
over the groups (:func:`expanded`) by the equality every statistic uses
(:func:`metricc.verify.proofs.symbolic_equal`: exact random points to 30 digits, then a proof in
the bounded worker). The smooth reductions (``tau * logsumexp(f / tau)`` and its mirror) are
written out in SymPy there, and their weights ``dR/df_g`` are SymPy's derivatives of them, so
the proof covers the kernel's chain rule (local partials, outer partials, the overall counts and
``vsrest``'s rest of the groups) but not the runtime's own ``grp_reduce``, which is torch: that
is compared with the written-out reductions in float64 (value and weights, with groups masked
out and with none left), and the kernel's value with the written-out metric at random counts.
Numerically, in float64 (:mod:`metricc.verify.numeric`): the loss's value and gradient w.r.t.
the scores equal autograd of a plain implementation (the relaxation, counts by a one-hot or
membership matrix product, the value kernel, the augmented Lagrangian written out) and central
finite differences, with hard group ids and sample weights, and with soft memberships.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import sympy

from ..analysis.budget import PROOF_SECONDS, limit
from ..analysis.counts import guard, undefined_where
from ..analysis.groups import TAU, group_forms
from ..language.groups import GroupReduction, VsRest
from ..language.symbols import COUNTS, EPS
from . import proofs
from .curve import curve_torch
from .numeric import against_reference
from .report import Check, VerificationReport, finish

__all__ = ["expanded", "group_torch", "prove_gradient", "run_symbolically", "smooth_reduce",
           "verify_groups"]

_C = tuple(COUNTS.values())


def smooth_reduce(kind: str, f: list[sympy.Expr], tau: sympy.Expr, eps: sympy.Expr) -> sympy.Expr:
    """The reduction ``kind`` of the values ``f`` (one per group) as the runtime documents it:
    the smooth maximum ``tau * log(sum exp(f / tau))``, the minimum its mirror, ``gap`` their
    difference, ``ratio`` the minimum over ``maximum + eps``, ``groupmean`` the mean, ``vsrest``
    the smooth maximum of ``+-f`` (``f`` the differences to the rest).

    >>> x, y, t = sympy.symbols("x y t", positive=True)
    >>> smooth_reduce("groupmax", [x, y], t, sympy.S.Zero)
    t*log(exp(x/t) + exp(y/t))
    """
    def top(v: list[sympy.Expr]) -> sympy.Expr:
        return tau * sympy.log(sum(sympy.exp(x / tau) for x in v))  # type: ignore[no-any-return]

    low = -top([-x for x in f])
    values = {"gap": lambda: top(f) - low, "ratio": lambda: low / (top(f) + eps), "worst": lambda: low,
              "groupmax": lambda: top(f), "groupmean": lambda: sum(f) / len(f),
              "vsrest": lambda: top([*f, *(-x for x in f)])}
    if kind not in values:  # pragma: no cover - every reduction is one of these
        raise ValueError(f"internal: unknown group reduction {kind!r}")
    return values[kind]()  # type: ignore[no-any-return]


def _symbolic_grp_reduce(kind: str, f: np.ndarray, ok: Any, tau: Any, eps: Any) -> tuple[Any, Any]:
    """``grp_reduce`` on a batch of one ``(1, G)`` of SymPy expressions: the value of
    :func:`smooth_reduce` and its weights ``dR/df_g`` by SymPy's ``diff``. On positive symbols
    every group's denominators exceed ``eps``, so ``ok`` masks nothing (the mask is checked
    numerically)."""
    del ok
    xs = sympy.symbols(f"f_0:{f.shape[-1]}", real=True)
    r = smooth_reduce(kind, list(xs), tau, eps)
    at = dict(zip(xs, f[0], strict=True))
    weights = [sympy.diff(r, x).xreplace(at) for x in xs]
    return np.array([r.xreplace(at)], dtype=object), np.array([weights], dtype=object)


def group_torch() -> SimpleNamespace:
    """``torch`` for group kernels on numpy object arrays of SymPy expressions: the curve's
    (the function table's stand-ins, ``sum``) and ``stack``."""
    return SimpleNamespace(**vars(curve_torch()), stack=lambda xs, dim: np.stack(xs, axis=dim))


class _SymbolicMasks(ast.NodeTransformer):
    """``a > b`` (and ``==``) in a kernel as ``_mask(a, b)``: SymPy relations element by element
    (numpy asks ``bool()`` of each, which a relation between symbols refuses)."""

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        call = ast.Call(ast.Name("_mask", ast.Load()), [node.left, node.comparators[-1]], [])
        return ast.copy_location(call, node)


def _mask(a: Any, b: Any) -> np.ndarray:
    return np.vectorize(lambda x, y: sympy.Gt(x, y, evaluate=False), otypes=[object])(a, b)


def run_symbolically(source: str, *args: Any) -> tuple[Any, ...]:
    """``group_and_gradient`` of generated ``source`` run on object arrays ``(1, G)`` of SymPy
    expressions."""
    tree = _SymbolicMasks().visit(ast.parse(source))
    text = ast.unparse(ast.fix_missing_locations(tree))
    namespace = {"torch": group_torch(), "grp_reduce": _symbolic_grp_reduce, "_mask": _mask}
    return proofs.run_symbolically(text, "group_and_gradient", *args,  # type: ignore[no-any-return]
                                   namespace=namespace)


def expanded(exprs: tuple[sympy.Expr, ...], counts: list[list[Any]], eps: sympy.Expr,
             tau: sympy.Expr, left_out: Callable[[GroupReduction, int], bool] | None = None
             ) -> list[sympy.Expr]:
    """Each guarded expression (the metric, then each constraint's violation) as one plain SymPy
    expression over ``counts[c][g]`` (``c`` in ``TP FP FN TN``): every reduction's guarded local
    formula at each group's counts (``vsrest``: minus the same at the other groups' counts),
    reduced by :func:`smooth_reduce` over the groups not ``left_out(node, g)`` (none left: 0), in
    the outer expression guarded as the kernel's (:func:`metricc.analysis.groups.group_forms`,
    the one outer guard) at the overall counts."""
    forms = group_forms(exprs, eps)
    G = len(counts[0])
    totals = [sum(row) for row in counts]

    def reduce(node: GroupReduction) -> sympy.Expr:
        values = [local(node, g) for g in range(G) if left_out is None or not left_out(node, g)]
        return smooth_reduce(node.keyword, values, tau, eps) if values else sympy.S.Zero

    def local(node: GroupReduction, g: int) -> sympy.Expr:
        f = guard(node.args[0], eps)
        own = f.xreplace({c: counts[i][g] for i, c in enumerate(_C)})
        if not isinstance(node, VsRest):
            return own  # type: ignore[no-any-return]
        return own - f.xreplace({c: totals[i] - counts[i][g] for i, c in enumerate(_C)})  # type: ignore[no-any-return]

    reduced = {s: reduce(node) for s, node in zip(forms.symbols, forms.nodes, strict=True)}
    overall = dict(zip(_C, totals, strict=True))
    return [v.xreplace({**reduced, **overall}) for v in forms.values]


def _symbols(G: int) -> list[list[sympy.Symbol]]:
    # counts are nonnegative reals: |x|' is sign(x) (over complex symbols, Derivative(re(...)) terms)
    return [list(sympy.symbols(f"{c.name}_0:{G}", nonnegative=True)) for c in _C]


def prove_gradient(exprs: tuple[sympy.Expr, ...], source: str, G: int, seed: int = 0) -> tuple[bool, str]:
    """Whether the values and gradients of ``source`` equal SymPy's for ``G`` groups:
    ``(ok, how)``, by :func:`metricc.verify.proofs.symbolic_equal` (exact random points, then a
    proof within the time budget, in the bounded worker)."""
    counts = _symbols(G)
    try:
        value, *grads = run_symbolically(source, *(np.array([row], dtype=object) for row in counts), EPS, TAU)
    except Exception as e:  # a broken kernel is a failed check, not a crash of verify()
        return False, f"G={G}: the kernel did not run on symbols: {type(e).__name__}: {e}"
    want = expanded(exprs, counts, EPS, TAU)
    pairs = []
    for i, w in enumerate(want):
        pairs.append((f"value {i}", value[i][0], w))
        pairs += [(f"d value {i}/d{s}", grads[c][i][0][g], sympy.diff(w, s))
                  for c, row in enumerate(counts) for g, s in enumerate(row)]
    failure, hows = proofs.first_difference(pairs, seed + G)
    if failure is not None:
        return False, f"G={G}: {failure}"
    return True, f"{len(pairs) - len(want)} partials and {len(want)} values (G={G}): " + "; ".join(sorted(hows))


def _reduce_check(kinds: set[str], seed: int) -> Check:
    """The runtime's ``grp_reduce`` against :func:`smooth_reduce` and SymPy's weights, float64:
    at random values of three groups, with one group masked out, at two temperatures; with no
    group left, value and weights 0."""
    import torch

    from ..runtime.groups import grp_reduce

    rng = np.random.default_rng(seed)
    xs = sympy.symbols("f_0:3", real=True)
    tau_s = sympy.Symbol("tau", positive=True)
    worst = 0.0
    for kind in sorted(kinds):
        for tau in (0.25, 0.02):
            f = rng.uniform(-0.2, 1.0, 3)
            for ok in ([True, True, True], [True, False, True]):
                kept = [i for i in range(3) if ok[i]]
                r = smooth_reduce(kind, [xs[i] for i in kept], tau_s, EPS)
                point = {**{xs[i]: sympy.Float(f[i], 30) for i in kept}, tau_s: sympy.Float(tau, 30),
                         EPS: sympy.Float(1e-7, 30)}
                want = [float(r.evalf(30, subs=point))]
                want += [float(sympy.diff(r, xs[i]).evalf(30, subs=point)) if ok[i] else 0.0 for i in range(3)]
                got_r, got_w = grp_reduce(kind, torch.tensor(f, dtype=torch.float64), torch.tensor(ok), tau, 1e-7)
                got = [float(got_r), *got_w.tolist()]
                scale = max(1.0, *map(abs, want))
                worst = max(worst, max(abs(a - b) for a, b in zip(got, want, strict=True)) / scale)
        none_r, none_w = grp_reduce(kind, torch.tensor([0.3, 0.6]), torch.tensor([False, False]), 0.1, 1e-7)
        if float(none_r) != 0.0 or bool(none_w.ne(0).any()):
            return Check("grp_reduce == the written-out reductions", False,
                         f"{kind}: with no group defined, value {float(none_r)} and weights "
                         f"{none_w.tolist()} (want 0)")
    return Check("grp_reduce == the written-out reductions (float64)", worst < 1e-10,
                 f"{', '.join(sorted(kinds))}: value and weights dR/df at 3 groups, one masked out, "
                 f"tau 0.25 and 0.02: max relative difference {worst:.2e}; none defined: 0")


def _undefined_in(c: np.ndarray, eps: float) -> Callable[[GroupReduction, int], bool]:
    """Whether a reduction's local formula is undefined in group ``g`` at counts ``c`` ``(4, G)``
    (a denominator ``<= eps``; ``vsrest``: also at the other groups' counts): the groups that
    take no part (:data:`metricc.analysis.groups.LocalTerm.denominators`)."""
    def left_out(node: GroupReduction, g: int) -> bool:
        places = [c[:, g]] + ([c.sum(1) - c[:, g]] if isinstance(node, VsRest) else [])
        return any(float(d.xreplace(dict(zip(_C, map(sympy.Float, at), strict=True)))) <= eps
                   for d in undefined_where(node.args[0]) for at in places)

    return left_out


def _value_check(exprs: tuple[sympy.Expr, ...], loss_class: Any, seed: int) -> Check:
    """The runtime's ``group_value`` (torch, its ``grp_reduce`` and the kernel's mask) against
    :func:`expanded` evaluated to 30 digits: at random counts of three groups, and with a group
    without samples (undefined, so left out, where a local formula has a denominator)."""
    import torch

    rng = np.random.default_rng(seed)
    empty = rng.uniform(0.5, 20.0, (4, 3))
    empty[:, 2] = 0.0
    worst = 0.0
    for c, tau in ((rng.uniform(0.5, 20.0, (4, 3)), 0.3), (rng.uniform(0.5, 20.0, (4, 3)), 0.01), (empty, 0.05)):
        want = expanded(exprs, c.tolist(), EPS, TAU, _undefined_in(c, 1e-7))
        point = {EPS: sympy.Float(1e-7, 30), TAU: sympy.Float(tau, 30)}
        ref = [float(w.evalf(30, subs=point)) for w in want]
        got = loss_class.group_value(*torch.tensor(c, dtype=torch.float64), 1e-7, tau).tolist()
        for a, b in zip(got, ref, strict=True):
            worst = max(worst, abs(a - b) / max(1.0, abs(b)) if math.isfinite(a) else math.inf)
    return Check("group_value == the written-out metric (float64)", worst < 1e-9,
                 f"3 groups at random counts (tau 0.3, 0.01) and with one group empty (tau 0.05): "
                 f"max relative difference {worst:.2e}")


def _plain_loss(loss: Any, higher: bool) -> Callable[..., Any]:
    """The loss written out plainly: relaxation, counts by a membership product, the value
    kernel (autograd through it and the runtime's ``grp_reduce``), the augmented Lagrangian."""
    import torch

    def plain(x: Any, y: Any, membership: Any, w: Any) -> Any:
        p = torch.sigmoid(x) if loss.from_logits else x
        a = torch.sigmoid(loss.relax.amplifier * (p - 0.5)) if loss.relaxation == "anyloss" else p
        pos, neg = w * y, w * (1 - y)
        parts = torch.stack([pos * a, neg * a, pos * (1 - a), neg * (1 - a)], -1)
        c = membership.transpose(0, 1) @ parts
        v = loss.group_value(*c.unbind(-1), loss.eps, loss.tau)
        out = 1 - v[0] if higher else v[0]
        lam, rho = loss.multipliers, loss.penalty
        for j in range(1, v.shape[0]):
            t = lam[j - 1] + rho * v[j]
            on = lam[j - 1] * v[j] + 0.5 * rho * v[j] ** 2
            out = out + (on if t >= 0 else -lam[j - 1] ** 2 / (2 * rho))
        return out

    return plain


def _numeric_checks(loss_class: Any, report: VerificationReport, seed: int, size: int) -> None:
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.arange(size) % 3
    y = (torch.rand(size, generator=gen) < 0.5).to(torch.float64)
    y[:3], y[3:6] = 1.0, 0.0
    y[ids == 2] = 0.0  # a group without positives: its recall takes no part
    w = torch.rand(size, generator=gen, dtype=torch.float64) + 0.5
    soft = torch.rand(size, 3, generator=gen, dtype=torch.float64) + 0.1
    soft = soft / soft.sum(1, keepdim=True)
    cases = (("hard group ids, a group without positives, sample weights", ids,
              torch.nn.functional.one_hot(ids, 3).to(torch.float64), w,
              {"relaxation": "anyloss", "amplifier": 4.0, "from_logits": True, "tau": 0.05},
              torch.randn(size, generator=gen, dtype=torch.float64) + y),
             ("soft memberships", soft, soft, torch.ones(size, dtype=torch.float64),
              {"relaxation": "linear", "from_logits": False},
              0.1 + 0.8 * torch.rand(size, generator=gen, dtype=torch.float64)))
    for where, groups, membership, weight, opts, x0 in cases:
        loss = loss_class(num_groups=3, **opts).eval()  # eval: the multipliers do not step
        if loss.multipliers.numel():  # a live Lagrangian term
            loss.multipliers.fill_(0.7)
        plain = _plain_loss(loss, loss_class.higher_is_better)

        def module(_backward: str, loss: Any = loss, groups: Any = groups, weight: Any = weight) -> Any:
            return lambda x, t: loss(x, t, groups, weight)

        against_reference(report, f"{opts['relaxation']}, {where}", module, x0, y,
                          lambda x, t, m=membership, w=weight, plain=plain: plain(x, t, m, w),
                          f"float64, N={size}, G=3", finite_differences=("symbolic",),
                          backwards=("symbolic",))


def verify_groups(exprs: sympy.Tuple, kernels_source: str, loss_class: Any, label: str, *,
                  seed: int = 0, size: int = 12, sizes: tuple[int, ...] = (2, 3), numeric: bool = True,
                  raise_on_failure: bool = True) -> VerificationReport:
    """Run every check on a group metric (its resolved expressions: the metric, then each
    constraint's violation; its generated kernels and loss class); raise
    :class:`VerificationError` on a failure.

    >>> import metricc
    >>> metricc.compile("gap(recall)").verify().ok
    True
    """
    exprs_t = tuple(exprs)
    report = VerificationReport()
    with limit(2 * PROOF_SECONDS):  # proofs past it are skipped; the checks still run
        for G in sizes:
            ok, how = prove_gradient(exprs_t, kernels_source, G, seed)
            report.checks.append(Check(f"{label}: generated gradient = SymPy derivative (G={G})", ok, how))
    if numeric:
        kinds = {n.keyword for e in exprs_t for n in e.atoms(GroupReduction)}
        report.checks.append(_reduce_check(kinds, seed))
        try:
            report.checks.append(_value_check(exprs_t, loss_class, seed))
            _numeric_checks(loss_class, report, seed, size)
        except Exception as e:  # a loss whose kernels raise is a failed check, not a crash
            report.checks.append(Check(f"{label}: the loss and its kernels run in float64", False,
                                       f"{type(e).__name__}: {e}"))
    return finish(report, raise_on_failure)
