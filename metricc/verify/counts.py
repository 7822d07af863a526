"""``verify()`` for 2x2 metrics: what the confusion counts change in the shared harness.

Symbolic: the generated ``metric_and_coefficients`` run on SymPy symbols
(:mod:`metricc.verify.proofs`) equals SymPy's guarded metric and its two backward
coefficients; the registered relaxations are checked by :mod:`metricc.verify.relaxations`.
Numeric, in float64 (:mod:`metricc.verify.numeric`): each relaxation's loss against
autograd of a plain implementation (four sums, SymPy's ``lambdify``) and finite
differences, multiclass class-wise losses likewise, and the kernel's float twin.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sympy

from ..analysis.budget import PROOF_SECONDS, evaluate, evaluator, limit
from ..analysis.counts import guard
from ..analysis.size import derivative, rename
from ..errors import MetricError
from ..language.parse import parse
from ..language.symbols import COUNTS, EPS, FROM_NONNEGATIVE, TO_NONNEGATIVE
from ..runtime.relax import OPTION_DEFAULTS
from .numeric import against_reference, reference_lambdify
from .proofs import equal_as_printed, run_symbolically, symbolic_equal, undecided_torch
from .relaxations import class_checks, relaxation_cases, relaxation_checks
from .report import Check, VerificationReport, finish

__all__ = ["Check", "CountsSubject", "VerificationReport", "symbolic_equal", "verify_counts"]

#: Generated kernels longer than this (characters) are finite-differenced at FD_ELEMENTS elements.
FD_KERNEL_CHARS = 4000
FD_ELEMENTS = 8


@dataclass(frozen=True)
class CountsSubject:
    """What the 2x2 checks need: data, not the facade.

    ``loss(relaxation, **options)`` builds the metric's loss module; ``constant``: the
    metric ignores the predictions (its gradient must be exactly 0).
    """

    expr: sympy.Expr
    kernels_source: str
    parameters: Mapping[str, float]
    higher_is_better: bool
    loss: Callable[..., Any]
    constant: bool = False


def _symbolic_kernel_checks(metric: CountsSubject, report: VerificationReport, seed: int) -> None:
    tp, fp, fn, tn = COUNTS.values()
    value, g1, g0 = run_symbolically(metric.kernels_source, "metric_and_coefficients",
                                     tp, fp, fn, tn, EPS, namespace={"torch": undecided_torch()})
    f = guard(metric.expr, EPS)
    # Counts are nonnegative reals: differentiated as such, |TP - FP|' is sign(TP - FP)
    # (over complex symbols it keeps Derivative(re(...)) terms that no evaluator prints).
    f_nn = rename(f, TO_NONNEGATIVE)

    def d(count: sympy.Symbol) -> sympy.Expr:
        # the emitter's own diff where it differentiated this guarded formula (the same answer)
        return rename(derivative(f_nn, TO_NONNEGATIVE[count]), FROM_NONNEGATIVE)

    expected = {
        "generated metric_value == guarded metric": (value, f),
        "generated g1 == d/dTP - d/dFN": (g1, d(tp) - d(fn)),
        "generated g0 == d/dFP - d/dTN": (g0, d(fp) - d(tn)),
    }
    for name, (got, want) in expected.items():
        ok, how, cex = equal_as_printed(got, want, seed)
        report.checks.append(Check(name, ok, how, cex))


def _user_derivative_checks(metric: CountsSubject, derivatives: Mapping[str, str],
                            report: VerificationReport, seed: int) -> None:
    params = {sympy.Symbol(k): sympy.nsimplify(v) for k, v in metric.parameters.items()}
    for count, text in derivatives.items():
        if count not in COUNTS:
            raise MetricError(f"derivatives keys must be TP, FP, FN or TN, got {count!r}")
        if not isinstance(text, str):
            raise MetricError(f"the derivative for {count} must be formula text, got {text!r}")
        user = parse(text)
        extra = [p for p in user.parameters if sympy.Symbol(p) not in params]
        if extra:
            raise MetricError(f"the derivative for {count} uses unknown names {extra}")
        got = user.expr.xreplace(params)
        want = sympy.diff(metric.expr, COUNTS[count])
        ok, how, cex = symbolic_equal(got, want, seed)
        if not ok and cex is not None:
            order = [COUNTS[k] for k in cex]
            at = [sympy.nsimplify(v) for v in cex.values()]
            yours, true = (evaluate(evaluator(e, order), at) for e in (got, want))
            how = (f"not equal: yours gives {_real(yours)}, "
                   f"d metric/d{count} is {_real(true)}")
        report.checks.append(Check(f"your d/d{count} == d metric/d{count}", ok, how, cex))


def _real(v: complex | None) -> str:
    return "undefined" if v is None else f"{v.real:.6g}"


def _reference_loss(metric: CountsSubject, relax: Any, eps: float, from_logits: bool) -> Any:
    """A straightforward autograd implementation, independent of the generated code.

    ``relax`` is the relaxation's plain ``value`` (checked against its
    derivative symbolically); the counts are four plain sums and the metric
    SymPy's own ``lambdify`` of the guarded formula.
    """
    import torch

    fn_metric = _guarded_lambdify(metric.expr, eps)

    def sigmoid(z: Any) -> Any:
        # Written out: autograd then differentiates exp, exact where torch.sigmoid's
        # a * (1 - a) loses digits.
        return 1 / (1 + torch.exp(-z))

    def loss(x: Any, y: Any) -> Any:
        value = fn_metric(*_plain_counts(y, relax(x, from_logits, sigmoid=sigmoid)))
        return 1 - value if metric.higher_is_better else value

    return loss


def _plain_counts(y: Any, a: Any, *dims: Any) -> tuple[Any, Any, Any, Any]:
    """``(TP, FP, FN, TN)`` of soft predictions ``a`` as four plain sums (over ``dims``, else all)."""
    return (y * a).sum(*dims), ((1 - y) * a).sum(*dims), (y * (1 - a)).sum(*dims), ((1 - y) * (1 - a)).sum(*dims)


@functools.lru_cache(maxsize=8)
def _guarded_lambdify(expr: sympy.Expr, eps: float) -> Any:
    """SymPy's own ``lambdify`` of the guarded formula, on float64 tensors."""
    # Once per formula, not once per relaxation: 0.2 s each for a min() of named metrics.
    f = guard(expr, EPS).xreplace({EPS: sympy.Float(eps)})
    return reference_lambdify(list(COUNTS.values()), f)


