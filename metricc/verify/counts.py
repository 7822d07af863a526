"""Stage 5: check a compiled metric's gradient three ways.

Symbolic: the generated kernels are executed on SymPy symbols (through a tiny
stand-in for the few ``torch`` functions they call) and compared with SymPy's
own derivatives of the metric; the same is done for every relaxation registered
in :mod:`metricc.runtime.relax`. Numeric, in float64: the loss module's gradient is
compared with autograd of an independent, straightforward implementation and
with finite differences (``torch.autograd.gradcheck``).
"""

from __future__ import annotations

import ast
import functools
import inspect
import random
import textwrap
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Protocol

import sympy

from ..analysis.budget import PROOF_SECONDS, evaluate, evaluator, limit, spent
from ..analysis.counts import guard
from ..errors import MetricError, MetricWarning, VerificationError
from ..language.parse import parse
from ..language.symbols import COUNTS, EPS, FROM_NONNEGATIVE, TO_NONNEGATIVE, TO_POSITIVE

__all__ = ["Check", "VerificationReport", "symbolic_equal", "verify"]

#: Above this size (sympy.count_ops) of a difference no symbolic proof is tried.
_MAX_PROOF_OPS = 600

class Metric(Protocol):
    """What :func:`verify` needs of a :class:`metricc.Metric` (no import of it: no cycle)."""

    @property
    def expr(self) -> sympy.Expr: ...

    @property
    def parameters(self) -> dict[str, Any]: ...

    @property
    def higher_is_better(self) -> bool: ...

    @property
    def kernels_source(self) -> str: ...

    def loss(self, relaxation: str | None = ..., *, warn_monotonicity: bool = ...,
             **options: Any) -> Any: ...


