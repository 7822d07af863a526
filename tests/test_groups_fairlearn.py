"""Group metrics against fairlearn.metrics (the reference), with hypothesis: random decisions,
labels, string or integer group labels, sample weights, groups of one class. metricc's scores
use ``zero_division=0``, fairlearn's (and scikit-learn's) count of a rate with nothing to count.

Where fairlearn's ratio is 0/0 (every group's rate 0) it answers NaN; metricc answers 1 (all
groups equal; as a gap of 0), so those draws are checked against that rule instead.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import metricc

fm = pytest.importorskip("fairlearn.metrics")
from oracles import fairlearn_reference, metric_frame, precision0, recall0  # noqa: E402


def _fairlearn(name: str, y: np.ndarray, d: np.ndarray, g: np.ndarray, w: np.ndarray | None) -> float:
    """fairlearn's value of the named metricc group metric (``tests/oracles.py``)."""
    return fairlearn_reference(name, y, d, g, w)


NAMES = ["demographic_parity_difference", "demographic_parity_ratio", "equalized_odds_difference",
         "equalized_odds_ratio", "equal_opportunity_difference", "equal_opportunity_ratio",
         "predictive_parity_difference", "worst_group_recall", "worst_group_accuracy"]
COMPILED = {name: metricc.compile(name) for name in NAMES}


def test_every_fairlearn_named_metric_is_covered() -> None:
    from metricc.library import GROUP_METRICS

    assert set(NAMES) <= set(GROUP_METRICS)


@st.composite
def _data(draw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    n = draw(st.integers(2, 30))
    labels = draw(st.sampled_from([["a", "b"], ["x", "y", "z"], [3, 1, 7, 2], ["only"]]))
    g = np.array(draw(st.lists(st.sampled_from(labels), min_size=n, max_size=n)))
    y = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    # scores on both sides of 0.5 and exactly on it (score >= 0.5 is a positive decision)
    s = np.array(draw(st.lists(st.sampled_from([0.05, 0.3, 0.5, 0.7, 1.0]), min_size=n, max_size=n)))
    w = None
    if draw(st.booleans()):
        w = np.array(draw(st.lists(st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.5]), min_size=n, max_size=n)))
    return y, s, g, w


