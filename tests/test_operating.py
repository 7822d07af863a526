"""``BestFeasible``: 0/1 rates over whole passes, the best feasible pass and its state."""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.metrics import precision_score, recall_score

import metricc
from metricc import MetricError
from metricc.decisions import BestFeasible

M = metricc.compile("precision subject to recall >= 0.8")


def _pass(seed: int, shift: float, n: int = 400):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(int)
    return 1 / (1 + np.exp(-rng.normal(shift * (2 * y - 1), 1.0))), y


def test_rates_are_those_of_the_whole_pass_at_the_threshold():
    keep = BestFeasible(M, threshold=0.4)
    p, y = _pass(0, 1.0)
    r = keep.update(3, torch.as_tensor(p, dtype=torch.float32), torch.as_tensor(y))
    pred = (p.astype(np.float32) >= 0.4).astype(int)
    assert r.step == 3
    assert r.value == pytest.approx(precision_score(y, pred), rel=1e-12)
    assert r.rates == {"recall >= 0.8": pytest.approx(recall_score(y, pred), rel=1e-12)}
    assert r.counts == (int((pred & y).sum()), int((pred & (1 - y)).sum()),
                        int(((1 - pred) & y).sum()), int(((1 - pred) & (1 - y)).sum()))
    assert r.feasible == (recall_score(y, pred) >= 0.8) and r.bounds == {}
    # a threshold above every score predicts nothing: precision undefined, not feasible
    nothing = BestFeasible(M, threshold=2.0).update(0, p, y)
    assert math.isnan(nothing.value) and nothing.rates["recall >= 0.8"] == 0 and not nothing.feasible


def test_keeps_the_best_feasible_pass_and_a_copy_of_its_state():
    keep = BestFeasible(M)
    state = {"w": torch.zeros(2)}
    results = []
    for step, shift in enumerate([0.3, 1.0, 2.0, 1.5]):
        p, y = _pass(step, shift)
        state["w"] += 1  # the caller's state keeps changing after the update
        results.append(keep.update(step, p, y, state=state))
    feasible = [r for r in results if r.feasible]
    want = max(feasible, key=lambda r: r.value)
    assert keep.found and keep.result() is keep.best and keep.best == want
    assert torch.equal(keep.best_state["w"], torch.full((2,), float(want.step + 1)))
    assert len(keep.history) == 4
    # an infeasible pass with a better objective never wins: precision 1, recall 2/10
    y = np.r_[np.ones(10), np.zeros(10)]
    keep.update(9, np.r_[0.9, 0.9, np.full(8, 0.1), np.full(10, 0.2)], y, state="no")
    assert keep.history[-1].value == 1.0 and not keep.history[-1].feasible
    assert keep.best == want and keep.best_state["w"][0] == want.step + 1


def test_ties_keep_the_earlier_pass_and_lower_is_better_is_minimised():
    p, y = _pass(1, 1.5)
    keep = BestFeasible(M)
    keep.update(0, p, y, state="first")
    keep.update(1, p, y, state="second")
    assert keep.best.step == 0 and keep.best_state == "first"
    err = BestFeasible(metricc.compile("fpr subject to recall >= 0.5", higher_is_better=False))
    for step, shift in enumerate([0.5, 2.0, 1.0]):
        err.update(step, *_pass(step, shift))
    assert err.best.value == min(r.value for r in err.history if r.feasible)


def test_no_feasible_pass_is_reported_plainly():
    keep = BestFeasible(metricc.compile("precision subject to recall >= 0.99"), threshold=0.9)
    with pytest.raises(MetricError, match="judged no pass yet"):
        keep.result()
    for step in range(2):
        keep.update(step, *_pass(step, 0.5))
    assert not keep.found and keep.best is None
    with pytest.raises(MetricError, match=r"no pass of 2 met every constraint at threshold 0.9 "
                                          r"\(recall >= 0.99: highest 0\.\d+"):
        keep.result()


