"""One runtime loss base (issue 34, point 3): the 2x2, K x K and curve losses subclass
``StatisticLoss``, which holds the options, pool, input checks, memory reset and repr they share."""

from __future__ import annotations

import pytest
import torch

import metricc
from metricc.analysis.statistics import STATISTICS, resolve
from metricc.runtime.loss_base import StatisticLoss

#: A named metric of each statistic.
EXAMPLES = ("f1", "quadratic_kappa", "auroc", "equal_opportunity_difference")


def _by_statistic() -> dict[str, metricc.Metric]:
    metrics = {m.statistic.name: m for m in map(metricc.compile, EXAMPLES)}
    assert set(metrics) == set(STATISTICS), "add a metric of the new statistic to EXAMPLES"
    return metrics


@pytest.mark.parametrize("statistic", sorted(STATISTICS))
def test_every_statistic_loss_subclasses_the_one_base_and_keeps_no_copy(statistic: str) -> None:
    cls = resolve(STATISTICS[statistic].loss_class)
    assert issubclass(cls, StatisticLoss)
    for shared in ("reset_memory", "extra_repr", "validate", "formula", "source", "higher_is_better"):
        assert shared not in vars(cls), f"{cls.__name__} keeps its own {shared}"
    assert issubclass(_by_statistic()[statistic].loss_class, cls)


def test_every_loss_shows_its_memory_sync_and_validation_options() -> None:
    for statistic, m in _by_statistic().items():
        text = repr(m.loss(memory_decay=0.9, validate_args=False, eps=1e-6))
        for part in ("memory_decay=0.9", "eps=1e-06", "validate_args=False", "from_logits=False"):
            assert part in text, (statistic, part, text)
        plain = repr(m.loss())
        assert "memory_decay" not in plain and "validate_args" not in plain, plain
    assert "backward='symbolic'" in repr(metricc.compile("quadratic_kappa").loss())
    assert "backward" not in repr(metricc.compile("auroc").loss())  # one backward only
    for text in ("sum(i, C[i,i]) / n", "area(recall, fpr)", "TP/(TP+FP)"):
        assert repr(metricc.compile(text).loss()).split("(", 1)[1].startswith(f"formula={text!r}")


def test_every_loss_validates_on_demand_with_validate_args_off() -> None:
    nan = torch.tensor([0.2, float("nan"), 0.7, 0.1], dtype=torch.float64)
    binary = torch.tensor([0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    cases = {"counts": (nan, binary), "curve": (nan, binary), "groups": (nan, binary),
             "matrix": (torch.rand(4, 3, dtype=torch.float64), torch.tensor([0, 1, 3, 2]))}
    for statistic, m in _by_statistic().items():
        loss = m.loss(validate_args=False)
        x, y = cases[statistic]
        with pytest.raises(metricc.MetricError, match=r"NaN|class index 3"):
            loss.validate(x, y)
    with pytest.raises(metricc.MetricError, match=r"shape \(N, K, \*\)"):  # the K x K rules first
        metricc.compile("quadratic_kappa").loss().validate(torch.rand(4), torch.tensor([0, 1, 1, 0]))


def test_reset_memory_forgets_past_batches_in_every_statistic() -> None:
    g = torch.Generator().manual_seed(0)
    x2, y2 = torch.randn(32, generator=g, dtype=torch.float64), (torch.rand(32, generator=g) < 0.4).double()
    xk, yk = torch.randn(32, 3, generator=g, dtype=torch.float64), torch.randint(0, 3, (32,), generator=g)
    groups = torch.arange(32) % 2
    data = {"counts": (x2, y2), "curve": (x2, y2), "matrix": (xk, yk), "groups": (x2, y2, groups)}
    for statistic, m in _by_statistic().items():
        x, y, *extra = data[statistic]
        fresh = m.loss(from_logits=True)(x.requires_grad_(), y, *extra)
        loss = m.loss(from_logits=True, memory_decay=0.5)
        loss(x.flip(0), y, *extra)  # remembered: another pairing of scores and labels
        assert not torch.equal(loss(x, y, *extra), fresh), statistic
        loss.reset_memory()
        torch.testing.assert_close(loss(x, y, *extra), fresh, rtol=0, atol=0)
