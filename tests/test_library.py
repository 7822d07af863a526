"""Every named metric agrees with scikit-learn on hard labels."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from oracles import sklearn_reference

import metricc
from metricc.library import ALIASES, METRICS, lookup

REQUIRED = """accuracy balanced_accuracy precision recall specificity npv fpr fnr fdr f1 fbeta jaccard dice
tversky mcc cohen_kappa g_mean informedness markedness fowlkes_mallows prevalence_threshold lr_plus
lr_minus diagnostic_odds_ratio error_rate""".split()
REQUIRED_ALIASES = {"iou": "jaccard", "sensitivity": "recall", "tpr": "recall", "tnr": "specificity",
                    "ppv": "precision", "youden_j": "informedness", "phi": "mcc"}


def test_required_names_and_aliases() -> None:
    assert set(REQUIRED) <= set(METRICS)
    for alias, name in REQUIRED_ALIASES.items():
        assert ALIASES[alias] == name
        assert metricc.compile(alias).expr == metricc.compile(name).expr


def test_lower_is_better_metrics() -> None:
    lower = {n for n, m in METRICS.items() if not m.higher_is_better}
    assert lower == {"fpr", "fnr", "fdr", "prevalence_threshold", "lr_minus", "error_rate"}


def _random_labels(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    # Resample until every count is nonzero, so every metric is defined.
    while True:
        y = (rng.random(n) < rng.uniform(0.1, 0.6)).astype(int)
        yhat = np.where(rng.random(n) < 0.7, y, 1 - y)
        tp = int(((y == 1) & (yhat == 1)).sum())
        fp = int(((y == 0) & (yhat == 1)).sum())
        fn = int(((y == 1) & (yhat == 0)).sum())
        tn = int(((y == 0) & (yhat == 0)).sum())
        if min(tp, fp, fn, tn) > 0 and tp / (tp + fn) != fp / (fp + tn):
            return y, yhat


PARAMS = {"fbeta": [{}, {"beta": 2.0}, {"beta": 0.5}], "tversky": [{}, {"alpha": 0.3, "beta": 0.7}]}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(METRICS))
def test_agrees_with_sklearn(name: str) -> None:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for params in PARAMS.get(name, [{}]):
        m = metricc.compile(name, **params)
        ref = sklearn_reference(name, **params)
        for n in (7, 50, 400):
            y, yhat = _random_labels(rng, n)
            want = ref(y, yhat)
            assert m.score(torch.tensor(yhat), torch.tensor(y)) == pytest.approx(want, rel=1e-9, abs=1e-12)
            probs = np.where(yhat == 1, rng.uniform(0.5, 1.0, n), rng.uniform(0.0, 0.4999, n))
            assert m.score(probs, y, threshold=0.5) == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_every_metric_records_its_reference() -> None:
    for m in METRICS.values():
        assert lookup(m.name) is m
        assert m.description
        if m.name in {"f1", "mcc", "cohen_kappa", "jaccard", "balanced_accuracy", "accuracy"}:
            assert m.sklearn is not None


def test_value_undefined_raises_or_uses_zero_division() -> None:
    m = metricc.compile("precision")
    with pytest.raises(metricc.MetricError, match="zero_division"):
        m.value(tp=0, fp=0, fn=3, tn=4)
    assert m.value(tp=0, fp=0, fn=3, tn=4, zero_division=0.0) == 0.0
    t = m.value(tp=torch.tensor([1.0, 0.0]), fp=torch.tensor([1.0, 0.0]), fn=0, tn=0, zero_division=1.0)
    assert t.tolist() == [0.5, 1.0]


def test_value_broadcasts_tensors() -> None:
    m = metricc.compile("f1")
    tp = torch.arange(1.0, 5.0)
    out = m.value(tp=tp, fp=torch.tensor(2.0), fn=torch.tensor(1.0), tn=0)
    assert torch.allclose(out, 2 * tp / (2 * tp + 3))


def test_score_input_errors() -> None:
    m = metricc.compile("f1")
    with pytest.raises(metricc.MetricError, match="same shape"):
        m.score([0.1, 0.9], [0, 1, 1])
    with pytest.raises(metricc.MetricError, match="divide by 255"):
        m.score([0.1, 0.9], [0, 255])
