"""``Metric.score``: logits (``from_logits``), refused out-of-range scores, samplewise scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, jaccard_score

import metricc

F1 = metricc.compile("f1")


def test_logits_are_refused_without_from_logits() -> None:
    torch.manual_seed(0)
    logits = torch.randn(200) - 1.0
    y = (torch.rand(200) < 0.3).long()
    with pytest.raises(metricc.MetricError, match=r"outside \[0, 1\].*from_logits=True"):
        F1.score(logits, y)
    want = f1_score(y.numpy(), (torch.sigmoid(logits) >= 0.5).long().numpy())
    assert F1.score(logits, y, from_logits=True) == pytest.approx(want, abs=1e-12)
    # the old silent answer (logits thresholded at 0.5) is a different number
    assert f1_score(y.numpy(), (logits >= 0.5).long().numpy()) != pytest.approx(want)
    # threshold applies to sigmoid(logit)
    want_07 = f1_score(y.numpy(), (torch.sigmoid(logits) >= 0.7).long().numpy())
    assert F1.score(logits, y, 0.7, from_logits=True) == pytest.approx(want_07, abs=1e-12)
    # an explicit threshold without from_logits is on the scores' own scale (a logit cut)
    want_logit = f1_score(y.numpy(), (logits >= -0.3).long().numpy())
    assert F1.score(logits, y, -0.3) == pytest.approx(want_logit, abs=1e-12)


def test_multilabel_logits_and_integer_labels() -> None:
    torch.manual_seed(1)
    logits = torch.randn(30, 4)
    y = (torch.rand(30, 4) < 0.4).long()
    with pytest.raises(metricc.MetricError, match="from_logits=True"):
        F1.score(logits, y, mode="multilabel")
    got = F1.score(logits, y, mode="multilabel", from_logits=True, average="micro")
    assert got == pytest.approx(f1_score(y.numpy(), (logits >= 0).long().numpy(), average="micro"))
    with pytest.raises(metricc.MetricError, match="integers other than 0 and 1"):
        F1.score(torch.tensor([0, 2, 1]), torch.tensor([0, 1, 1]))


def _keep(y: np.ndarray, p: np.ndarray) -> bool:
    return bool(y.any() or p.any())


@pytest.mark.parametrize("name", ["f1", "jaccard"])
def test_binary_samplewise_matches_scikit_learn_per_sample(name: str) -> None:
    reference = {"f1": f1_score, "jaccard": jaccard_score}[name]
    m = metricc.compile(name)
    rng = np.random.default_rng(2)
    probs = rng.random((12, 5, 5))
    y = (rng.random((12, 5, 5)) < 0.2).astype(int)
    y[3] = 0
    probs[3] = 0.1  # neither target nor prediction: left out of the mean, as the loss does
    hard = (probs >= 0.5).astype(int)
    per = [reference(y[i].ravel(), hard[i].ravel()) for i in range(12) if _keep(y[i], hard[i])]
    args = (torch.tensor(probs), torch.tensor(y))
    assert m.score(*args, multidim_average="samplewise") == pytest.approx(np.mean(per), abs=1e-12)
    assert m.score(*args, multidim_average="samplewise", reduction="sum") == pytest.approx(np.sum(per))
    each = m.score(*args, multidim_average="samplewise", reduction="none", zero_division=0.0)
    assert each.shape == (12,) and each.dtype == torch.float64
    assert float(each[0]) == pytest.approx(reference(y[0].ravel(), hard[0].ravel()))


def test_multiclass_samplewise_matches_scikit_learn_per_sample() -> None:
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6, 4, 3, 3))
    y = rng.integers(0, 4, size=(6, 3, 3))
    pred = logits.argmax(1)
    for average in ("macro", "micro", "weighted"):
        per = [f1_score(y[i].ravel(), pred[i].ravel(), average=average) for i in range(6)]
        got = F1.score(torch.tensor(logits), torch.tensor(y), mode="multiclass", average=average,
                       multidim_average="samplewise")
        assert got == pytest.approx(np.mean(per), abs=1e-12)


def test_samplewise_score_is_one_minus_the_samplewise_loss_at_hard_predictions() -> None:
    """At 0/1 predictions the linear-relaxation loss is 1 - score, sample by sample."""
    torch.manual_seed(4)
    y = (torch.rand(8, 16) < 0.3).double()
    hard = (torch.rand(8, 16) < 0.3).double()
    loss = F1.loss("linear", multidim_average="samplewise", reduction="none", eps=0.0,
                   warn_monotonicity=False)
    score = F1.score(hard, y, multidim_average="samplewise", reduction="none", zero_division=0.0)
    present = (y.sum(1) + hard.sum(1)) > 0
    torch.testing.assert_close((1 - loss(hard, y))[present], score[present].to(torch.float64))


def test_bad_samplewise_options() -> None:
    with pytest.raises(metricc.MetricError, match="multidim_average"):
        F1.score([0.2], [1], multidim_average="per_sample")
    with pytest.raises(metricc.MetricError, match="reduction"):
        F1.score([0.2], [1], multidim_average="samplewise", reduction="avg")
