"""The shortcuts that keep verify() and check() of min()/max() formulas fast prove the same things.

``rename`` (symbol swaps without re-deciding min/max), the undecided Min/Max stand-ins
verify() runs kernels with, and the two-evaluator comparison: same results as the slow
paths, and a wrong kernel still fails (benchmarks/bench_hardening.py measures the speed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sympy

import metricc
from metricc.analysis.counts import guard
from metricc.analysis.size import rename
from metricc.language.symbols import COUNTS, EPS, FROM_NONNEGATIVE, TO_NONNEGATIVE, TO_POSITIVE
from metricc.verify.proofs import run_symbolically, symbolic_equal, undecided_torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_hardening import wide_min

FORMULAS = ["min(mcc, f1, g_mean, cohen_kappa)", wide_min(4), "max(TP, FN)/n + abs(TP - FP)/n",
            "min(precision, recall) * sqrt(TP)"]


@pytest.mark.parametrize("formula", FORMULAS)
def test_rename_is_xreplace(formula: str) -> None:
    """On the guarded partials (what check, loss and verify swap back and forth) both
    directions give the very expression xreplace gives."""
    f = rename(guard(metricc.compile(formula).expr, EPS), TO_NONNEGATIVE)
    assert f == guard(metricc.compile(formula).expr, EPS).xreplace(TO_NONNEGATIVE)
    for count in ("TP", "FP"):
        d = sympy.diff(f, TO_NONNEGATIVE[COUNTS[count]])
        plain = rename(d, FROM_NONNEGATIVE)
        assert plain == d.xreplace(FROM_NONNEGATIVE)
        assert rename(plain, TO_POSITIVE) == plain.xreplace(TO_POSITIVE)


def test_rename_does_not_compare_min_arguments_again(monkeypatch: pytest.MonkeyPatch) -> None:
    d = sympy.diff(rename(metricc.compile(wide_min(5)).expr, TO_NONNEGATIVE), TO_NONNEGATIVE[COUNTS["TP"]])
    calls = []
    original = sympy.Min._find_localzeros.__func__  # type: ignore[attr-defined]

    def counting(cls: type, values: object, **options: object) -> object:
        calls.append(1)
        return original(cls, values, **options)

    monkeypatch.setattr(sympy.Min, "_find_localzeros", classmethod(counting))
    assert rename(d, FROM_NONNEGATIVE).has(sympy.Min)
    assert not calls
    d.xreplace(FROM_NONNEGATIVE)  # the slow path it replaces does compare them
    assert calls


def test_rename_still_uses_the_new_assumptions() -> None:
    x, p = sympy.Symbol("x"), sympy.Symbol("p", positive=True)
    out = rename(sympy.Min(x, 1 / x) + abs(x) + sympy.sign(x), {x: p})
    assert out == p + 1 + sympy.Min(p, 1 / p)
    assert out.has(sympy.Min) and not out.has(sympy.Abs, sympy.sign)


def test_undecided_kernels_have_the_same_values() -> None:
    m = metricc.compile("min(mcc, f1, g_mean, cohen_kappa)")
    args = (*COUNTS.values(), EPS)
    fast = run_symbolically(m.kernels_source, "metric_and_coefficients", *args,
                            namespace={"torch": undecided_torch()})
    slow = run_symbolically(m.kernels_source, "metric_and_coefficients", *args)
    for a, b in zip(fast, slow, strict=True):
        assert a.has(sympy.Min)
        assert symbolic_equal(a, b)[0]


@pytest.mark.parametrize(("old", "new", "check"), [
    ("value = torch.minimum(torch.minimum(", "value = torch.maximum(torch.minimum(", "generated metric_value"),
    ("x12 = ((torch.sign(-x3 + torch.minimum(", "x12 = ((torch.sign(-x3 + torch.maximum(", "generated g1"),
])
def test_a_wrong_min_kernel_still_fails(old: str, new: str, check: str) -> None:
    """A min() that should be a max(), in the value or in one branch selector of g1."""
    m = metricc.compile("min(precision, recall, 2*f1)")
    m2 = metricc.Metric(m.formula, {}, None, True)
    m2._kernels_source = m.kernels_source.replace(old, new)
    assert m2._kernels_source != m.kernels_source
    failed = [c.name for c in m2.verify(raise_on_failure=False, numeric=False).failures]
    assert any(name.startswith(check) for name in failed), failed


def test_differences_below_float64_resolution_are_found() -> None:
    """The difference of the two sides is taken at 30 digits, not after rounding each to float64."""
    tp, fp = COUNTS["TP"], COUNTS["FP"]
    assert 0.5 + 1e-18 == 0.5  # float64 values of the two sides would be equal
    ok, how, cex = symbolic_equal(tp / (tp + fp) + sympy.Rational(1, 10**18), tp / (tp + fp))
    assert (ok, how) == (False, "differs") and cex is not None
    assert symbolic_equal(tp / (tp + fp) + 0, 1 - fp / (tp + fp))[0]


def test_finite_differences_at_the_first_elements() -> None:
    """Long kernels are differenced at a few elements: a wrong entry there still fails."""
    import torch

    from metricc.verify.numeric import finite_difference_check

    x0 = torch.linspace(0.1, 0.9, 24, dtype=torch.float64)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x**3).sum()

    good = 3 * x0**2
    check = finite_difference_check("cube", fn, x0, good, elements=8)
    assert check.ok and "first 8 of 24 elements" in check.how
    bad = good.clone()
    bad[5] *= 1.01
    assert not finite_difference_check("cube", fn, x0, bad, elements=8).ok
    assert finite_difference_check("cube", fn, x0, good).ok


def test_long_kernels_are_differenced_at_both_labels() -> None:
    from bench_hardening import chain

    from metricc.verify.counts import FD_KERNEL_CHARS

    m = metricc.compile(chain(75))
    assert len(m.kernels_source) > FD_KERNEL_CHARS
    report = m.verify(raise_on_failure=False)
    fd = [c for c in report.checks if "finite differences" in c.name and "multiclass" not in c.name]
    assert report.ok and fd and all("first 8 of 24 elements" in c.how for c in fd)
