"""Metric.verify(): symbolic proofs, user derivatives, numeric checks, and that it can fail."""

from __future__ import annotations

import pytest

import metricc
from metricc.library import METRICS
from metricc.runtime.relax import RELAXATIONS


@pytest.mark.parametrize("name", sorted(METRICS))
def test_every_named_metric_verifies(name: str) -> None:
    report = metricc.compile(name).verify()
    assert report.ok
    names = [c.name for c in report.checks]
    assert "generated g1 == d/dTP - d/dFN" in names
    # 4 elementwise relaxations (anyloss, linear, sigmoid, self_adjusting) x 2 backward modes,
    # and softmax (symbolic backward) x 2 input kinds
    assert sum(not r.class_wise for r in RELAXATIONS.values()) == 4
    assert sum("finite differences" in n for n in names) == 10
    assert sum("plain implementation" in n for n in names) == 12  # softmax: 2 kinds x 2 modes
    proofs = [c.how for c in report.checks if c.name.startswith("generated")]
    assert all(h.startswith("proved equal") for h in proofs), proofs


def test_user_formula_verifies() -> None:
    m = metricc.compile("""
        precision = TP / (TP + FP)   # let-bindings, last line is the metric
        recall    = TP / (TP + FN)
        2 * precision * recall / (precision + recall)
    """)
    assert m.verify().ok


def test_user_derivative_equal() -> None:
    report = metricc.compile("f1").verify(derivatives={"TP": "2*(FP+FN)/(2*TP+FP+FN)^2",
                                                       "TN": "0"})
    first = report.checks[0]
    assert first.ok and first.how.startswith("proved equal")


def test_user_derivative_not_equal_gives_counterexample() -> None:
    with pytest.raises(metricc.VerificationError) as info:
        metricc.compile("f1").verify(derivatives={"FP": "2*TP/(2*TP+FP+FN)^2"})  # sign is wrong
    report = info.value.report
    bad = report.failures[0]
    assert bad.name == "your d/dFP == d metric/dFP"
    assert set(bad.counterexample) == {"TP", "FP", "FN"}
    tp, fp, fn = (bad.counterexample[k] for k in ("TP", "FP", "FN"))
    true_value = -2 * tp / (2 * tp + fp + fn) ** 2
    assert f"{true_value:.6g}" in bad.how


def test_user_derivative_errors() -> None:
    m = metricc.compile("f1")
    with pytest.raises(metricc.MetricError, match="TP, FP, FN or TN"):
        m.verify(derivatives={"XX": "1"})
    with pytest.raises(metricc.MetricSyntaxError):
        m.verify(derivatives={"TP": "2*(FP+"})


def test_verification_detects_a_wrong_kernel() -> None:
    m = metricc.compile("f1")
    m2 = metricc.Metric(m.formula, {}, None, True)
    m2._kernels_source = m.kernels_source.replace("g0 = -x0/x1**2", "g0 = x0/x1**2")
    assert m2._kernels_source != m.kernels_source
    with pytest.raises(metricc.VerificationError, match="generated g0"):
        m2.verify()


@pytest.mark.parametrize("formula", ["abs(TP - FP) / (TP + FP + FN)", "abs(TP - FN)",
                                     "sqrt(abs(TP*TN - FP*FN)) / (TP + FP + FN + TN)"])
def test_formulas_with_abs_of_a_difference_verify(formula: str) -> None:
    # The expected partials were taken over complex symbols: |TP - FP|' kept
    # Derivative(re(TP - FP), TP) terms, and verify() crashed printing them.
    report = metricc.compile(formula).verify()
    assert report.ok and any(c.name.startswith("generated g1") for c in report.checks)


def test_verify_checks_the_float_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    from metricc.runtime import symbolic

    report = metricc.compile("mcc").verify()
    twin = [c for c in report.checks if c.name.startswith("float twin")]
    assert len(twin) == 1 and twin[0].ok
    # a wrong float function (sqrt rounded to 6 digits) is caught, with the counts
    monkeypatch.setattr(symbolic.HOST_MATH, "sqrt", lambda x: round(x ** 0.5, 6))
    with pytest.raises(metricc.VerificationError, match="float twin") as info:
        metricc.compile("mcc").verify()
    failures = {c.name: c for c in info.value.report.failures}
    assert failures[twin[0].name].counterexample is not None
    # the loss checks run the twin too (one row on the CPU), and catch it as well
    assert any(name.startswith("anyloss/symbolic") for name in failures)
