"""The decision stage takes data: ``choose_threshold`` and ``FeasiblePasses`` run on a
``CountsObjective`` built by hand (plain functions, no ``Metric``), and equal what the
facade's ``best_threshold`` / ``BestFeasible`` give for the same metric."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import metricc
from metricc.decisions import BestFeasible
from metricc.errors import MetricWarning
from metricc.evaluate.objective import CountsBound, CountsObjective
from metricc.evaluate.operating import FeasiblePasses
from metricc.evaluate.threshold import choose_threshold


def _ratio(num, den):
    """``num / den`` on counts as the generated value does: nan (or zero_division) at 0/0."""
    def value(tp, fp, fn, tn, *, zero_division=None):
        counts = {"tp": tp, "fp": fp, "fn": fn, "tn": tn}
        top = sum(counts[k] for k in num)
        bottom = sum(counts[k] for k in den)
        if isinstance(top, torch.Tensor):
            out = top / bottom
            return torch.where(bottom == 0, torch.tensor(float(zero_division)), out)
        return top / bottom if bottom else float(zero_division)
    return value


def _by_hand(bound: float) -> CountsObjective:
    import sympy
    tp, fn = sympy.symbols("TP FN")
    recall = CountsBound(f"recall >= {bound}", _ratio(("tp",), ("tp", "fn")), tp / (tp + fn),
                         ">=", bound)
    return CountsObjective("precision", _ratio(("tp",), ("tp", "fp")), True, (recall,))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("bound", [0.5, 0.8])
def test_choose_threshold_on_data_equals_the_facade(seed, bound):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 200)
    s = np.round(rng.normal(size=200) + y, 2)  # ties
    m = metricc.compile("precision")
    want = m.best_threshold(s, y, constraints=[f"recall >= {bound}"])
    assert choose_threshold(_by_hand(bound), s, y) == want
    assert metricc.best_threshold(m, s, y, constraints=[f"recall >= {bound}"]) == want
    with_c = m.best_threshold(s, y, constraints=[f"recall >= {bound}"], confidence=0.8)
    got = choose_threshold(_by_hand(bound), s, y, confidence=0.8)
    assert (got, got.bounds) == (with_c, with_c.bounds)


def test_feasible_passes_on_data_equals_best_feasible():
    rng = np.random.default_rng(3)
    m = metricc.compile("precision subject to recall >= 0.5")
    facade = BestFeasible(m, keep="latest", threshold=0.5)  # scores reach 1.17: explicit scale
    data = FeasiblePasses(_by_hand(0.5), keep="latest", threshold=0.5)
    for step in range(6):
        y = rng.integers(0, 2, 50)
        s = rng.random(50) * (0.5 + step / 5) + 0.3 * y
        a, b = facade.update(step, s, y, state=step), data.update(step, s, y, state=step)
        assert (a.value, a.feasible, a.counts) == (b.value, b.feasible, b.counts)
        assert list(a.rates.values()) == list(b.rates.values())
    assert facade.best_state == data.best_state and facade.best == facade.result()


def test_the_facade_hands_down_data():
    m = metricc.compile("precision subject to recall >= 0.9")
    o = m.decision_objective(["fpr <= 0.2"])
    assert isinstance(o, CountsObjective) and not isinstance(o.value, metricc.Metric)
    assert [(c.text, c.op, c.bound) for c in o.constraints] == [
        ("recall >= 0.9", ">=", 0.9), ("fpr <= 0.2", "<=", 0.2)]
    assert o.constraints[0].value(tp=9, fn=1) == 0.9 and bool(o.constraints[0].met(0.9))
    assert not bool(o.constraints[0].met(float("nan")))
    assert BestFeasible(m).objective.constraints == m.decision_objective().constraints
    for other in ("quadratic_kappa", "auroc"):
        with pytest.raises(metricc.MetricError, match="best_threshold and BestFeasible apply"):
            BestFeasible(metricc.compile(other))


@pytest.mark.parametrize("call", [
    lambda m: m.best_threshold([0.1, 0.9], [0, 0], zero_division=0.0),
    lambda m: metricc.best_threshold(m, [0.1, 0.9], [0, 0], zero_division=0.0),
])
def test_the_one_class_warning_points_at_the_caller(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(metricc.compile("recall"))
    hits = [w for w in caught if issubclass(w.category, MetricWarning)]
    assert len(hits) == 1 and hits[0].filename == __file__
