"""metricc.check.check / Metric.check and the wrong-direction warning of Metric.loss()."""

from __future__ import annotations

import dataclasses
import time
import warnings

import pytest
import sympy

import metricc
from metricc.analysis.counts_check import DIRECTIONS, Monotonicity, check
from metricc.library import METRICS

INC, DEC, CONST, MIXED = "increasing", "decreasing", "constant", "mixed"
F1_LIKE = (INC, DEC, DEC, CONST)
BALANCED = (INC, DEC, DEC, INC)
ERROR_LIKE = (DEC, INC, INC, DEC)

# Worked out by hand from the formulas (order TP, FP, FN, TN), not from metricc.
KNOWN = {
    "accuracy": BALANCED,
    "balanced_accuracy": BALANCED,
    "precision": (INC, DEC, CONST, CONST),
    "recall": (INC, CONST, DEC, CONST),
    "specificity": (CONST, DEC, CONST, INC),
    "npv": (CONST, CONST, DEC, INC),
    "fpr": (CONST, INC, CONST, DEC),
    "fnr": (DEC, CONST, INC, CONST),
    "fdr": (DEC, INC, CONST, CONST),
    "f1": F1_LIKE,
    "fbeta": F1_LIKE,
    "jaccard": F1_LIKE,
    "dice": F1_LIKE,
    "tversky": F1_LIKE,
    "mcc": BALANCED,
    # kappa falls with FP while below chance with few FP, then rises back towards 0.
    "cohen_kappa": (INC, MIXED, MIXED, INC),
    "g_mean": BALANCED,
    "informedness": BALANCED,
    "markedness": BALANCED,
    "fowlkes_mallows": F1_LIKE,
    "lr_plus": BALANCED,
    "lr_minus": ERROR_LIKE,
    "diagnostic_odds_ratio": BALANCED,
    "error_rate": ERROR_LIKE,
}
COUNTS = ("TP", "FP", "FN", "TN")


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_named_metric_monotonicity_matches_hand_derivation(name: str) -> None:
    report = metricc.compile(name).check()
    got = tuple(report.monotonicity[k].direction for k in COUNTS)
    assert got == KNOWN[name]


def _finite_differences(m: metricc.Metric, count: str, n: int = 400) -> tuple[int, int]:
    """(# points where the metric rises, # where it falls) as ``count`` grows by 1e-4 relative.

    Uses the exact metric (``Metric.value``) at random counts in [0.1, 1000], float64.
    """
    import torch

    gen = torch.Generator().manual_seed(1)
    c = {k: 10 ** (torch.rand(n, generator=gen, dtype=torch.float64) * 4 - 1) for k in COUNTS}
    h = 1e-4 * c[count]
    lo = m.value(*(c[k] for k in COUNTS))
    hi = m.value(*(c[k] + (h if k == count else 0.0) for k in COUNTS))
    slope = (hi - lo) / h
    scale = 1e-6 * (lo.abs() + 1) / c[count]
    return int((slope > scale).sum()), int((slope < -scale).sum())


@pytest.mark.parametrize("name", sorted(METRICS))
def test_monotonicity_agrees_with_finite_differences(name: str) -> None:
    """An independent numerical check of every verdict, including the sampled ones."""
    m = metricc.compile(name)
    for count, mono in m.check().monotonicity.items():
        up, down = _finite_differences(m, count)
        if mono.direction == INC:
            assert down == 0, (count, up, down)
        elif mono.direction == DEC:
            assert up == 0, (count, up, down)
        elif mono.direction == CONST:
            assert up == down == 0, (count, up, down)
        elif mono.direction == MIXED:
            assert up and down, (count, up, down)


def test_kappa_is_really_non_monotone_in_fp() -> None:
    kappa = metricc.compile("cohen_kappa")
    values = [kappa.value(tp=1, fp=fp, fn=100, tn=1) for fp in (1, 50, 500)]
    assert values[0] > values[1] < values[2]


def test_symbolic_where_sympy_can_sampled_where_it_cannot() -> None:
    f1 = metricc.compile("f1").check()
    assert {m.method for m in f1.monotonicity.values()} == {"symbolic"}
    kappa = metricc.compile("cohen_kappa").check()
    assert kappa.monotonicity["FP"].method == "sampled"
    # Min of two ratios: SymPy cannot sign Heaviside terms, sampling decides.
    r = metricc.compile("min(TP/(TP+FP), TP/(TP+FN))").check()
    assert r.monotonicity["TP"] == Monotonicity("TP", INC, "sampled")
    assert r.monotonicity["FP"].direction == DEC
    assert r.monotonicity["TN"] == Monotonicity("TN", CONST, "symbolic")
    for mono in r.monotonicity.values():
        assert mono.direction in DIRECTIONS