def test_confidence_spends_alpha_over_the_passes():
    keep = BestFeasible(metricc.compile("precision subject to recall >= 0.7, fpr <= 0.3"),
                        confidence=0.9)
    for s in (1, 2, 3):
        p, y = _pass(s, 1.5, n=2000)
        r = keep.update(s, p, y)
        tp, fp, fn, tn = r.counts
        level = 0.1 / (s * (s + 1)) / 2  # spent over passes, split over the two constraints
        low = stats.beta.ppf(level, tp, fn + 1)
        up = stats.beta.ppf(1 - level, fp + 1, tn)
        assert r.bounds["recall >= 0.7"] == pytest.approx(low, rel=1e-12)
        assert r.bounds["fpr <= 0.3"] == pytest.approx(up, rel=1e-12)
        assert r.feasible == (low >= 0.7 and up <= 0.3)
    fixed = BestFeasible(M, confidence=0.9, passes=2)
    p, y = _pass(0, 1.5)
    tp, _, fn, _ = fixed.update(0, p, y).counts
    assert fixed.history[0].bounds["recall >= 0.8"] == pytest.approx(
        stats.beta.ppf(0.05, tp, fn + 1), rel=1e-12)
    fixed.update(1, p, y)
    with pytest.raises(MetricError, match="passes=2; pass 3 would break the confidence level"):
        fixed.update(2, p, y)


def test_confidence_is_stricter_than_the_plain_rate():
    # recall 0.85 on 40 positives meets 0.8 but cannot certify it at 0.9
    s = np.r_[np.full(34, 0.9), np.full(6, 0.1), np.full(60, 0.2)]
    y = np.r_[np.ones(40), np.zeros(60)]
    assert BestFeasible(M).update(0, s, y).feasible
    r = BestFeasible(M, confidence=0.9).update(0, s, y)
    assert not r.feasible and r.bounds["recall >= 0.8"] < 0.8


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"threshold": "0.5"}, "threshold must be a finite number"),
    ({"threshold": math.nan}, "threshold must be a finite number"),
    ({"passes": 0}, "passes must be a positive integer"),
    ({"passes": True}, "passes must be a positive integer"),
    ({"confidence": 1.0}, "confidence must be a number strictly between 0 and 1"),
])
def test_bad_options_are_refused(kwargs, message):
    with pytest.raises(MetricError, match=message):
        BestFeasible(M, **kwargs)


def test_needs_constraints_and_rates_for_confidence():
    with pytest.raises(MetricError, match="needs a metric compiled with constraints"):
        BestFeasible(metricc.compile("f1"))
    with pytest.raises(MetricError, match="not a rate of counts"):
        BestFeasible(metricc.compile("precision subject to recall >= precision"), confidence=0.9)
    with pytest.raises(MetricError, match="only 0 and 1"):
        BestFeasible(M).update(0, [0.2, 0.7], [0, 2])


