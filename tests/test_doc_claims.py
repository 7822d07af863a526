"""Statements in docs/modes.md a reader could check, checked (issue 11, point 10)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, fbeta_score

import metricc


@pytest.mark.parametrize(("name", "trainable"), [("mcc", False), ("accuracy", True), ("specificity", True)])
def test_gradient_on_an_all_negative_batch(name: str, trainable: bool) -> None:
    """MCC is 0 for every prediction when no target is positive, so its gradient is exactly zero;
    accuracy and specificity still move the scores through TN."""
    torch.manual_seed(0)
    x = torch.randn(64, dtype=torch.float64, requires_grad=True)
    y = torch.zeros(64, dtype=torch.float64)
    for backward in ("symbolic", "autograd"):
        x.grad = None
        loss = metricc.compile(name).loss("linear", from_logits=True, backward=backward)
        loss(x, y).backward()
        assert torch.isfinite(x.grad).all()
        if trainable:
            assert x.grad.abs().max() > 1e-4
        else:
            assert torch.equal(x.grad, torch.zeros_like(x.grad))


def _multilabel_cases(seed: int, n: int = 40) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        rows, labels = int(rng.integers(2, 8)), int(rng.integers(2, 5))
        y = (rng.random((rows, labels)) < 0.3).astype(int)
        p = (rng.random((rows, labels)) < 0.3).astype(int)
        if y.any() or p.any():
            cases.append((y, p))
    return cases


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")
@pytest.mark.parametrize(("m", "reference"), [(metricc.compile("f1"), f1_score),
                                              (metricc.compile("fbeta", beta=2), partial(fbeta_score, beta=2))])
def test_multilabel_averages_match_scikit_learn_as_documented(m: metricc.Metric, reference) -> None:
    for y, p in _multilabel_cases(1):
        args = (torch.tensor(p, dtype=torch.float32), torch.tensor(y))
        # macro leaves out labels with neither target nor prediction: zero_division=np.nan
        got = m.score(*args, mode="multilabel", average="macro")
        assert got == pytest.approx(reference(y, p, average="macro", zero_division=np.nan), abs=1e-12)
        # micro and weighted agree with scikit-learn's default
        for average in ("micro", "weighted"):
            got = m.score(*args, mode="multilabel", average=average, zero_division=0.0)
            assert got == pytest.approx(reference(y, p, average=average), abs=1e-12)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")
def test_the_documented_multilabel_example() -> None:
    y = np.array([[1, 0], [1, 0], [0, 0]])
    got = metricc.compile("f1").score(torch.tensor(y, dtype=torch.float32), torch.tensor(y), mode="multilabel")
    assert got == 1.0
    assert f1_score(y, y, average="macro", zero_division=np.nan) == 1.0
    assert f1_score(y, y, average="macro") == 0.5  # scikit-learn's default: the absent label scores 0


def test_monai_weight_is_class_weights_times_their_mean() -> None:
    """MONAI's ``weight=`` multiplies each class's loss before a plain mean (written out here from
    monai.losses.DiceLoss 1.6): that is metricc's weighted mean times ``mean(weight)``."""
    torch.manual_seed(1)
    logits = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    target = torch.randint(0, 3, (2, 8, 8))
    weight = torch.tensor([0.2, 1.0, 3.0], dtype=torch.float64)
    eps = 1e-7
    p = torch.softmax(logits, 1)
    onehot = torch.nn.functional.one_hot(target, 3).permute(0, 3, 1, 2).to(p.dtype)
    tp = (p * onehot).sum((0, 2, 3))
    fp = (p * (1 - onehot)).sum((0, 2, 3))
    fn = ((1 - p) * onehot).sum((0, 2, 3))
    monai = ((1 - 2 * tp / (2 * tp + fp + fn + eps)) * weight).mean()
    ours = metricc.compile("dice").loss("linear", mode="multiclass", from_logits=True,
                                        class_weights=weight.tolist(), eps=eps)(logits, target)
    torch.testing.assert_close(ours * weight.mean(), monai, rtol=1e-9, atol=1e-12)
    assert not torch.allclose(ours, monai)