@pytest.mark.parametrize(("name", "lower", "upper"), [
    ("f1", 0, 1), ("accuracy", 0, 1), ("precision", 0, 1), ("jaccard", 0, 1),
    ("mcc", -1, 1), ("informedness", -1, 1), ("markedness", -1, 1), ("g_mean", 0, 1),
    ("lr_plus", 0, None), ("diagnostic_odds_ratio", 0, None),
])
def test_proven_range(name: str, lower: int, upper: int | None) -> None:
    r = metricc.compile(name).check()
    assert (r.lower, r.upper) == (lower, upper)
    lo, hi = r.sampled_range
    assert lower <= lo <= hi and (upper is None or hi <= upper)


def test_undefined_sets_and_their_kinds() -> None:
    precision = metricc.compile("precision").check()
    assert [(str(s.expr), s.relation, s.kind, s.reason) for s in precision.undefined] == [
        ("FP + TP", "= 0", "undefined", "0/0")]
    assert precision.not_differentiable == ()
    g_mean = metricc.compile("g_mean").check()
    # sqrt(TP) is 0 at TP = 0, only its slope is infinite: not "undefined".
    assert {str(s.expr) for s in g_mean.undefined} == {"FN + TP", "FP + TN"}
    assert {str(s.expr) for s in g_mean.not_differentiable} == {"TP", "TN"}
    assert {s.kind for s in g_mean.not_differentiable} == {"not differentiable"}
    lr_plus = {str(s.expr): s.reason for s in metricc.compile("lr_plus").check().undefined}
    assert lr_plus["FP"].startswith("x/0") and lr_plus["FN + TP"] == "0/0"
    assert metricc.compile("TP/(TP+1)").check().undefined == ()
    # compile() refuses these (not real for all counts); check() on the expression still
    # says where.
    log = check(sympy.sympify("log(TP - FP) + TP")).undefined
    assert [(str(s.expr), s.relation) for s in log] == [("-FP + TP", "<= 0")]
    root = check(sympy.sympify("sqrt(TP - FP)"))
    assert [(str(s.expr), s.relation) for s in root.undefined] == [("-FP + TP", "< 0")]
    kinks = metricc.compile("abs(TP - FP)/(TP + FP) + max(TP, TN)/(TP+TN)").check()
    reasons = sorted(s.reason for s in kinks.not_differentiable)
    assert reasons == ["max switches branch", "|x| has a kink at 0"]


def test_undefined_where_matches_check() -> None:
    for name in METRICS:
        m = metricc.compile(name)
        assert [s.expr for s in m.check().undefined] == m.undefined


def test_report_is_frozen_deterministic_and_readable() -> None:
    r = metricc.compile("f1").check()
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.lower = 5  # type: ignore[misc]
    text = str(r)
    assert "undefined where:\n  FN + FP + 2*TP = 0  (0/0)" in text
    assert "TN: constant (symbolic)" in text
    assert "range: within [0, 1] (symbolic)" in text
    assert "no feasible move takes it the wrong way" in text
    assert str(check(metricc.compile("f1").expr, higher_is_better=True)) == text


def test_check_refuses_free_parameters() -> None:
    with pytest.raises(metricc.MetricError, match="give values to b"):
        check(sympy.sympify("TP/(TP + b*FP)"))


def test_named_metrics_analyse_fast() -> None:
    times = {}
    for name in METRICS:
        m = metricc.compile(name)
        # CPU time of this process, not the wall clock: other jobs on a loaded CI machine
        # once pushed a wall-clock measurement past the bound.
        start = time.process_time()
        check(m.expr, m.analysis.gradient)
        times[name] = time.process_time() - start
    # ~0.05 s typical, 0.4 s for prevalence_threshold; generous (>10x) for slow CI machines.
    assert max(times.values()) < 5.0, times


# --- the warning in Metric.loss() ------------------------------------------------------------

def test_wrong_way_formula_warns() -> None:
    m = metricc.compile("FP/(TP+FP)", higher_is_better=True)
    with pytest.warns(metricc.MetricWarning, match="increasing as a negative's score rises") as caught:
        m.loss()
    message = str(caught[0].message)
    assert "rewards false positives" in message and "penalises true positives" in message
    assert "warn_monotonicity=False" in message
    assert caught[0].filename == __file__  # points at the caller of loss()


def test_lower_is_better_reverses_the_test() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metricc.compile("FP/(TP+FP)", higher_is_better=False).loss()
        metricc.compile("fdr").loss()
    with pytest.warns(metricc.MetricWarning, match="decreasing as a negative's score rises"):
        metricc.compile("f1", higher_is_better=False).loss()


def test_warning_can_be_silenced() -> None:
    m = metricc.compile("FP/(TP+FP)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.loss(warn_monotonicity=False)
        warnings.simplefilter("ignore", metricc.MetricWarning)
        m.loss()


def test_no_named_metric_warns() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in METRICS:
            metricc.compile(name).loss()
