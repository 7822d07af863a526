"""Silent inputs and errors without hints (issue 27, points 3 and 4): each mistake gets a
MetricError or a MetricWarning that says what to do."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import metricc
from metricc.runtime import hints


@pytest.fixture(scope="module")
def f1() -> metricc.Metric:
    return metricc.compile("f1")


@pytest.fixture(autouse=True)
def _fresh_hint_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hints keep a little state per process (a run of scores, warned ignore indices)."""
    monkeypatch.setattr(hints, "_IN_UNIT_RUN", [0], raising=False)
    monkeypatch.setattr(hints, "_IGNORE_WARNED", set(), raising=False)


def _labels(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, generator=g) > 0.5).float()


# --- 3: silent inputs ----------------------------------------------------------------------
def test_probabilities_as_logits_in_small_batches_warn_over_steps(f1: metricc.Metric) -> None:
    loss = f1.loss(from_logits=True)
    g = torch.Generator().manual_seed(1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for step in range(8):  # 8 batches of 8 probabilities: 64 scores in [0, 1]
            loss(torch.rand(8, generator=g), _labels(8, step))
    hits = [w for w in seen if "looks like probabilities" in str(w.message)]
    assert len(hits) == 1 and "over several batches" in str(hits[0].message)


def test_true_logits_in_small_batches_never_warn(f1: metricc.Metric) -> None:
    loss = f1.loss(from_logits=True)
    g = torch.Generator().manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", metricc.MetricWarning)
        for step in range(40):  # logits of spread 3: a batch outside [0, 1] resets the run
            loss(3 * torch.randn(8, generator=g), _labels(8, step))


def test_integer_predictions_other_than_0_1_are_refused_by_metric(f1: metricc.Metric) -> None:
    m = f1.metric()
    with pytest.raises(metricc.MetricError, match=r"integers other than 0 and 1 \(3\).*from_logits"):
        m.update(torch.tensor([3, 0, 1]), torch.tensor([1, 0, 1]))
    m.update(torch.tensor([1, 0, 1]), torch.tensor([1, 0, 1]))  # 0/1 labels still count
    assert float(m.compute()) == 1.0


def test_ignore_index_dropping_every_positive_warns_once(f1: metricc.Metric) -> None:
    loss = f1.loss(from_logits=True, ignore_index=255)
    mask = (torch.rand(2, 8, 8, generator=torch.Generator().manual_seed(3)) > 0.5).long() * 255
    with pytest.warns(metricc.MetricWarning, match=r"ignore_index=255 removed every positive.*target / 255"):
        loss(torch.randn(2, 8, 8), mask)
    with warnings.catch_warnings():
        warnings.simplefilter("error", metricc.MetricWarning)
        loss(torch.randn(2, 8, 8), mask)  # said once
        # a real void label beside real positives says nothing
        f1.loss(from_logits=True, ignore_index=254)(torch.randn(4), torch.tensor([0, 1, 254, 1]))


@pytest.mark.parametrize("formula", ["exp(exp(exp(TP)))", "TP^TP^TP"])
def test_overflowing_formula_is_a_metric_error_not_minus_inf(formula: str) -> None:
    m = metricc.compile(formula)
    loss = m.loss(from_logits=True, warn_monotonicity=False)
    x = torch.randn(100, generator=torch.Generator().manual_seed(4), requires_grad=True)
    with pytest.raises(metricc.MetricError, match=rf"loss of '{re.escape(formula)}' is -inf.*overflows"):
        loss(x, _labels(100))
    with pytest.raises(metricc.MetricError, match="overflows float64"):
        m.value(5, 1, 1, 1)


def test_best_threshold_on_one_class_warns(f1: metricc.Metric) -> None:
    scores = torch.rand(10, generator=torch.Generator().manual_seed(5))
    with pytest.warns(metricc.MetricWarning, match=r"every one of the 10 targets is positive.*both classes"):
        f1.best_threshold(scores, torch.ones(10))
    with warnings.catch_warnings():
        warnings.simplefilter("error", metricc.MetricWarning)
        f1.best_threshold(scores, torch.tensor([0, 1] * 5))


# --- 4: errors without hints ---------------------------------------------------------------
@pytest.mark.parametrize("call", ["loss", "score", "metric"])
def test_0_255_targets_get_one_message_everywhere(f1: metricc.Metric, call: str) -> None:
    preds, target = torch.tensor([0.2, 0.9, 0.7, 0.1]), torch.tensor([0, 255, 255, 0])
    with pytest.raises(metricc.MetricError) as e:
        if call == "loss":
            f1.loss()(preds, target)
        elif call == "score":
            f1.score(preds, target)
        else:
            f1.metric().update(preds, target)
    text = str(e.value)
    assert "binary targets" in text and "target / 255" in text and "multilabel" not in text


def test_swapped_arguments_of_a_binary_metric_say_so(f1: metricc.Metric) -> None:
    with pytest.raises(metricc.MetricError, match=r"binary targets.*swapped\? update takes \(preds, target\)"):
        f1.metric().update(torch.tensor([0, 1, 1, 0]), torch.tensor([0.2, 0.9, 0.6, 0.1]))


@pytest.mark.parametrize(("call", "match"), [
    (lambda m: m.score([1, 0], [1, 0], averag="macro"), r"score\(\) has no option 'averag' \(did you mean 'average'"),
    (lambda m: m.value(1, 2, 3, 4, zero_divison=0), r"did you mean 'zero_division'"),
    (lambda m: m.metric(num_class=3), r"metric\(\) has no option 'num_class' \(did you mean 'num_classes'"),
    (lambda m: m.metric(task="multiclass"), r"task= is mode= here"),
    (lambda m: m.best_threshold([0.1, 0.9], [0, 1], constraint=["recall >= 0.5"]), r"'constraints'"),
    (lambda m: m.loss(from_logit=True), r"did you mean 'from_logits'"),
])
def test_misspelt_options_are_metric_errors_with_did_you_mean(f1: metricc.Metric, call, match) -> None:
    with pytest.raises(metricc.MetricError, match=match):
        call(f1)


def test_matrix_metric_options_are_checked_the_same_way() -> None:
    q = metricc.compile("quadratic_kappa")
    with pytest.raises(metricc.MetricError, match=r"did you mean 'num_classes'"):
        q.metric(num_clases=3)
    with pytest.raises(metricc.MetricError, match=r"did you mean 'zero_division'"):
        q.value([[1, 0], [0, 1]], zero_divison=0)
    assert q.metric(num_classes=3, sync_on_compute=False).num_classes == 3  # torchmetrics' own


@pytest.mark.parametrize("formula", ["f1", "precision subject to recall >= 0.5", "quadratic_kappa",
                                     "auroc"])
def test_verify_options_of_every_statistic_are_checked_the_same_way(formula: str) -> None:
    """A verify() typo is a MetricError naming the options (the 2x2 one was a bare TypeError)."""
    with pytest.raises(metricc.MetricError,
                       match=r"verify\(\) has no option 'sed' \(did you mean 'seed'\?\); its options are seed"):
        metricc.compile(formula).verify(sed=1)


@pytest.mark.parametrize(("typo", "meant"), [("qkw", "qwk"), ("dcie", "dice"), ("acuracy", "accuracy")])
def test_short_typos_get_did_you_mean(typo: str, meant: str) -> None:
    with pytest.raises(metricc.MetricError, match=rf"did you mean '{meant}'"):
        metricc.compile(typo)


def test_python_conditional_in_a_formula_is_explained() -> None:
    with pytest.raises(metricc.MetricSyntaxError) as e:
        metricc.compile("TP/(TP+FP) if TP else 0")
    text = str(e.value)
    assert "no conditionals" in text and "max/min" in text and "*if" not in text