def _numeric_checks(metric: CountsSubject, report: VerificationReport, seed: int, size: int,
                    amplifier: float) -> None:
    import torch

    gen = torch.Generator().manual_seed(seed)
    y = (torch.rand(size, generator=gen, dtype=torch.float64) < 0.4).to(torch.float64)
    y[0], y[1] = 1.0, 0.0
    probs = torch.rand(size, generator=gen, dtype=torch.float64) * 0.9 + 0.05
    logits = torch.randn(size, generator=gen, dtype=torch.float64) * 2
    eps = 1e-7
    # Each relaxation once, on probabilities where it takes them, else on logits.
    cases: dict[str, tuple[Any, bool]] = {}
    for name, r, from_logits in relaxation_cases():
        if not r.class_wise:  # checked on (N, C, *) inputs by _class_numeric_checks
            cases.setdefault(name, (r, from_logits))
    from ..runtime.relax import bound_relaxation

    # Every element's gradient is g1 or g0 of the same counts times its relaxation's slope:
    # a long kernel (a 200-line binding chain: 1 s of loss evaluations) is differenced at
    # the first FD_ELEMENTS elements, both labels among them; all are compared with autograd.
    elements = FD_ELEMENTS if len(metric.kernels_source) > FD_KERNEL_CHARS else None
    for relaxation, (r, from_logits) in cases.items():
        own = {"amplifier": amplifier} if "amplifier" in r.options else {}  # loss() refuses others'
        against_reference(
            report, f"{relaxation}/{{backward}}",
            lambda b, rel=relaxation, fl=from_logits, kw=own: metric.loss(
                rel, backward=b, eps=eps, from_logits=fl, warn_monotonicity=False, **kw),
            logits if from_logits else probs, y,
            _reference_loss(metric, bound_relaxation(relaxation, from_logits, {"amplifier": amplifier}).value,
                            eps, from_logits),
            f"float64, {size} elements", elements=elements)


