"""Exact curve scores equal scikit-learn and torchmetrics on heavily tied data.

Scores are drawn by hypothesis and rounded to one or two decimals, so most
thresholds hold tied blocks of positives and negatives (where conventions differ).
torchmetrics runs with float64 as torch's default dtype: its curves are then formed
in float64 (it otherwise counts in float32, 1e-8 away from any float64 reference).
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score
from torchmetrics.classification import (
    BinaryAUROC,
    BinaryAveragePrecision,
    BinaryPrecisionAtFixedRecall,
    BinaryRecallAtFixedPrecision,
)

from metricc.errors import MetricError, MetricWarning
from metricc.evaluate.curve import (
    auroc,
    average_precision,
    best_value,
    binned_counts,
    exact_curve,
    partial_auroc,
    value_at,
)

TOL = 1e-9
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def precision(tp, fp, fn, tn):
    return tp / (tp + fp)


def recall(tp, fp, fn, tn):
    return tp / (tp + fn)


def f1(tp, fp, fn, tn):
    return 2 * tp / (2 * tp + fp + fn)


@contextlib.contextmanager
def float64_default():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@st.composite
def binary_data(draw, both: bool = True, weighted: bool = False):
    n = draw(st.integers(4, 60))
    seed = draw(st.integers(0, 2**31 - 1))
    decimals = draw(st.sampled_from([1, 2]))
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < draw(st.floats(0.1, 0.9))).astype(np.int64)
    if both:
        y[0], y[1] = 0, 1
    # scores correlated with the label, rounded: many tied blocks of both classes
    s = np.clip(np.round(rng.normal(0.35 + 0.3 * y, 0.25), decimals), 0, 1)
    w = np.round(rng.random(n) * 3, 1) if weighted else None
    if w is not None and both:
        w[0] = w[1] = 1.0
    return s, y, w


@SETTINGS
@given(binary_data(weighted=True))
def test_binary_auroc_ap_partial_equal_sklearn(data) -> None:
    s, y, w = data
    for weight in (None, w):
        assert abs(auroc(s, y, weight) - roc_auc_score(y, s, sample_weight=weight)) < TOL
        assert abs(average_precision(s, y, weight) - average_precision_score(y, s, sample_weight=weight)) < TOL
        for max_fpr in (0.1, 0.37, 0.8):
            want = roc_auc_score(y, s, sample_weight=weight, max_fpr=max_fpr)
            assert abs(partial_auroc(s, y, max_fpr, weight) - want) < TOL


@SETTINGS
@given(binary_data())
def test_auroc_is_mann_whitney_with_ties_counting_half(data) -> None:
    s, y, _ = data
    pos, neg = s[y == 1], s[y == 0]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert abs(auroc(s, y) - pairs) < TOL


@SETTINGS
@given(binary_data())
def test_exact_curve_counts_every_distinct_threshold(data) -> None:
    s, y, _ = data
    c = exact_curve(s, y)
    assert c.thresholds.tolist() == sorted(set(s.tolist()), reverse=True)
    for t, tp, fp in zip(c.thresholds, c.tp, c.fp, strict=True):
        assert tp == ((s >= t) & (y == 1)).sum() and fp == ((s >= t) & (y == 0)).sum()


@SETTINGS
@given(binary_data())
def test_best_f1_equals_the_best_over_precision_recall_curve(data) -> None:
    s, y, _ = data
    p, r, _ = precision_recall_curve(y, s)
    with np.errstate(invalid="ignore"):
        want = np.nanmax(np.where(p + r > 0, 2 * p * r / (p + r), 0.0))
    got = best_value(s, y, f1)
    assert abs(got.value - want) < TOL
    # the threshold reaches the value
    hit = s >= got.threshold
    assert abs(f1((hit & (y == 1)).sum(), (hit & (y == 0)).sum(), (~hit & (y == 1)).sum(), 0) - want) < TOL


@SETTINGS
@given(binary_data(), st.sampled_from([0.0, 0.3, 0.5, 0.72, 0.9, 1.0]))
def test_value_at_equals_torchmetrics_fixed_precision_and_recall(data, bound) -> None:
    s, y, _ = data
    preds, target = torch.tensor(s), torch.tensor(y)
    cases = ((BinaryRecallAtFixedPrecision(min_precision=bound), recall, precision),
             (BinaryPrecisionAtFixedRecall(min_recall=bound), precision, recall))
    for metric, fn, constraint in cases:
        with warnings.catch_warnings(), float64_default():
            warnings.simplefilter("ignore")
            want_value, want_threshold = (float(v) for v in metric(preds, target))
        got = value_at(s, y, fn, constraint, bound)
        assert abs(got.value - want_value) < TOL, (metric, got, want_value)
        assert np.isnan(got.threshold) == np.isnan(want_threshold)
        if not np.isnan(want_threshold):
            assert got.threshold == want_threshold


@SETTINGS
@given(binary_data(), st.sampled_from([5, 11, 64, 101]))
def test_exact_and_binned_equal_torchmetrics(data, bins) -> None:
    s, y, _ = data
    preds, target = torch.tensor(s), torch.tensor(y)
    with float64_default():
        exact = float(BinaryAUROC()(preds, target)), float(BinaryAveragePrecision()(preds, target))
        binned_roc = float(BinaryAUROC(thresholds=bins)(preds, target))
        state = BinaryAveragePrecision(thresholds=bins)
        state.update(preds, target)
        binned_ap = float(state.compute())
    assert abs(auroc(s, y) - exact[0]) < TOL
    assert abs(average_precision(s, y) - exact[1]) < TOL
    # torchmetrics' binned rates are divided in float32 (its _safe_divide), so binned values
    # agree to float32's precision; the counts it divides agree exactly
    assert abs(auroc(s, y, thresholds=bins) - binned_roc) < 1e-6
    assert abs(average_precision(s, y, thresholds=bins) - binned_ap) < 1e-6
    counts = binned_counts(s, y, bins)
    confmat = state.confmat.numpy()  # (T, 2, 2): [threshold, label, prediction]
    np.testing.assert_array_equal(counts.tp, confmat[:, 1, 1])
    np.testing.assert_array_equal(counts.fp, confmat[:, 0, 1])
    np.testing.assert_array_equal(counts.thresholds, state.thresholds.numpy())


@SETTINGS
@given(binary_data(), st.integers(2, 4))
def test_binned_counts_add_across_batches(data, parts) -> None:
    s, y, _ = data
    whole = binned_counts(s, y, 17)
    pieces = [binned_counts(a, b, 17) for a, b in zip(np.array_split(s, parts), np.array_split(y, parts),
                                                      strict=True) if a.size]
    np.testing.assert_array_equal(sum(p.tp for p in pieces), whole.tp)
    np.testing.assert_array_equal(sum(p.fp for p in pieces), whole.fp)


@st.composite
def multilabel_data(draw):
    n, c = draw(st.integers(6, 50)), draw(st.integers(2, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    y = (rng.random((n, c)) < 0.4).astype(np.int64)
    y[0], y[1] = 0, 1  # every column has both classes
    s = np.clip(np.round(rng.normal(0.35 + 0.3 * y, 0.25), draw(st.sampled_from([1, 2]))), 0, 1)
    return s, y, np.round(rng.random(n) * 2, 1) + 0.1


@SETTINGS
@given(multilabel_data(), st.sampled_from(["macro", "weighted", "micro", None]))
def test_multilabel_averages_equal_sklearn(data, average) -> None:
    s, y, w = data
    for weight in (None, w):
        for ours, theirs in ((auroc, roc_auc_score), (average_precision, average_precision_score)):
            np.testing.assert_allclose(ours(s, y, weight, average=average),
                                       theirs(y, s, sample_weight=weight, average=average), rtol=0, atol=TOL)


@SETTINGS
@given(st.integers(8, 60), st.integers(3, 5), st.integers(0, 2**31 - 1),
       st.sampled_from(["macro", "weighted", "micro", None]))
def test_multiclass_one_vs_rest_equals_sklearn(n, c, seed, average) -> None:
    rng = np.random.default_rng(seed)
    labels = np.r_[np.arange(c), rng.integers(0, c, n - c)]
    logits = np.round(rng.normal(size=(n, c)) + 1.5 * np.eye(c)[labels], 1)
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    probs = np.round(probs, 2)
    probs /= probs.sum(1, keepdims=True)  # still tied, and rows sum to 1
    w = rng.random(n) + 0.1
    for weight in (None, w):
        want = roc_auc_score(labels, probs, multi_class="ovr", average=average, sample_weight=weight)
        np.testing.assert_allclose(auroc(probs, labels, weight, average=average), want, rtol=0, atol=TOL)
        onehot = np.eye(c)[labels]
        want = average_precision_score(onehot, probs, average=average, sample_weight=weight)
        np.testing.assert_allclose(average_precision(probs, labels, weight, average=average), want, atol=TOL)
        if average is not None:  # multiclass y_true is binarised the same way by sklearn
            want = average_precision_score(labels, probs, average=average, sample_weight=weight)
            assert abs(average_precision(probs, labels, weight, average=average) - want) < TOL


def test_a_column_without_positives_follows_sklearn_where_defined() -> None:
    s = np.array([[0.1, 0.5], [0.7, 0.2], [0.4, 0.9], [0.8, 0.3]])
    y = np.array([[0, 0], [1, 0], [0, 0], [1, 0]])
    # weighted: the empty column has weight 0, as in sklearn
    assert auroc(s, y, average="weighted") == roc_auc_score(y, s, average="weighted")
    with pytest.warns(MetricWarning, match="without positives"):
        got = average_precision(s, y, average="macro")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert got == average_precision_score(y, s, average="macro")
    # macro AUROC: sklearn gives NaN for the column; we refuse, naming it and what to do
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        assert np.isnan(roc_auc_score(y, s, average="macro"))
    with pytest.raises(MetricError, match=r"column 1.*weighted"):
        auroc(s, y)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: auroc([0.1, 0.2], [1, 1]), "only one"),
    (lambda: auroc([0.1, float("nan")], [0, 1]), "NaN"),
    (lambda: auroc([0.1, 0.2], [0, 2]), "only 0 and 1"),
    (lambda: auroc([0.1, 0.2], [0, 1, 1]), "shape"),
    (lambda: auroc([0.1, 0.2], [0, 1], [1.0, -1.0]), "sample_weight"),
    (lambda: auroc([0.1, 0.2], [0, 1], average="samples"), "average"),
    (lambda: auroc([0.1, 0.2], [0, 1], max_fpr=0.0), "max_fpr"),
    (lambda: auroc([[0.6, 0.4], [0.3, 0.7]], [0, 1], max_fpr=0.5), "one-vs-rest"),
    (lambda: auroc([[0.6, 0.9], [0.3, 0.7]], [0, 1]), "softmax"),
    (lambda: auroc([[0.6, 0.2, 0.2], [0.3, 0.5, 0.2]], [0, 1]), r"missing \[2\]"),
    (lambda: auroc([0.1, 1.5], [0, 1], thresholds=10), "sigmoid"),
    (lambda: auroc([0.1, 0.5], [0, 1], thresholds=[0.5, 0.2]), "increasing"),
    (lambda: exact_curve([0.1, 0.2], [0, 1], [0.0, 0.0]), "weight 0"),
    (lambda: best_value([0.1, 0.2], [0, 1], lambda tp, fp, fn, tn: tp * np.nan), "NaN at every"),
    (lambda: best_value([0.1, 0.2], [0, 1], "f1"), "function"),
    (lambda: value_at([0.1, 0.2], [0, 1], recall, precision, None), "bound"),
])
def test_bad_input_raises_metric_error_saying_what_to_do(call, match) -> None:
    with pytest.raises(MetricError, match=match):
        call()


def test_value_at_with_no_qualifying_threshold_is_zero_without_a_threshold() -> None:
    got = value_at([0.9, 0.8, 0.2], [0, 0, 1], recall, precision, 0.99)
    assert got.value == 0.0 and np.isnan(got.threshold)


def test_torch_inputs_are_accepted() -> None:
    s = torch.tensor([0.1, 0.4, 0.35, 0.8], dtype=torch.bfloat16)
    assert auroc(s, torch.tensor([0, 0, 1, 1])) == pytest.approx(0.75)
