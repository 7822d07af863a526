"""Issue 34, point 3: the curve and K x K statistics on the shared rules.

The curve verifier runs kernels through the function table's stand-ins, compares with the
kernel's own guard by ``symbolic_equal`` (bounded worker) and differences with
``verify.numeric``; the domain check is told each statistic's variables and refuses formulas
that are not real somewhere, for every statistic. Every formula quoted in the issue is here.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import metricc
from metricc.emit.curve import emit_curve_kernels
from metricc.language.functions import TORCH_CALLS
from metricc.language.parse import parse
from metricc.verify.curve import verify_curve

#: Curve formulas of the issue that must verify (they raised AttributeError, hung, took 86 s,
#: or were reported FAILED although their gradient equals autograd's).
VERIFIES = ["best(f1^0.343)", "area(recall^0.343, fpr^0.117649)", "best(mcc)",
            "best(min(precision, recall))", "max(auroc, best_f1)", "sqrt(auroc)", "log(auroc + 1)",
            "area(recall, fpr)^0.343", "min(auroc, 0.9)", "abs(auroc - 0.5)"]

#: Formulas of the issue (and a few more of the same kinds) that are NaN on ordinary batches:
#: refused at compile time, naming the part that is not real.
REFUSED = {
    "quadratic_kappa^0.343": ("confusion matrices", "the base 1 - sum(i, j, (-j + i)**2*C[i, j])"),
    "sqrt(multiclass_mcc)": ("confusion matrices", "the base (-sum(k, row(k)*col(k))"),
    "log(multiclass_kappa)": ("confusion matrices", "the log of a negative number"),
    "linear_kappa^0.5": ("confusion matrices", "the base 1 - sum(i, j, "),
    "(2*auroc - 1)^0.5": ("curves", "the base 2*area(TP/(FN + TP), FP/(FP + TN)) - 1 < 0"),
    "best(mcc^0.5)": ("curves", "in best(...), a negative number to a non-integer power"),
    "log(auroc - 0.5)": ("curves", "the log of a negative number"),
    "area(mcc, fpr)^0.5": ("curves", "the base area("),
    "best(recall, mcc^0.5 >= 0.1)": ("curves", "in best(...)"),
}

#: Accepted formulas of those kinds: a finite loss and gradient on every ordinary batch.
CURVE_ACCEPTED = [*VERIFIES, "abs(2*auroc - 1)^0.5", "best(((mcc + 1)/2)^0.5) + auroc"]
MATRIX_ACCEPTED = ["((quadratic_kappa + 1)/2)^0.343", "sqrt(multiclass_accuracy)", "multiclass_mcc",
                   "log(multiclass_balanced_accuracy + 1)", "abs(multiclass_kappa)^0.5"]


@pytest.mark.parametrize("formula", VERIFIES)
def test_quoted_curve_formulas_verify_within_seconds(formula: str) -> None:
    start = time.perf_counter()
    report = metricc.compile(formula).verify(raise_on_failure=False)
    took = time.perf_counter() - start
    assert report.ok, [(c.name, c.how) for c in report.checks if not c.ok]
    # the symbolic checks and the numeric ones both ran
    assert any("T=4" in c.name for c in report.checks)
    assert any("finite differences" in c.name for c in report.checks)
    # a few seconds on a quiet machine; 30 s catches a hang (docs/numerics.md section 4)
    assert took < 30, took


def test_outer_guard_is_the_kernels_in_the_reference() -> None:
    """sqrt(auroc) is sqrt(auroc + eps) in the kernel: the reference must say the same."""
    from metricc.verify.curve import prove_gradient

    for text in ("sqrt(auroc)", "log(auroc + 1)", "area(recall, fpr)^0.343"):
        expr = parse(text).expr
        ok, how = prove_gradient(expr, emit_curve_kernels(expr), 3)
        assert ok, (text, how)


def test_a_wrong_curve_kernel_still_fails() -> None:
    from metricc.verify.curve import prove_gradient

    m = metricc.compile("sqrt(auroc)")
    broken = m.kernels_source.replace("dTP = torch.zeros_like(TP) + ", "dTP = torch.zeros_like(TP) + 1.0001*", 1)
    assert broken != m.kernels_source
    ok, how = prove_gradient(m.expr, broken, 3)
    assert not ok and "differs" in how


def test_a_failing_finite_difference_check_is_a_failed_check_not_an_error() -> None:
    """The loss's gradient off by a factor: FAILED checks in the report (was AttributeError
    ``GradcheckError``)."""
    m = metricc.compile("auroc")
    good = m.loss_class

    class Broken(good):  # type: ignore[misc, valid-type]
        @staticmethod
        def curve_and_gradient(*args):  # type: ignore[no-untyped-def]
            value, d_tp, d_fp = good.curve_and_gradient(*args)
            return value, 1.5 * d_tp, d_fp

    report = verify_curve(m.expr, m.kernels_source, Broken, "auroc", sizes=(3,), raise_on_failure=False)
    failed = [c.name for c in report.checks if not c.ok]
    assert failed and all("T=" not in n for n in failed), failed
    assert any("finite differences" in n for n in failed), failed
    with pytest.raises(metricc.MetricError):
        verify_curve(m.expr, m.kernels_source, Broken, "auroc", sizes=(3,))


def test_curve_stand_in_is_the_function_table() -> None:
    """One table: every torch call of the function table is in the curve's stand-in, and a curve
    kernel calls nothing else but the curve's array operations."""
    from metricc.verify.curve import CURVE_ARRAY_CALLS, curve_torch

    ns = vars(curve_torch())
    assert set(TORCH_CALLS) <= set(ns)
    for text in [*VERIFIES, "precision_at_recall", "partial_auroc", "average_precision"]:
        source = metricc.compile(text).kernels_source
        called = set(re.findall(r"torch\.(\w+)", source))
        assert called <= set(TORCH_CALLS) | set(CURVE_ARRAY_CALLS), (text, called)


