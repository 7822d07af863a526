"""``Metric.best_threshold``: against a brute-force search, scikit-learn, and bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import metricc
from metricc import MetricError
from metricc.evaluate.threshold import threshold_counts

# Higher- and lower-is-better metrics, ratios, products, square roots, affine ones.
NAMES = ("f1", "precision", "recall", "mcc", "accuracy", "balanced_accuracy", "jaccard",
         "g_mean", "fpr", "fdr", "cohen_kappa", "informedness")


def brute_force(m: metricc.Metric, s: np.ndarray, y: np.ndarray) -> tuple[float, list[float]]:
    """Best value and every threshold reaching it, trying each candidate with ``Metric.score``."""
    candidates = [*np.unique(s).tolist(), math.inf]
    values = {}
    for t in candidates:
        try:
            values[t] = m.score(torch.as_tensor(s), torch.as_tensor(y), t)
        except MetricError:  # undefined at this threshold: not a candidate
            continue
    best = (max if m.higher_is_better else min)(values.values())
    return best, [t for t, v in values.items() if math.isclose(v, best, rel_tol=1e-12,
                                                               abs_tol=1e-12)]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), name=st.sampled_from(NAMES))
def test_matches_brute_force_search(data, name):
    """Same best value as trying every threshold; the lowest of the tied thresholds wins."""
    n = data.draw(st.integers(1, 40))
    # Few distinct values: many ties between scores, the case cumulative sums get wrong first.
    s = np.array(data.draw(st.lists(st.integers(0, 8), min_size=n, max_size=n)), float) / 8
    y = np.array(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    m = metricc.compile(name)
    try:
        best, tied = brute_force(m, s, y)
    except ValueError:  # undefined everywhere (max of nothing)
        with pytest.raises(MetricError, match="undefined at every threshold"):
            m.best_threshold(s, y)
        return
    got = m.best_threshold(s, y)
    assert math.isclose(got.value, best, rel_tol=1e-12, abs_tol=1e-12)
    finite = [t for t in tied if math.isfinite(t)]
    if finite:
        assert got.threshold == min(finite)
    else:  # only "no positive prediction" is best
        assert got.threshold > s.max()
    # The returned threshold reproduces the value on the same scores.
    assert math.isclose(m.score(torch.as_tensor(s), torch.as_tensor(y), got.threshold),
                        got.value, rel_tol=1e-12, abs_tol=1e-12)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_counts_match_counting_by_hand(data):
    n = data.draw(st.integers(1, 30))
    s = np.array(data.draw(st.lists(st.floats(-5, 5, width=32), min_size=n, max_size=n)),
                 np.float32)
    y = np.array(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    c = threshold_counts(s, y)
    assert np.all(np.diff(c.thresholds) < 0)  # highest first, distinct
    assert c.tp[0] == c.fp[0] == 0  # the first candidate predicts nothing
    for i, t in enumerate(c.thresholds):
        pred = s >= np.float32(t)
        assert (c.tp[i], c.fp[i], c.fn[i], c.tn[i]) == (
            np.sum(pred & (y == 1)), np.sum(pred & (y == 0)), np.sum(~pred & (y == 1)),
            np.sum(~pred & (y == 0)))


def _fixed_classifier():
    """A 'fitted classifier' whose positive-class probability is its first feature."""
    from sklearn.base import BaseEstimator, ClassifierMixin

    class Fixed(ClassifierMixin, BaseEstimator):
        def fit(self, X, y):
            self.classes_ = np.array([0, 1])
            return self

        def predict_proba(self, X):
            return np.c_[1 - X[:, 0], X[:, 0]]

    return Fixed()


@pytest.mark.parametrize(("name", "scoring"), [("f1", "f1"), ("balanced_accuracy",
                                                              "balanced_accuracy"),
                                               ("mcc", "matthews_corrcoef"),
                                               ("jaccard", "jaccard"), ("accuracy", "accuracy")])
def test_agrees_with_scikit_learn_tuned_threshold(name, scoring):
    """``TunedThresholdClassifierCV`` given our candidates as its grid picks the same threshold."""
    from sklearn.frozen import FrozenEstimator
    from sklearn.model_selection import TunedThresholdClassifierCV

    rng = np.random.default_rng(3)
    s = rng.random(300)
    y = (rng.random(300) < 0.25 * s + 0.05).astype(int)  # imbalanced, informative scores
    X = s[:, None]
    # Every score, and one above them all (no positive prediction: best for accuracy here).
    grid = np.r_[np.unique(s), np.nextafter(s.max(), 2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn's own notes on prefit/refit
        tuned = TunedThresholdClassifierCV(FrozenEstimator(_fixed_classifier().fit(X, y)), scoring=scoring,
                                           thresholds=grid, cv="prefit",
                                           refit=False).fit(X, y)
    ours = metricc.compile(name).best_threshold(s, y)
    assert ours.threshold == pytest.approx(tuned.best_threshold_, abs=0)
    assert ours.value == pytest.approx(tuned.best_score_, rel=1e-12)
    np.testing.assert_array_equal(tuned.predict(X), (s >= ours.threshold).astype(int))


def test_large_input_against_precision_recall_curve():
    """Vectorised on 200k scores: the best F1 equals the maximum over scikit-learn's PR curve."""
    from sklearn.metrics import precision_recall_curve

    rng = np.random.default_rng(0)
    y = (rng.random(200_000) < 0.05).astype(int)
    s = np.round(rng.normal(y * 1.5, 1.0), 3)  # rounded: many ties
    p, r, t = precision_recall_curve(y, s)
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(p + r > 0, 2 * p * r / (p + r), 0)[:-1]
    ours = metricc.compile("f1").best_threshold(torch.as_tensor(s), torch.as_tensor(y))
    assert ours.value == pytest.approx(f1.max(), rel=1e-12)
    assert ours.threshold == t[np.flatnonzero(np.isclose(f1, f1.max(), rtol=1e-12))[0]]


