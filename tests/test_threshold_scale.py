"""One meaning of a threshold with ``from_logits`` (issue 36, point 3): a probability,
compared with ``sigmoid(logit)``, in ``score``, ``metric``, ``best_threshold`` and
``BestFeasible``; the default 0.5 is logit 0."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import f1_score, precision_score

import metricc
from metricc import MetricError
from metricc.decisions import BestFeasible

F1 = metricc.compile("f1")
CONSTRAINED = metricc.compile("precision subject to recall >= 0.5")


def _logits(seed: int, n: int = 300, scale: float = 3.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64) * scale
    y = (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid(x)).long()
    return x, y


def _through_each(metric: metricc.Metric, x: torch.Tensor, y: torch.Tensor, t: float
                  ) -> tuple[float, float, float]:
    """The metric at threshold ``t`` on logits ``x`` through score, metric() and BestFeasible."""
    s = metric.score(x, y, t, from_logits=True)
    stateful = metric.metric(from_logits=True, threshold=t)
    stateful.update(x, y)
    keep = BestFeasible(metricc.compile(f"{metric.text} subject to recall >= 0"),
                        from_logits=True, threshold=t)
    return s, float(stateful.compute()), keep.update(0, x, y).value


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_best_threshold_on_logits_reproduces_its_value_everywhere(seed, dtype):
    x, y = _logits(seed)
    x = x.to(dtype)
    for metric in (F1, metricc.compile("precision")):
        choice = metric.best_threshold(x, y, from_logits=True, zero_division=0.0)
        assert 0.0 <= choice.threshold <= 1.0  # a probability
        s, st_, bf = _through_each(metric, x, y, choice.threshold)
        assert s == choice.value and st_ == choice.value and bf == choice.value
        # independent reference: scikit-learn on the float64 probabilities
        hard = (torch.sigmoid(x.double()) >= choice.threshold).numpy()
        ref = (f1_score if metric is F1 else precision_score)(y.numpy(), hard, zero_division=0)
        assert math.isclose(choice.value, ref, rel_tol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-30, 30, allow_nan=False), min_size=2, max_size=40),
       st.integers(0, 2**32 - 1))
def test_best_threshold_on_logits_equals_best_threshold_on_probabilities(logits, seed):
    x = torch.tensor(logits, dtype=torch.float64)
    y = torch.from_numpy(np.random.default_rng(seed).integers(0, 2, len(logits)))
    if y.min() == y.max():
        y[0] = 1 - y[0]
    on_logits = F1.best_threshold(x, y, from_logits=True)
    on_probs = F1.best_threshold(torch.sigmoid(x), y)
    assert on_logits == on_probs
    assert F1.score(x, y, on_logits.threshold, from_logits=True) == on_logits.value


def test_the_default_threshold_is_probability_half_which_is_logit_zero():
    x, y = _logits(7)
    by_hand = F1.score((x >= 0).long(), y)
    assert F1.score(x, y, from_logits=True) == by_hand
    m = F1.metric(from_logits=True)
    m.update(x, y)
    assert float(m.compute()) == by_hand
    keep = BestFeasible(metricc.compile("f1 subject to recall >= 0"), from_logits=True)
    assert keep.update(0, x, y).value == by_hand


def test_a_logit_threshold_with_from_logits_is_refused_everywhere():
    x, y = _logits(1)
    with pytest.raises(MetricError, match=r"threshold=-1.5 with from_logits=True.*probability"):
        F1.score(x, y, -1.5, from_logits=True)
    with pytest.raises(MetricError, match=r"\[0, 1\]"):
        F1.metric(from_logits=True, threshold=-1.5)
    with pytest.raises(MetricError, match=r"threshold=2 with from_logits=True.*sigmoid\(2\)"):
        BestFeasible(CONSTRAINED, from_logits=True, threshold=2)


def test_best_feasible_refuses_logits_at_the_default_threshold():
    x, y = _logits(2)
    with pytest.raises(MetricError, match=r"outside \[0, 1\].*from_logits=True"):
        BestFeasible(CONSTRAINED).update(0, x, y)
    # an explicit threshold on the scores' own scale is still taken as given
    r = BestFeasible(CONSTRAINED, threshold=0.0).update(0, x, y)
    assert r.counts == BestFeasible(CONSTRAINED, from_logits=True).update(0, x, y).counts


def test_constraint_scores_read_logits():
    x, y = _logits(3)
    on_probs = CONSTRAINED.constraint_scores(torch.sigmoid(x), y)
    assert CONSTRAINED.constraint_scores(x, y, from_logits=True) == on_probs
    assert CONSTRAINED.feasible(x, y, from_logits=True) == CONSTRAINED.feasible(torch.sigmoid(x), y)


def test_numpy_logits_too():
    x, y = _logits(4)
    xs, ys = x.float().numpy(), y.numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        choice = F1.best_threshold(xs, ys, from_logits=True)
    assert F1.score(xs, ys, choice.threshold, from_logits=True) == choice.value