_PERFECT = (np.array([1, 0, 1, 0]), np.array([1.0, 0.0, 1.0, 0.0]), np.array(["a", "a", "b", "b"]), None)
_NONE_SELECTED = (np.array([1, 0, 1]), np.array([0.1, 0.2, 0.3]), np.array([2, 1, 1]), np.array([1.0, 2.0, 0.5]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(NAMES), data=_data())
@example(name="equalized_odds_ratio", data=_PERFECT)
@example(name="equalized_odds_ratio", data=_NONE_SELECTED)
@example(name="demographic_parity_ratio", data=_NONE_SELECTED)
@example(name="equal_opportunity_ratio", data=_NONE_SELECTED)
def test_group_metrics_equal_fairlearn(name: str, data: tuple) -> None:
    y, s, g, w = data
    assume(y.any())  # scikit-learn's recall and precision need a positive label somewhere
    d = (s >= 0.5).astype(int)
    ours = COMPILED[name].score(s, y, groups=g, sample_weight=w, zero_division=0)
    ref = _fairlearn(name, y, d, g, w)
    if math.isnan(ref):
        # fairlearn's ratio is 0/0 = NaN where every group's rate is 0; metricc's is 1
        assert name.endswith("_ratio"), (name, ref)
        ref = 1.0
        if name == "equalized_odds_ratio":
            ref = min(1.0 if math.isnan(r) else r for r in (metric_frame(rate, y, d, g, w).ratio()
                                                            for rate in (fm.true_positive_rate,
                                                                         fm.false_positive_rate)))
    assert abs(ours - ref) <= 1e-12, (name, ours, ref)


def test_groups_of_one_class_and_string_labels() -> None:
    """Group 'b' has no positives, 'c' no negatives: their rates with nothing to count are 0."""
    y = np.array([1, 0, 1, 0, 0, 1, 1])
    s = np.array([0.9, 0.6, 0.2, 0.7, 0.1, 0.8, 0.4])
    g = np.array(["a", "a", "a", "b", "b", "c", "c"])
    d = (s >= 0.5).astype(int)
    for name in NAMES:
        ref = _fairlearn(name, y, d, g, None)
        assert COMPILED[name].score(s, y, groups=g, zero_division=0) == pytest.approx(ref, abs=1e-12), name


def test_a_perfect_classifier_has_ratio_one() -> None:
    """No false positives anywhere: the FPR ratio is 0/0. fairlearn's equalized_odds_ratio is then
    the TPR ratio, 1, and so is metricc's (it was 0: a perfect classifier maximally unfair)."""
    y = np.array([1, 0, 1, 0, 1, 0])
    g = np.array(["a", "a", "b", "b", "c", "c"])
    m = COMPILED["equalized_odds_ratio"]
    assert m.score(y.astype(float), y, groups=g, zero_division=0) == 1.0
    assert fm.equalized_odds_ratio(y, y, sensitive_features=g) == 1.0
    assert m.value([1, 1], [0, 0], [0, 0], [1, 1]) == 1.0
    assert COMPILED["demographic_parity_ratio"].score([0.1, 0.2, 0.3], [1, 0, 1], groups=[0, 1, 1]) == 1.0


@pytest.mark.parametrize("name, who", [("equal_opportunity_difference", "'b'"),
                                       ("worst_group_recall", "'b'"),
                                       ("predictive_parity_difference", "'c'")])
def test_undefined_rate_without_zero_division_names_the_group(name: str, who: str) -> None:
    y = np.array([1, 0, 0, 0, 1, 0])
    s = np.array([0.9, 0.2, 0.7, 0.1, 0.3, 0.2])  # group 'c' predicts no positive: no precision
    g = np.array(["a", "a", "b", "b", "c", "c"])
    with pytest.raises(metricc.MetricError, match=f"undefined in group {who}"):
        COMPILED[name].score(s, y, groups=g)
    assert math.isfinite(COMPILED[name].score(s, y, groups=g, zero_division=0))


def test_scores_outside_zero_one_need_from_logits() -> None:
    m = COMPILED["demographic_parity_difference"]
    with pytest.raises(metricc.MetricError, match=r"probabilities in \[0, 1\]"):
        m.score([2.0, -1.0, 0.3], [1, 0, 1], groups=[0, 1, 1])
    logits = np.array([2.0, -1.0, 0.3])
    assert m.score(logits, [1, 0, 1], groups=[0, 1, 1], from_logits=True) == \
        fm.demographic_parity_difference([1, 0, 1], (logits >= 0).astype(int), sensitive_features=[0, 1, 1])


def _f1(y_true: Any, y_pred: Any, sample_weight: Any = None) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y_true, y_pred, sample_weight=sample_weight, zero_division=0))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_data())
def test_other_reductions_equal_metric_frames(data: tuple) -> None:
    """groupmax, groupmean, worst and gap of formulas as MetricFrame's group_max(), the mean of
    by_group, group_min(), difference(); vsrest as each group's recall against scikit-learn's
    recall of all the other groups."""
    y, s, g, w = data
    assume(y.any())
    d = (s >= 0.5).astype(int)
    checks = {"groupmax(fpr)": metric_frame(fm.false_positive_rate, y, d, g, w).group_max(),
              "groupmean(precision)": float(np.mean(metric_frame(precision0, y, d, g, w).by_group)),
              "worst(f1)": metric_frame(_f1, y, d, g, w).group_min(),
              "gap(fnr)": metric_frame(fm.false_negative_rate, y, d, g, w).difference()}
    groups = np.unique(g)
    if len(groups) > 1:
        def rest(k: Any) -> float:
            inside, out = g == k, g != k
            return abs(recall0(y[inside], d[inside], None if w is None else w[inside])
                       - recall0(y[out], d[out], None if w is None else w[out]))
        checks["vsrest(recall)"] = max(rest(k) for k in groups)
    for formula, ref in checks.items():
        ours = metricc.compile(formula).score(s, y, groups=g, sample_weight=w, zero_division=0)
        assert abs(ours - float(ref)) <= 1e-12, (formula, ours, ref)


def test_vsrest_takes_zero_division_for_each_rate_not_their_difference() -> None:
    """Group 'b' has no positives: its recall is zero_division (0), the rest of it (group 'a')
    has recall 1, so |0 - 1| = 1 (it was 0: the undefined difference itself was set to 0)."""
    y, s, g = np.array([0, 1, 0]), np.array([0.05, 0.5, 0.05]), np.array(["a", "a", "b"])
    m = metricc.compile("vsrest(recall)")
    assert m.score(s, y, groups=g, zero_division=0) == 1.0
    assert m.score(s, y, groups=g, zero_division=1) == 0.0
    with pytest.raises(metricc.MetricError, match="undefined in group 'b'"):
        m.score(s, y, groups=g)