def _shifted(seed: int, shift: float, offset: float, n: int = 400):
    """A pass whose scores move by ``offset``: higher predicts more positives (recall up,
    precision down)."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(int)
    return 1 / (1 + np.exp(-rng.normal(shift * (2 * y - 1) + offset, 1.0))), y


# precise and feasible, hopeless, less precise but feasible, feasible, hopeless again
LATEST_PASSES = [(0, 2.0, 0.0), (1, 0.3, -1.0), (2, 2.0, 1.0), (3, 1.5, 0.5), (4, 0.3, -1.0)]


def test_keep_latest_keeps_the_last_feasible_pass_and_a_copy_of_its_state():
    latest, best = BestFeasible(M, keep="latest"), BestFeasible(M)
    assert (latest.keep, best.keep) == ("latest", "best")
    state = {"w": torch.zeros(3)}
    expect = []
    for step, (seed, shift, offset) in enumerate(LATEST_PASSES):
        p, y = _shifted(seed, shift, offset)
        state["w"] += 1
        latest.update(step, p, y, state=state)
        best.update(step, p, y, state=state)
        pred = (p >= 0.5).astype(int)
        expect.append((step, recall_score(y, pred) >= 0.8, precision_score(y, pred)))
    state["w"].fill_(-7.0)  # the caller's tensor changes in place after the last update
    feasible = [e for e in expect if e[1]]
    last, top = feasible[-1], max(feasible, key=lambda e: e[2])
    assert last[0] != top[0] and not expect[-1][1]  # the two rules pick different passes
    assert latest.found and latest.result() is latest.best and latest.best.step == last[0]
    assert latest.best.value == pytest.approx(last[2], rel=1e-12)
    assert torch.equal(latest.best_state["w"], torch.full((3,), float(last[0] + 1)))
    # keep="best" is today's rule, unchanged by the option
    assert best.best.step == top[0] and best.best.value == pytest.approx(top[2], rel=1e-12)
    assert torch.equal(best.best_state["w"], torch.full((3,), float(top[0] + 1)))
    assert latest.history == best.history  # same judgement of every pass, another choice
    # a later feasible pass replaces the kept one even when its objective is worse
    p, y = _shifted(5, 2.0, 1.5)
    r = latest.update(9, p, y, state={"w": "later"})
    assert r.feasible and r.value < top[2] and latest.best is r and latest.best_state == {"w": "later"}


def test_keep_latest_with_confidence_keeps_the_last_certified_pass():
    # the last pass meets recall >= 0.8 as a plain rate (34/40) but is not certified at 0.9
    plain = np.r_[np.full(34, 0.9), np.full(6, 0.1), np.full(60, 0.2)], np.r_[np.ones(40), np.zeros(60)]
    passes = [_shifted(0, 2.0, 0.0), _shifted(2, 2.0, 1.0), plain]
    keep = BestFeasible(M, confidence=0.9, keep="latest")
    certified = []
    for s, (p, y) in enumerate(passes, start=1):
        r = keep.update(s, p, y, state=s)
        tp, _, fn, _ = r.counts
        low = stats.beta.ppf(0.1 / (s * (s + 1)), tp, fn + 1)
        assert r.bounds["recall >= 0.8"] == pytest.approx(low, rel=1e-12)
        certified.append(low >= 0.8)
    assert certified == [True, True, False]
    assert keep.best.step == 2 and keep.best_state == 2
    # without confidence the plain-feasible last pass is the latest; keep="best" the first
    loose = BestFeasible(M, keep="latest")
    for s, (p, y) in enumerate(passes, start=1):
        loose.update(s, p, y)
    assert loose.best.step == 3
    strict_best = BestFeasible(M, confidence=0.9)
    for s, (p, y) in enumerate(passes, start=1):
        strict_best.update(s, p, y)
    assert strict_best.best.step == 1


def test_keep_latest_without_a_feasible_pass_says_so():
    keep = BestFeasible(metricc.compile("precision subject to recall >= 0.99"), threshold=0.9,
                        keep="latest")
    with pytest.raises(MetricError, match="judged no pass yet"):
        keep.result()
    keep.update(0, *_pass(0, 0.5))
    assert not keep.found
    with pytest.raises(MetricError, match=r"no pass of 1 met every constraint at threshold 0\.9"):
        keep.result()


@pytest.mark.parametrize("value", ["last", "LATEST", "", None, 1])
def test_keep_must_be_best_or_latest(value):
    with pytest.raises(MetricError, match=r"keep=.* is not one of 'best', 'latest'") as err:
        BestFeasible(M, keep=value)
    assert ("did you mean 'latest'?" in str(err.value)) == (value in ("last", "LATEST"))


def test_the_kept_pass_survives_pickling_and_deepcopy():
    keep = BestFeasible(M, keep="latest")
    for step, (seed, shift, offset) in enumerate(LATEST_PASSES[:3]):
        keep.update(step, *_shifted(seed, shift, offset), state={"step": step})
    for twin in (pickle.loads(pickle.dumps(keep)), copy.deepcopy(keep)):
        assert twin.keep == "latest" and twin.best == keep.best and twin.best_state == {"step": 2}
        assert twin.history == keep.history
        twin.update(7, *_shifted(5, 2.0, 1.5), state={"step": 7})
        assert twin.best.step == 7 and keep.best.step == 2  # the copy is independent
