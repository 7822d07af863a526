"""verify() answers without raw errors and without false failures (issue 26 point 2), and
``metricc check`` of the issue 24 regressions exits cleanly."""

from __future__ import annotations

import pytest
import sympy

import metricc
from metricc.cli import main
from metricc.runtime.relax import RELAXATIONS
from metricc.verify.numeric import finite_difference_check
from metricc.verify.proofs import as_printed, symbolic_equal

KAPPA = "1 - n * sum(i, j, W[i,j] * C[i,j]) / sum(i, j, W[i,j] * row(i) * col(j))"


@pytest.mark.parametrize(("formula", "params"), [
    ("TP/(TP + 1e20*FP)", {}),  # OverflowError: a Python int above 2^63 times a tensor
    ("1e150*TP/(1e150*TP + FP)", {}),  # and 30 digits cannot see FP beside 1e150*TP
    ("TP/(TP+b*FP)", {"b": 1e300}),  # the float twin hands over where 1e300**2 overflows
    ("(TP-N)^9 - P", {}),  # finite differences: loss 1e12, gradient entries near 0
    ("TP/(TP+FP) + 1e19", {}),  # finite differences cannot resolve a gradient at 1e19
    ("1e-20*TP/(TP+FP)", {}),  # values near 1e-20
    ("TP/(TP+FP)*0.1", {}),
    # the kernel writes e and e - 1 as float64 literals, each rounded: x**e/x and x**(e-1)
    # then agree to float64's precision, not to 30 digits (it was reported FAILED)
    ("(TP/(TP+FP))^0.1234567890123456789012345678901234567891", {}),
])
def test_extreme_constants_verify(formula: str, params: dict[str, float]) -> None:
    report = metricc.compile(formula, **params).verify()
    assert report.ok
    # each relaxation, in both backward modes
    assert sum("finite differences" in c.name for c in report.checks) == 2 * len(RELAXATIONS)


def test_kxk_weight_with_huge_integers_verifies() -> None:
    report = metricc.compile(KAPPA, W="((i-j)^2+1)^30").verify(sizes=(2,))
    assert report.ok


def test_relative_comparison_still_catches_small_differences() -> None:
    tp = sympy.Symbol("TP")
    assert symbolic_equal(1e-25 * tp, 1e-25 * tp)[0]
    ok, how, cex = symbolic_equal(1e-25 * tp / (tp + 1), 1.0000001e-25 * tp / (tp + 1))
    assert not ok and how == "differs" and cex is not None


def test_rounded_constants_are_compared_at_float64_precision_only() -> None:
    from metricc.verify.proofs import ROUNDED_RELATIVE

    x = sympy.Symbol("TP")
    e = sympy.Rational(repr(0.12345678901234568))
    rounded_apart = (x**e / x, x ** sympy.Rational(repr(float(e - 1))))  # as the kernel prints
    assert not symbolic_equal(*rounded_apart)[0]  # 30 digits see the two roundings
    assert symbolic_equal(*rounded_apart, relative=ROUNDED_RELATIVE)[0]
    ok, how, _ = symbolic_equal(x**e / x, 1.000001 * x ** (e - 1), relative=ROUNDED_RELATIVE)
    assert not ok and how == "differs"  # a real difference still shows


def test_as_printed_rounds_only_what_the_printer_rounds() -> None:
    x = sympy.Symbol("x")
    assert as_printed(3 * x + sympy.Rational(1, 3)) == 3 * x + sympy.Rational(1, 3)
    assert as_printed(sympy.Integer(2**60) * x) == sympy.Integer(1152921504606847000) * x


def test_finite_differences_still_catch_a_wrong_gradient() -> None:
    import torch

    x0 = torch.tensor([0.2, 0.7], dtype=torch.float64)
    right = finite_difference_check("f", lambda t: (t**2).sum(), x0, 2 * x0)
    wrong = finite_difference_check("f", lambda t: (t**2).sum(), x0, 2.01 * x0)
    assert right.ok and not wrong.ok
    # at a loss of 1e19 the differences say nothing, and the report says so
    flat = finite_difference_check("f", lambda t: (t**2).sum() + 1e19, x0, 2 * x0)
    assert flat.ok and "says little" in flat.how


def test_a_wrong_kernel_still_fails() -> None:
    m = metricc.compile("1e150*TP/(1e150*TP + FP)")
    m._kernels_source = m.kernels_source.replace("g1 = 1e+150*", "g1 = 1.0000001e+150*")
    assert "1.0000001e+150" in m.kernels_source
    report = m.verify(numeric=False, raise_on_failure=False)
    assert not report.ok


@pytest.mark.parametrize("formula", ["multiclass_balanced_accuracy", "min(sum(i, C[i,i]) / n, 0.9)"])
def test_metricc_check_of_issue_24_regressions(formula: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", formula]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert "verification passed" in captured.out
