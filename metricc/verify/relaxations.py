"""Symbolic checks of the registered relaxations (:data:`metricc.runtime.relax.RELAXATIONS`),
read through the registry and each relaxation's public methods only.

Elementwise ones: their source's ``value`` differentiated by SymPy equals their
``derivative``. Class-wise ones (``softmax``): ``class_value`` is the definition and
``class_vjp`` SymPy's Jacobian of it. Neither depends on the metric.
"""

from __future__ import annotations

import inspect
import textwrap
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import sympy

from ..errors import MetricError
from ..language.functions import sympy_torch
from .proofs import run_symbolically, symbolic_equal
from .report import Check, VerificationReport

__all__ = ["class_checks", "relaxation_cases", "relaxation_checks"]


class _Score(sympy.Symbol):
    """A symbolic score tensor; ``relax`` asks whether autograd will differentiate it."""

    requires_grad = False


def relaxation_cases() -> Iterator[tuple[str, Any, bool]]:
    """``(name, relaxation, from_logits)`` for every registered relaxation and input kind."""
    from ..runtime.relax import RELAXATIONS

    for name, r in RELAXATIONS.items():
        for from_logits in (False, True):
            try:
                r.check_options(from_logits)
            except MetricError:
                continue
            yield name, r, from_logits


def relaxation_checks(report: VerificationReport) -> None:
    """Each elementwise relaxation's derivative is SymPy's derivative of its value."""
    s = _Score("s", real=True)
    for relaxation, r, from_logits in relaxation_cases():
        if r.class_wise:  # their elementwise part is Linear's; see class_checks
            continue
        src = "\n".join(textwrap.dedent(inspect.getsource(getattr(type(r), fn)))
                        for fn in ("value", "derivative"))
        # the relaxation holding SymPy symbols for its options (see Relaxation's docstring)
        args = (type(r)(**{o: sympy.Symbol(o, real=True) for o in r.options}), s, from_logits)
        a = run_symbolically(src, "value", *args)
        da = run_symbolically(src, "derivative", *args)
        diff = sympy.diff(a, s) - da
        # cancel() proves most (rational in s and exp(s)) in a tenth of simplify()'s time.
        proof = "cancel" if sympy.cancel(diff) == 0 else "simplify"
        diff = sympy.simplify(diff) if proof == "simplify" else sympy.Integer(0)
        ok = diff == 0
        report.checks.append(Check(
            f"relax_grad == d relax/ds ({relaxation}, from_logits={from_logits})", ok,
            f"proved equal ({proof})" if ok else f"difference {diff}",
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

    return SimpleNamespace(**vars(sympy_torch()), softmax=softmax)


_PASSED: dict[int, tuple[Check, ...]] = {}
_PASSED_LOCK = threading.Lock()


def class_checks(report: VerificationReport, seed: int) -> None:
    """The class-wise relaxations' checks (:func:`_class_checks`), kept for the process once
    they all pass: a failure is never kept, so the next ``verify()`` runs them again."""
    with _PASSED_LOCK:  # threads verifying at once wait for one run rather than repeat it
        checks = _PASSED.get(seed)
        if checks is None:
            checks = _class_checks(seed)
            if all(c.ok for c in checks) and len(_PASSED) < 4:
                _PASSED[seed] = checks
    report.checks.extend(checks)


def _class_checks(seed: int, classes: int = 3) -> tuple[Check, ...]:
    """Class-wise relaxations (``softmax``): their forward is the definition, and their
    backward (``class_vjp``) is SymPy's Jacobian of it, on ``classes`` symbols.

    They do not depend on the metric, so :func:`class_checks` keeps them once passed (about 5 s).
    """
    from ..runtime.relax import RELAXATIONS

    checks: list[Check] = []
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
            a = run_symbolically(src, "class_value", x, T, from_logits,
                                 namespace={"torch": ns_torch})
            ok = all(symbolic_equal(got, want, seed)[0] for got, want in zip(a.items, definition, strict=True))
            at = "" if from_logits else ", temperature=1/3"
            checks.append(Check(f"{name} relaxation == its definition (from_logits={from_logits}{at})",
                                ok, f"{classes} classes, symbolic"))
            results = []
            for j in range(classes):
                g = _Classes([sympy.Integer(int(i == j)) for i in range(classes)])
                vjp = run_symbolically(src, "class_vjp", a, g, x, T, from_logits,
                                       namespace={"torch": ns_torch})
                for i in range(classes):
                    results.append(symbolic_equal(vjp.items[i], sympy.diff(definition[j], xs[i]), seed))
            ok = all(res[0] for res in results)
            how = ("proved equal" if all(res[1].startswith("proved") for res in results)
                   else "equal at random exact points")
            checks.append(Check(
                f"{name} backward == Jacobian of the relaxation (from_logits={from_logits}{at})", ok,
                f"{how}, {classes} classes"))
    return tuple(checks)