@pytest.mark.parametrize("formula", sorted(REFUSED))
def test_not_real_formulas_are_refused_at_compile_time(formula: str) -> None:
    over, part = REFUSED[formula]
    with pytest.raises(metricc.MetricError) as info:
        metricc.compile(formula)
    message = str(info.value)
    assert f"formula {formula!r} is not real for all {over}" in message, message
    assert part in message, message
    assert " < 0 at " in message  # a witness


def _curve_batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for n in (8, 64, 257):
        y = (torch.rand(n, generator=gen) < 0.3).float()
        y[:2] = torch.tensor([0.0, 1.0])
        out.append((torch.randn(n, generator=gen) * 3, y))
    return out


def _finite_loss_and_grad(loss: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    x = x.clone().requires_grad_(True)
    value = loss(x, y)
    value.backward()
    assert torch.isfinite(value).all(), value
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("formula", CURVE_ACCEPTED)
def test_accepted_curve_formulas_give_finite_losses(formula: str) -> None:
    loss = metricc.compile(formula).loss(from_logits=True, warn_monotonicity=False)
    for seed in range(3):
        for x, y in _curve_batches(seed):
            _finite_loss_and_grad(loss, x, y)


@pytest.mark.parametrize("formula", MATRIX_ACCEPTED)
def test_accepted_matrix_formulas_give_finite_losses(formula: str) -> None:
    loss = metricc.compile(formula).loss(from_logits=True, warn_monotonicity=False)
    gen = torch.Generator().manual_seed(0)
    for k in (2, 3, 5):
        for n in (4, 64):
            x = torch.randn(n, k, generator=gen) * 3
            y = torch.randint(0, k, (n,), generator=gen)
            _finite_loss_and_grad(loss, x, y)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["auroc", "average_precision", "best_f1", "partial_auroc"]),
       shift=st.sampled_from([-0.75, -0.5, -0.25, 0.0, 0.5, 1.0]),
       power=st.sampled_from(["0.5", "0.343", "1.7"]), log=st.booleans())
def test_no_accepted_curve_formula_is_nan_on_ordinary_batches(name: str, shift: float, power: str,
                                                              log: bool) -> None:
    """Either refused at compile time, or a finite loss and gradient on random batches."""
    formula = f"log({name} + {shift})" if log else f"({name} + {shift})^{power}"
    try:
        m = metricc.compile(formula)
    except metricc.MetricError as e:
        assert "is not real for all curves" in str(e)
        assert shift < 0  # refused only where the base can indeed be negative
        return
    loss = m.loss(from_logits=True, warn_monotonicity=False)
    for x, y in _curve_batches(1):
        _finite_loss_and_grad(loss, x, y)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["multiclass_mcc", "quadratic_kappa", "multiclass_accuracy"]),
       shift=st.sampled_from([-0.5, 0.0, 1.0]), power=st.sampled_from(["0.5", "0.343"]))
def test_no_accepted_matrix_formula_is_nan_on_ordinary_batches(name: str, shift: float, power: str) -> None:
    formula = f"({name} + {shift})^{power}"
    try:
        m = metricc.compile(formula)
    except metricc.MetricError as e:
        assert "is not real for all confusion matrices" in str(e)
        return
    loss = m.loss(from_logits=True, warn_monotonicity=False)
    gen = torch.Generator().manual_seed(3)
    for k in (2, 4):
        x, y = torch.randn(32, k, generator=gen) * 3, torch.randint(0, k, (32,), generator=gen)
        _finite_loss_and_grad(loss, x, y)


def test_two_by_two_domain_message_unchanged() -> None:
    with pytest.raises(metricc.MetricError, match=re.escape(
            "formula 'mcc^f1' is not real for all counts: a negative number to a non-integer power "
            "is not real, and the base")):
        metricc.compile("mcc^f1")
    assert metricc.compile("((mcc + 1)/2)^f1").expr is not None