@dataclass(frozen=True)
class Check:
    """One comparison: what was compared, whether it held, and a counterexample if not."""

    name: str
    ok: bool
    how: str
    counterexample: dict[str, float] | None = None

    def __str__(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        extra = f"; counterexample {self.counterexample}" if self.counterexample else ""
        return f"[{mark}] {self.name}: {self.how}{extra}"


@dataclass
class VerificationReport:
    """All checks ``Metric.verify()`` ran; ``ok`` when every one held."""

    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def __str__(self) -> str:
        head = "verification passed" if self.ok else f"verification FAILED ({len(self.failures)})"
        return "\n".join([head, *("  " + str(c) for c in self.checks)])


def _random_point(rng: random.Random, symbols: list[sympy.Symbol]) -> dict[sympy.Symbol, Any]:
    return {s: sympy.Rational(rng.randint(1, 60), rng.randint(1, 7)) for s in symbols}


def symbolic_equal(a: sympy.Expr, b: sympy.Expr, seed: int = 0,
                   points: int = 12) -> tuple[bool, str, dict[str, float] | None]:
    """Whether ``a == b`` for all positive counts: ``(equal, how, counterexample)``.

    Evaluation to 30 digits at random rational points first (a cheap disproof
    with a counterexample), then a symbolic proof that ``a - b`` simplifies to 0,
    skipped for large differences and once the time budget
    (:func:`metricc.analysis.budget.limit`) is spent: ``cancel`` on the partials of
    ``min(mcc, f1, g_mean, cohen_kappa)`` alone took a minute.
    """
    base = a.xreplace(TO_POSITIVE)
    diff = base - b.xreplace(TO_POSITIVE)
    symbols = sorted(diff.free_symbols | base.free_symbols, key=lambda s: s.name)
    rng = random.Random(seed)
    f_diff, f_base = evaluator(diff, symbols), evaluator(base, symbols)
    for _ in range(points):
        pt = _random_point(rng, symbols)
        val = evaluate(f_diff, [pt[s] for s in symbols])
        if val is None:  # undefined or overflowing there
            continue
        ref = evaluate(f_base, [pt[s] for s in symbols])
        if abs(val) > 1e-20 * (1 + abs(ref if ref is not None else 0)):
            return False, "differs", {s.name: float(v) for s, v in pt.items()}
    sampled = f"equal at {points} random points to 30 digits"
    ops = sympy.count_ops(diff)
    if ops > _MAX_PROOF_OPS:
        return True, f"{sampled} (no proof attempted: {ops} operations)", None
    if diff.has(sympy.Min, sympy.Max, sympy.Heaviside, sympy.sign, sympy.Piecewise):
        # cancel/simplify rebuild min()/max() on every rewrite, comparing their arguments
        # pairwise: 77 s for min() of six fractions (simplify: 250 s for -(max(mcc, 6))).
        return True, f"{sampled} (no proof attempted: min/max)", None
    proofs = [sympy.cancel] + ([sympy.simplify] if ops <= 300 else [])
    for proof in proofs:
        if spent():
            return True, f"{sampled} (proof stopped at the time budget)", None
        try:
            if proof(sympy.together(diff)) == 0:
                return True, f"proved equal ({proof.__name__})", None
        except (sympy.PolynomialError, TypeError, ValueError, NotImplementedError):
            pass
    return True, f"{sampled} (no closed-form proof found)", None


def _sympy_torch() -> SimpleNamespace:
    """The functions generated code and the relaxations call, acting on SymPy expressions."""

    def sigmoid(x: sympy.Expr) -> sympy.Expr:
        return 1 / (1 + sympy.exp(-x))

    def clamp(x: sympy.Expr, min: Any = None, max: Any = None) -> sympy.Expr:
        if min is not None:
            x = sympy.Max(x, sympy.nsimplify(min))
        if max is not None:
            x = sympy.Min(x, sympy.nsimplify(max))
        return x

    return SimpleNamespace(
        sqrt=sympy.sqrt, rsqrt=lambda x: 1 / sympy.sqrt(x), abs=sympy.Abs, sign=sympy.sign,
        log=sympy.log, exp=sympy.exp, maximum=sympy.Max, minimum=sympy.Min, clamp=clamp,
        sigmoid=sigmoid, ones_like=lambda x: sympy.Integer(1), zeros_like=lambda x: sympy.Integer(0),
        real=sympy.re, imag=sympy.im, where=lambda c, a, b: sympy.Piecewise((a, c), (b, True)),
    )


class _ExactNumbers(ast.NodeTransformer):
    """Make number literals SymPy numbers, so ``1/2`` in generated code is exactly 1/2."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            return node
        kind = "Integer" if isinstance(node.value, int) else "Float"
        call = ast.Call(ast.Name("_sympy_" + kind, ast.Load()), [node], [])
        return ast.copy_location(call, node)


def _run_symbolically(source: str, fn: str, *args: Any, torch: Any = None) -> Any:
    """Execute our own generated (or runtime) source on SymPy symbols, numbers kept exact."""
    tree = ast.fix_missing_locations(_ExactNumbers().visit(ast.parse(source)))
    namespace: dict[str, Any] = {"torch": torch or _sympy_torch(), "Tensor": object, "Any": object,
                                 "staticmethod": lambda f: f,
                                 "_sympy_Integer": sympy.Integer, "_sympy_Float": sympy.Float}
    exec(compile(tree, f"<metricc verify {fn}>", "exec"), namespace)
    return namespace[fn](*args)


def _symbolic_kernel_checks(metric: Metric, report: VerificationReport, seed: int) -> None:
    tp, fp, fn, tn = COUNTS.values()
    value, g1, g0 = _run_symbolically(metric.kernels_source, "metric_and_coefficients",
                                      tp, fp, fn, tn, EPS)
    f = guard(metric.expr, EPS)
    # Counts are nonnegative reals: differentiated as such, |TP - FP|' is sign(TP - FP)
    # (over complex symbols it keeps Derivative(re(...)) terms that no evaluator prints).
    f_nn = f.xreplace(TO_NONNEGATIVE)

    def d(count: sympy.Symbol) -> sympy.Expr:
        return sympy.diff(f_nn, TO_NONNEGATIVE[count]).xreplace(FROM_NONNEGATIVE)

    expected = {
        "generated metric_value == guarded metric": (value, f),
        "generated g1 == d/dTP - d/dFN": (g1, d(tp) - d(fn)),
        "generated g0 == d/dFP - d/dTN": (g0, d(fp) - d(tn)),
    }
    for name, (got, want) in expected.items():
        ok, how, cex = symbolic_equal(got, want, seed)
        report.checks.append(Check(name, ok, how, cex))


class _Score(sympy.Symbol):
    """A symbolic score tensor; ``relax`` asks whether autograd will differentiate it."""

    requires_grad = False


def _relaxation_cases() -> Iterator[tuple[str, Any, bool]]:
    """``(name, relaxation, from_logits)`` for every registered relaxation and input kind."""
    from ..runtime.relax import RELAXATIONS

    for name, r in RELAXATIONS.items():
        for from_logits in (False, True):
            try:
                r.check_options(from_logits)
            except MetricError:
                continue
            yield name, r, from_logits


def _symbolic_relaxation_checks(report: VerificationReport) -> None:
    s = _Score("s", real=True)
    for relaxation, r, from_logits in _relaxation_cases():
        if r.class_wise:  # their elementwise part is Linear's; see _symbolic_class_checks
            continue
        src = "\n".join(textwrap.dedent(inspect.getsource(getattr(type(r), fn)))
                        for fn in ("value", "derivative"))
        # the relaxation holding SymPy symbols for its options (see Relaxation's docstring)
        args = (type(r)(**{o: sympy.Symbol(o, real=True) for o in r.options}), s, from_logits)
        a = _run_symbolically(src, "value", *args)
        da = _run_symbolically(src, "derivative", *args)
        diff = sympy.simplify(sympy.diff(a, s) - da)
        ok = diff == 0
        report.checks.append(Check(
            f"relax_grad == d relax/ds ({relaxation}, from_logits={from_logits})", ok,
            "proved equal (simplify)" if ok else f"difference {diff}",
        ))


class _Classes:
    """A ``(1, C)`` score vector of SymPy expressions, classes on dim 1, for running a
    class-wise relaxation's own source symbolically (the few tensor methods it calls)."""

    def __init__(self, items: list[sympy.Expr]) -> None:
        self.items = items

    def _zip(self, other: Any, op: Any) -> _Classes:
        rhs = other.items if isinstance(other, _Classes) else [other] * len(self.items)
        return _Classes([op(a, b) for a, b in zip(self.items, rhs, strict=True)])

    def __add__(self, o: Any) -> _Classes: return self._zip(o, lambda a, b: a + b)
    def __radd__(self, o: Any) -> _Classes: return self._zip(o, lambda a, b: b + a)
    def __sub__(self, o: Any) -> _Classes: return self._zip(o, lambda a, b: a - b)
    def __rsub__(self, o: Any) -> _Classes: return self._zip(o, lambda a, b: b - a)
    def __mul__(self, o: Any) -> _Classes: return self._zip(o, lambda a, b: a * b)
    def __rmul__(self, o: Any) -> _Classes: return self._zip(o, lambda a, b: b * a)
    def __truediv__(self, o: Any) -> _Classes: return self._zip(o, lambda a, b: a / b)
    def __rtruediv__(self, o: Any) -> _Classes: return self._zip(o, lambda a, b: b / a)
    def __neg__(self) -> _Classes: return _Classes([-a for a in self.items])

    def pow(self, e: Any) -> _Classes:
        return _Classes([a**e for a in self.items])

    def clamp_min(self, m: Any) -> _Classes:
        return _Classes([sympy.Max(a, m) for a in self.items])

    def sum(self, dim: int, keepdim: bool = False) -> _Classes:
        assert dim == 1 and keepdim
        return _Classes([sympy.Add(*self.items)] * len(self.items))

    def amax(self, dim: int, keepdim: bool = False) -> _Classes:
        assert dim == 1 and keepdim
        return _Classes([sympy.Max(*self.items)] * len(self.items))


def _class_torch() -> SimpleNamespace:
    def softmax(x: _Classes, dim: int) -> _Classes:
        e = [sympy.exp(a) for a in x.items]
        return _Classes([v / sympy.Add(*e) for v in e])

    return SimpleNamespace(**vars(_sympy_torch()), softmax=softmax)


def _symbolic_class_checks(report: VerificationReport, seed: int) -> None:
    report.checks.extend(_class_checks(seed))


@functools.lru_cache(maxsize=4)
def _class_checks(seed: int, classes: int = 3) -> tuple[Check, ...]:
    """Class-wise relaxations (``softmax``): their forward is the definition, and their
    backward (``class_vjp``) is SymPy's Jacobian of it, on ``classes`` symbols.

    They do not depend on the metric, so they run once per process (about 5 s).
    """
    from ..runtime.relax import RELAXATIONS

    report = VerificationReport()

    for name, r in RELAXATIONS.items():
        if not r.class_wise:
            continue
        src = "\n".join(textwrap.dedent(inspect.getsource(getattr(type(r), fn)))
                        for fn in ("class_value", "class_vjp"))
        for from_logits in (True, False):
            # On probabilities p^(1/T) with a symbolic T makes every comparison transcendental
            # (seconds each); T = 1/3 keeps them rational and still exercises the exponent.
            T = sympy.Symbol("temperature", positive=True) if from_logits else sympy.Rational(1, 3)
            xs = sympy.symbols(f"x0:{classes}", **({"real": True} if from_logits else {"positive": True}))
            terms = [sympy.exp(x / T) if from_logits else x ** (1 / T) for x in xs]
            definition = [t / sympy.Add(*terms) for t in terms]
            x = _Classes(list(xs))
            ns_torch = _class_torch()
            a = _run_symbolically(src, "class_value", x, T, from_logits, torch=ns_torch)
            ok = all(symbolic_equal(got, want, seed)[0] for got, want in zip(a.items, definition, strict=True))
            at = "" if from_logits else ", temperature=1/3"
            report.checks.append(Check(f"{name} relaxation == its definition (from_logits={from_logits}{at})",
                                       ok, f"{classes} classes, symbolic"))
            results = []
            for j in range(classes):
                g = _Classes([sympy.Integer(int(i == j)) for i in range(classes)])
                vjp = _run_symbolically(src, "class_vjp", a, g, x, T, from_logits, torch=ns_torch)
                for i in range(classes):
                    results.append(symbolic_equal(vjp.items[i], sympy.diff(definition[j], xs[i]), seed))
            ok = all(res[0] for res in results)
            how = ("proved equal" if all(res[1].startswith("proved") for res in results)
                   else "equal at random exact points")
            report.checks.append(Check(
                f"{name} backward == Jacobian of the relaxation (from_logits={from_logits}{at})", ok,
                f"{how}, {classes} classes"))
    return tuple(report.checks)


def _user_derivative_checks(metric: Metric, derivatives: Mapping[str, str],
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


def _reference_loss(metric: Metric, relax: Any, amplifier: float, eps: float,
                    from_logits: bool) -> Any:
    """A straightforward autograd implementation, independent of the generated code.

    ``relax`` is the relaxation's plain ``value`` (checked against its
    derivative symbolically); the counts are four plain sums and the metric
    SymPy's own ``lambdify`` of the guarded formula.
    """
    import torch

    fn_metric = _reference_metric(metric, eps)

    def sigmoid(z: Any) -> Any:
        # Written out: autograd then differentiates exp, exact where torch.sigmoid's
        # a * (1 - a) loses digits.
        return 1 / (1 + torch.exp(-z))

    def loss(x: Any, y: Any) -> Any:
        a = relax(x, from_logits, sigmoid=sigmoid)
        TP = (y * a).sum()
        FN = (y * (1 - a)).sum()
        FP = ((1 - y) * a).sum()
        TN = ((1 - y) * (1 - a)).sum()
        value = fn_metric(TP, FP, FN, TN)
        return 1 - value if metric.higher_is_better else value

    return loss


def _reference_metric(metric: Metric, eps: float) -> Any:
    """SymPy's own ``lambdify`` of the guarded formula, on float64 tensors."""
    import torch

    f = guard(metric.expr, EPS).xreplace({EPS: sympy.Float(eps)})
    tp, fp, fn, tn = COUNTS.values()

    def tensors(fn: Any) -> Any:
        # Constant subexpressions (exp(-1/2)) reach these as Python numbers.
        return lambda *a: fn(*(torch.as_tensor(v, dtype=torch.float64) for v in a))

    def fold(fn: Any) -> Any:
        # lambdify prints Min/Max as the builtins min/max, which pick one tensor.
        return lambda *a: functools.reduce(fn, (torch.as_tensor(v, dtype=torch.float64)
                                                for v in a))

    fn_metric = sympy.lambdify(
        (tp, fp, fn, tn), f,
        modules=[{"sqrt": tensors(torch.sqrt), "log": tensors(torch.log),
                  "exp": tensors(torch.exp), "Abs": tensors(torch.abs),
                  "sign": tensors(torch.sign), "min": fold(torch.minimum),
                  "max": fold(torch.maximum)}, "math"],
    )
    return fn_metric


def _against_reference(report: VerificationReport, label: str, make_module: Any, x0: Any,
                       target: Any, reference: Any, where: str,
                       finite_differences: tuple[str, ...] = ("symbolic", "autograd"),
                       constant: bool = False) -> None:
    """The loss of each backward mode (``make_module(backward)``) at ``x0`` against a plain
    implementation's (``reference(x, target)``, differentiated by autograd): value and
    gradient, then the gradient of the modes in ``finite_differences`` against
    ``gradcheck`` (full mode: its fast mode let a 1 % error through), all in float64.
    ``constant``: the metric ignores the predictions, so the gradient must be exactly 0
    (finite differences of it would measure rounding). ``label`` has a ``{backward}`` field.
    """
    import torch

    xr = x0.clone().requires_grad_(True)
    ref_value = reference(xr, target)
    (ref_grad,) = torch.autograd.grad(ref_value, xr)
    for backward in ("symbolic", "autograd"):
        name = label.format(backward=backward)
        with warnings.catch_warnings():
            # verify() checks gradients of any formula, wise as a loss or not.
            warnings.simplefilter("ignore", MetricWarning)
            module = make_module(backward)
        x = x0.clone().requires_grad_(True)
        value = module(x, target)
        (grad,) = torch.autograd.grad(value, x)
        close = (torch.allclose(value, ref_value, rtol=1e-9, atol=1e-12)
                 and torch.allclose(grad, ref_grad, rtol=1e-7, atol=1e-10))
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
        try:
            fd_ok = torch.autograd.gradcheck(lambda t, m=module: m(t, target),
                                             (x0.clone().requires_grad_(True),), eps=1e-6,
                                             atol=1e-5, rtol=1e-4, raise_exception=False)
        except RuntimeError as e:  # pragma: no cover - gradcheck internals
            fd_ok = False
            report.checks.append(Check("gradcheck error", False, str(e)))
        report.checks.append(Check(f"{name}: gradient == finite differences", bool(fd_ok),
                                   "torch.autograd.gradcheck, float64"))


def _numeric_checks(metric: Metric, report: VerificationReport, seed: int, size: int,
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
    for name, r, from_logits in _relaxation_cases():
        if not r.class_wise:  # checked on (N, C, *) inputs by _class_numeric_checks
            cases.setdefault(name, (r, from_logits))
    from ..runtime.relax import bound_relaxation

    for relaxation, (_, from_logits) in cases.items():
        _against_reference(
            report, f"{relaxation}/{{backward}}",
            lambda b, rel=relaxation, fl=from_logits: metric.loss(
                rel, backward=b, amplifier=amplifier, eps=eps, from_logits=fl),
            logits if from_logits else probs, y,
            _reference_loss(metric, bound_relaxation(relaxation, from_logits, {"amplifier": amplifier}).value,
                            amplifier, eps, from_logits),
            f"float64, {size} elements")


def _host_twin_check(metric: Metric, report: VerificationReport, seed: int,
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
    for counts in cases:
        for eps in (1e-7, 0.0):
            want = [float(torch.zeros(1, dtype=torch.float64) + v) for v in
                    cls.metric_and_coefficients(*(torch.tensor([c], dtype=torch.float64)
                                                  for c in counts), eps)]
            got = host_values(twin, counts, eps)
            finite = all(math.isfinite(v) for v in want)
            # The same operations in IEEE double; a power or exp may round differently in
            # the last bit, which cancellation in a kernel can carry up to the output's
            # small terms: so 1e-12 relative, or of the largest output.
            tol = 1e-12 * max([abs(v) for v in want if math.isfinite(v)] + [1e-300])
            ok = (got is None) if not finite else got is not None and all(
                math.isclose(a, b, rel_tol=1e-12, abs_tol=tol)
                for a, b in zip(got, want, strict=True))
            if not ok:
                report.checks.append(Check(name, False, f"twin {got} against {want} at eps={eps}",
                                           dict(zip(("TP", "FP", "FN", "TN"), counts, strict=True))))
                return
    report.checks.append(Check(name, True, f"equal at {len(cases)} counts, eps 1e-7 and 0"))


def _class_numeric_checks(metric: Metric, report: VerificationReport, seed: int,
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
    fn_metric = _reference_metric(metric, eps)
    check = getattr(metric, "check", None)
    constant = check is not None and not check().depends_on_predictions
    for name, r in RELAXATIONS.items():
        if not r.class_wise:
            continue
        for from_logits in (True, False):
            x0 = logits if from_logits else torch.softmax(logits, 1)

            def reference(x: Any, _target: Any, fl: bool = from_logits) -> Any:
                q = torch.exp(x / temperature) if fl else x ** (1 / temperature)
                a = q / q.sum(1, keepdim=True)  # the definition, differentiated by autograd
                y = onehot
                tp, fp = (y * a).sum((0, 2)), ((1 - y) * a).sum((0, 2))
                fn, tn = (y * (1 - a)).sum((0, 2)), ((1 - y) * (1 - a)).sum((0, 2))
                value = fn_metric(tp, fp, fn, tn).mean()
                return 1 - value if metric.higher_is_better else value

            # the autograd backward equals the reference: finite differences check the
            # symbolic one (small inputs keep gradcheck's full mode cheap)
            _against_reference(
                report, f"{name}/{{backward}} (multiclass, from_logits={from_logits})",
                lambda b, rel=name, fl=from_logits: metric.loss(
                    rel, mode="multiclass", temperature=temperature, from_logits=fl,
                    backward=b, eps=eps),
                x0, target, reference, f"float64, {n}x{c}x{m}",
                finite_differences=("symbolic",), constant=constant)


def verify(metric: Metric, derivatives: Mapping[str, str] | None = None, *, seed: int = 0,
           size: int = 24, amplifier: float = 73.0, numeric: bool = True,
           raise_on_failure: bool = True) -> VerificationReport:
    """Run every check on ``metric``; see :meth:`metricc.Metric.verify`."""
    report = VerificationReport()
    with limit(2 * PROOF_SECONDS):  # proofs past it are skipped; the checks still run
        if derivatives:
            _user_derivative_checks(metric, derivatives, report, seed)
        _symbolic_kernel_checks(metric, report, seed)
        _symbolic_relaxation_checks(report)
        _symbolic_class_checks(report, seed)
    if numeric:
        _numeric_checks(metric, report, seed, size, amplifier)
        _host_twin_check(metric, report, seed)
        _class_numeric_checks(metric, report, seed)
    if raise_on_failure and not report.ok:
        err = VerificationError(str(report))
        err.report = report  # type: ignore[attr-defined]
        raise err
    return report