def _host_twin_check(metric: CountsSubject, report: VerificationReport, seed: int,
                     points: int = 40) -> None:
    """The kernel's float twin (what a one-row loss runs on the CPU) == the tensor kernel,
    at random and degenerate counts: equal where torch's values are finite, handing over
    (``None``) where they are not."""
    import math

    import torch

    from ..runtime.symbolic import host_values

    cls = type(metric.loss(warn_monotonicity=False))
    name = "float twin == tensor kernel (one-row losses on the CPU)"
    twin = cls._host_coefficients
    if twin is None:
        report.checks.append(Check(name, True, "no twin (a function without a float "
                                   "counterpart): the loss runs the tensor kernel"))
        return
    rng = random.Random(seed)
    cases = [(0.0, 0.0, 0.0, 0.0), (0.0, 0.0, 3.0, 5.0), (3.0, 0.0, 0.0, 5.0), (2.0, 1.0, 0.0, 0.0)]
    for _ in range(points):
        tp, fp, fn, tn = (float(rng.choice([0, rng.randint(1, 60), rng.random() * 1e4])) for _ in range(4))
        cases.append((tp, fp, fn, tn))
    handed_over = 0
    for counts in cases:
        for eps in (1e-7, 0.0):
            want = [float(torch.zeros(1, dtype=torch.float64) + v) for v in
                    cls.metric_and_coefficients(*(torch.tensor([c], dtype=torch.float64)
                                                  for c in counts), eps)]
            got = host_values(twin, counts, eps)
            finite = all(math.isfinite(v) for v in want)
            # The same operations in IEEE double; a power or exp may round differently in
            # the last bit, which cancellation in a kernel can carry up to the output's
            # small terms: so 1e-12 relative, or of the largest output, or of 1/n (the size
            # of a partial of a metric of order 1: near a root, e.g. mcc - cohen_kappa, every
            # output is cancellation noise of that size).
            scale = [abs(v) for v in want if math.isfinite(v)] + [1 / max(sum(counts), 1.0)]
            tol = 1e-12 * max(scale)
            # A hand-over where torch is finite (Python raises on 1e300**2, torch gives inf
            # and then 0) only costs speed: the loss runs the tensor kernel there.
            handed_over += got is None and finite
            ok = (got is None) if not finite else got is None or all(
                math.isclose(a, b, rel_tol=1e-12, abs_tol=tol)
                for a, b in zip(got, want, strict=True))
            if not ok:
                report.checks.append(Check(name, False, f"twin {got} against {want} at eps={eps}",
                                           dict(zip(("TP", "FP", "FN", "TN"), counts, strict=True))))
                return
    extra = f"; handed over to the tensor kernel at {handed_over}" if handed_over else ""
    report.checks.append(Check(name, True, f"equal at {len(cases)} counts, eps 1e-7 and 0{extra}"))


def _class_numeric_checks(metric: CountsSubject, report: VerificationReport, seed: int,
                          temperature: float = 0.5) -> None:
    """Class-wise relaxations in multiclass losses, float64: symbolic backward = autograd of a
    plain implementation (the relaxation's definition, per-class sums, macro mean) =
    finite differences."""
    import torch

    from ..runtime.relax import RELAXATIONS

    gen = torch.Generator().manual_seed(seed)
    n, c, m = 2, 3, 2
    target = torch.randint(0, c, (n, m), generator=gen)
    target.view(-1)[:c] = torch.arange(c)  # every class present: the macro mean is plain
    onehot = torch.nn.functional.one_hot(target, c).permute(0, 2, 1).to(torch.float64)
    logits = torch.randn(n, c, m, generator=gen, dtype=torch.float64) * 2
    eps = 1e-7
    fn_metric = _guarded_lambdify(metric.expr, eps)
    constant = metric.constant
    for name, r in RELAXATIONS.items():
        if not r.class_wise:
            continue
        for from_logits in (True, False):
            x0 = logits if from_logits else torch.softmax(logits, 1)

            def reference(x: Any, _target: Any, fl: bool = from_logits) -> Any:
                q = torch.exp(x / temperature) if fl else x ** (1 / temperature)
                a = q / q.sum(1, keepdim=True)  # the definition, differentiated by autograd
                value = fn_metric(*_plain_counts(onehot, a, (0, 2))).mean()
                return 1 - value if metric.higher_is_better else value

            # the autograd backward equals the reference: finite differences check the
            # symbolic one (small inputs keep gradcheck's full mode cheap)
            against_reference(
                report, f"{name}/{{backward}} (multiclass, from_logits={from_logits})",
                lambda b, rel=name, fl=from_logits: metric.loss(
                    rel, mode="multiclass", temperature=temperature, from_logits=fl,
                    backward=b, eps=eps, warn_monotonicity=False),
                x0, target, reference, f"float64, {n}x{c}x{m}",
                finite_differences=("symbolic",), constant=constant)


def verify_counts(metric: CountsSubject, derivatives: Mapping[str, str] | None = None, *,
                  seed: int = 0, size: int = 24, amplifier: float = OPTION_DEFAULTS["amplifier"], numeric: bool = True,
                  raise_on_failure: bool = True) -> VerificationReport:
    """Run every check on a 2x2 metric given as data; see :meth:`metricc.Metric.verify`."""
    report = VerificationReport()
    with limit(2 * PROOF_SECONDS):  # proofs past it are skipped; the checks still run
        if derivatives:
            _user_derivative_checks(metric, derivatives, report, seed)
        _symbolic_kernel_checks(metric, report, seed)
        relaxation_checks(report)
        class_checks(report, seed)
    if numeric:
        _numeric_checks(metric, report, seed, size, amplifier)
        _host_twin_check(metric, report, seed)
        _class_numeric_checks(metric, report, seed)
    return finish(report, raise_on_failure)
