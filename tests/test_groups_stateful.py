"""GroupStatefulMetric (metricc.evaluate.groups_stateful): the G x 4 hard counts summed over
batches (and ranks); compute() equals GroupMetric.score on all the data at once."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from ddp_launch import rank_logs, run_ranks
from script_loader import load_script

import metricc
from metricc.evaluate.groups_stateful import GroupStatefulMetric
from metricc.language.parse import parse

FORMULAS = ["equalized_odds_difference", "demographic_parity_ratio", "worst_group_accuracy",
            "accuracy - 0.5*gap(fpr)", "vsrest(recall)", "groupmean(precision)"]


def _batches(seed: int, G: int = 3, sizes: tuple[int, ...] = (17, 9)) -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        y = (torch.rand(n, generator=gen) < 0.5).long()
        g = torch.randint(0, G, (n,), generator=gen)
        out.append((torch.randn(n, generator=gen), y, g))
    # every group has positives and negatives over the whole data
    ids = torch.arange(2 * G) % G
    out.append((torch.randn(2 * G, generator=gen), (torch.arange(2 * G) < G).long(), ids))
    return out


def _cat(batches: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    return tuple(torch.cat(parts) for parts in zip(*batches, strict=True))


@pytest.mark.parametrize("formula", FORMULAS)
@pytest.mark.parametrize("num_groups", [None, 3])
def test_compute_over_batches_equals_score_on_all_data(formula: str, num_groups: int | None) -> None:
    m = metricc.compile(formula)
    for seed in range(3):
        batches = _batches(seed)
        s = m.metric(num_groups=num_groups, from_logits=True, threshold=0.4, zero_division=0)
        for batch in batches:
            s.update(*batch)
        x, y, g = _cat(batches)
        want = m.score(x, y, groups=g.numpy(), from_logits=True, threshold=0.4, zero_division=0)
        assert float(s.compute()) == want, (formula, seed)


def test_soft_memberships_and_per_group_thresholds_equal_score() -> None:
    m = metricc.compile("equal_opportunity_difference")
    gen = torch.Generator().manual_seed(3)
    x, y = torch.rand(40, generator=gen), (torch.rand(40, generator=gen) < 0.5).long()
    soft = torch.rand(40, 3, generator=gen, dtype=torch.float64)
    soft = soft / soft.sum(1, keepdim=True)
    s = m.metric()
    s.update(x[:25], y[:25], soft[:25])
    s.update(x[25:], y[25:], soft[25:])
    assert float(s.compute()) == pytest.approx(m.score(x, y, groups=soft.numpy()), abs=1e-12)
    ids = torch.arange(40) % 3
    t = m.metric(num_groups=3, threshold=[0.3, 0.5, 0.7])
    t.update(x[:10], y[:10], ids[:10])
    t.update(x[10:], y[10:], ids[10:])
    assert float(t.compute()) == m.score(x, y, groups=ids.numpy(), threshold=[0.3, 0.5, 0.7])


def test_a_group_never_seen_takes_no_part() -> None:
    """num_groups=4 but id 3 never occurs: the value of the three groups seen, as score()."""
    m = metricc.compile("demographic_parity_difference")
    x, y, g = _cat(_batches(5))
    s = m.metric(num_groups=4, from_logits=True)
    s.update(x, y, g)
    assert float(s.compute()) == m.score(x, y, groups=g.numpy(), from_logits=True)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_growing_state_and_reset() -> None:
    s = GroupStatefulMetric(parse("gap(PP/n)").expr, "dp", zero_division=0)
    s.update(torch.tensor([0.9, 0.1]), torch.tensor([1, 0]), torch.tensor([0, 0]))
    assert tuple(s.counts.shape) == (1, 4)
    s.update(torch.tensor([0.9, 0.8]), torch.tensor([1, 0]), torch.tensor([2, 2]))
    assert tuple(s.counts.shape) == (3, 4)
    assert float(s.compute()) == 0.5  # selection 1/2 in group 0, 1 in group 2; group 1 unseen
    s.reset()
    assert tuple(s.counts.shape) == (0, 4)
    with pytest.raises(metricc.MetricError, match="before any update"):
        s.compute()
    fixed = GroupStatefulMetric(parse("gap(PP/n)").expr, "dp", num_groups=2)
    fixed.update(torch.tensor([0.9]), torch.tensor([1]), torch.tensor([1]))
    fixed.reset()
    assert tuple(fixed.counts.shape) == (2, 4) and not bool(fixed.counts.any())


def test_pickle_and_clone_keep_formula_and_counts() -> None:
    m = metricc.compile("equalized_odds_difference")
    s = m.metric(num_groups=3, zero_division=0, from_logits=True)
    for batch in _batches(1):
        s.update(*batch)
    for copy in (pickle.loads(pickle.dumps(s)), s.clone()):
        assert float(copy.compute()) == float(s.compute())
        assert copy.higher_is_better is False
        assert torch.equal(copy.counts, s.counts)


def test_undefined_group_names_it_without_zero_division() -> None:
    s = metricc.compile("equal_opportunity_difference").metric()
    s.update(torch.tensor([0.9, 0.2, 0.6]), torch.tensor([1, 0, 1]), torch.tensor([0, 1, 0]))
    with pytest.raises(metricc.MetricError, match="undefined in group 1"):
        s.compute()


@pytest.mark.parametrize("args, kwargs, message", [
    (([0.5], [1], [0]), {}, "takes tensors"),
    ((torch.tensor([0.5]), torch.tensor([2]), torch.tensor([0])), {}, "0 and 1"),
    ((torch.tensor([1.5]), torch.tensor([1]), torch.tensor([0])), {}, r"probabilities in \[0, 1\]"),
    ((torch.tensor([0.5]), torch.tensor([1]), torch.tensor([3])), {"num_groups": 2}, r"ids must lie in \[0, 2\)"),
    ((torch.tensor([0.5]), torch.tensor([1]), torch.tensor([-1])), {}, "ids must lie"),
    ((torch.tensor([0.5, 0.1]), torch.tensor([1, 0]), torch.tensor([0])), {}, "one id per prediction"),
    ((torch.tensor([0.5]), torch.tensor([1]), torch.tensor([[0.3, 0.3]])), {}, "sum to 1"),
    ((torch.tensor([0.5]), torch.tensor([1]), torch.tensor([True])), {}, "integer group ids"),
    ((torch.tensor([float("nan")]), torch.tensor([1]), torch.tensor([0])), {}, "NaN"),
])
def test_bad_updates_are_metric_errors(args: tuple, kwargs: dict, message: str) -> None:
    s = GroupStatefulMetric(parse("gap(recall)").expr, "gap(recall)", **kwargs)
    with pytest.raises(metricc.MetricError, match=message):
        s.update(*args)


@pytest.mark.parametrize("kwargs, message", [
    ({"num_groups": 0}, "num_groups must be a positive int"),
    ({"threshold": [0.3, 0.5]}, "needs num_groups"),
    ({"threshold": float("nan")}, "not NaN"),
    ({"zero_division": "0"}, "zero_division must be a number"),
    ({"from_logits": 1}, "from_logits must be True or False"),
])
def test_bad_options_are_metric_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(metricc.MetricError, match=message):
        GroupStatefulMetric(parse("gap(recall)").expr, "gap(recall)", **kwargs)


def test_facade_refuses_options_the_metric_does_not_take() -> None:
    with pytest.raises(metricc.MetricError):
        metricc.compile("gap(recall)").metric(num_classes=3)


WORKER = Path(__file__).with_name("groups_stateful_ddp_worker.py")


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend")
def test_two_ranks_equal_one_process_on_all_shards(tmp_path: Path) -> None:
    """Rank 1 sees only groups 0 and 1, rank 0 all three: without num_groups each pads to G = 3
    before the sum; with it the states are preallocated."""
    worker = load_script(WORKER, "metricc_groups_stateful_ddp_worker")
    runs, folder = run_ranks(WORKER, 2, lambda: tmp_path)
    assert all(r.returncode == 0 for r in runs), rank_logs(runs)
    reference = worker.run(2, [0, 1])
    for rank in range(2):
        got = torch.load(folder / f"rank{rank}.pt")
        assert set(got) == set(reference)
        for name, value in reference.items():
            assert torch.equal(got[name], value), (rank, name, got[name], value)
    # the synced value is the single-process one, not a rank's own
    assert not np.isclose(float(reference["grow"]), float(worker.run(2, [0])["grow"]))


@pytest.mark.parametrize("num_groups", [None, 4])
def test_forward_and_merge_state_with_a_growing_state(num_groups: int | None) -> None:
    """forward() sums the batch's state into the running one: batches with fewer or more groups
    than seen so far (the state grew) sum as the counts of the concatenation."""
    m = metricc.compile("demographic_parity_difference")
    batches = [(torch.tensor([0.9, 0.1, 0.7]), torch.tensor([1, 0, 1]), torch.tensor([0, 1, 2])),
               (torch.tensor([0.9, 0.1]), torch.tensor([1, 0]), torch.tensor([0, 1])),
               (torch.tensor([0.9, 0.1, 0.3, 0.2]), torch.tensor([1, 0, 1, 0]), torch.tensor([0, 1, 3, 3]))]
    s = m.metric(num_groups=num_groups)
    for batch in batches:
        value = s(*batch)  # the batch's own value
        assert float(value) == m.score(batch[0], batch[1], groups=batch[2].numpy())
    x, y, g = _cat(batches)
    assert float(s.compute()) == m.score(x, y, groups=g.numpy())
    first, second = m.metric(num_groups=num_groups), m.metric(num_groups=num_groups)
    first.update(*batches[1])
    second.update(*batches[2])
    first.merge_state(second)
    both = _cat(batches[1:])
    assert float(first.compute()) == m.score(both[0], both[1], groups=both[2].numpy())