def test_float32_logits_threshold_reproduces_exactly():
    """Thresholds are the scores themselves, so float32 tensors score the same at them."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(1000, generator=g, dtype=torch.float32) * 3
    y = (torch.rand(1000, generator=g) < torch.sigmoid(logits - 2)).float()
    for name in ("f1", "mcc", "fpr"):
        m = metricc.compile(name)
        choice = m.best_threshold(logits, y)
        assert m.score(logits, y, choice.threshold) == choice.value
    # fpr 0: the lowest threshold above every negative's score.
    choice = metricc.compile("fpr").best_threshold(logits, y)
    assert choice.value == 0.0 and choice.threshold > float(logits[y == 0].max())
    assert choice.threshold == float(logits[logits > logits[y == 0].max()].min())


def test_lower_is_better_is_minimised():
    s, y = [0.1, 0.6, 0.7, 0.9], [0, 1, 0, 1]
    err = metricc.compile("FP + FN", higher_is_better=False).best_threshold(s, y)
    assert (err.threshold, err.value) == (0.6, 1.0)
    # The same formula read as higher-is-better picks the worst threshold.
    worst = metricc.compile("FP + FN", higher_is_better=True).best_threshold(s, y)
    assert worst == (0.1, 2.0)  # ties at 2 (none positive, 0.7, 0.1): the lowest wins


def test_zero_division_makes_undefined_thresholds_candidates():
    # Precision is undefined with no positive prediction; as 1 it wins over all the rest.
    s, y = [0.2, 0.8], [1, 0]
    precision = metricc.compile("precision")
    assert precision.best_threshold(s, y).value == 0.5
    assert precision.best_threshold(s, y, zero_division=1.0) == (pytest.approx(0.8), 1.0)


def test_module_function_and_method_agree():
    s, y = np.array([0.3, 0.5, 0.9, 0.1]), np.array([1, 0, 1, 0])
    m = metricc.compile("f1")
    assert metricc.best_threshold(m, s, y) == m.best_threshold(s, y)
    assert m.best_threshold(s.reshape(2, 2), y.reshape(2, 2)) == m.best_threshold(s, y)
    assert m.best_threshold(s.tolist(), [bool(v) for v in y]) == m.best_threshold(s, y)


@pytest.mark.parametrize(("scores", "target", "message"), [
    ([], [], "at least one score"),
    ([0.1, float("nan")], [0, 1], "NaN or infinite"),
    ([0.1, float("inf")], [0, 1], "NaN or infinite"),
    ([0.1, 0.2], [0, 2], r"only 0 and 1 \(binary\), found \[2\]"),
    ([0.1, 0.2, 0.3], [0, 1], "same shape"),
    (["a", "b"], [0, 1], "must hold numbers"),
    ([0.1, 0.2], [0.5, 1], "only 0 and 1"),
])
def test_bad_input_is_a_metric_error(scores, target, message):
    with pytest.raises(MetricError, match=message):
        metricc.compile("f1").best_threshold(scores, target)


def test_undefined_everywhere_and_bad_zero_division():
    recall = metricc.compile("recall")
    with pytest.raises(MetricError, match="undefined at every threshold"):
        recall.best_threshold([0.1, 0.9], [0, 0])  # no positive target: TP+FN = 0
    assert recall.best_threshold([0.1, 0.9], [0, 0], zero_division=0.0).value == 0.0
    with pytest.raises(MetricError, match="zero_division must be a number"):
        recall.best_threshold([0.1, 0.9], [0, 1], zero_division="0")
