"""Input mistakes that used to pass silently or with a misleading message (issue 11, point 9)."""

from __future__ import annotations

import warnings

import pytest
import torch

import metricc

F1 = metricc.compile("f1")


def test_multilabel_with_class_index_targets_names_the_shape() -> None:
    with pytest.raises(metricc.MetricError, match=r"shape of class indices.*mode='multiclass'"):
        F1.loss(mode="multilabel")(torch.rand(2, 3, 4), torch.randint(0, 3, (2, 4)))


def test_probabilities_passed_as_logits_warn() -> None:
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(2, 3, 8), 1)
    y = torch.randint(0, 3, (2, 8))
    with pytest.warns(metricc.MetricWarning, match="looks like probabilities.*sum to 1"):
        F1.loss(mode="multiclass", from_logits=True)(probs, y)
    with pytest.warns(metricc.MetricWarning, match="all 100 scores lie in"):
        F1.loss(from_logits=True)(torch.rand(100), (torch.rand(100) < 0.5).float())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F1.loss(from_logits=True)(torch.randn(100), (torch.rand(100) < 0.5).float())
        F1.loss(mode="multiclass", from_logits=True)(torch.randn(2, 3, 8), y)
        F1.loss(from_logits=True)(torch.rand(10), (torch.rand(10) < 0.5).float())  # too few to tell
        F1.loss(from_logits=True, validate_args=False)(torch.rand(100), (torch.rand(100) < 0.5).float())


def test_validate_checks_what_a_compiled_loss_will_not() -> None:
    loss = F1.loss(validate_args=False)
    x = torch.tensor([0.2, float("nan")])
    loss(x, torch.tensor([0.0, 1.0]))  # no data checks
    with pytest.raises(metricc.MetricError, match="NaN"):
        loss.validate(x, torch.tensor([0.0, 1.0]))
    assert loss.validate(torch.tensor([0.2, 0.9]), torch.tensor([0.0, 1.0])) is None
