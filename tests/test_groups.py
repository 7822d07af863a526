"""The group statistic: language, loss (gradient, training, memory, state, compile, standalone),
exact scores, thresholds per group with a stated confidence, refusals."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import metricc
from metricc.errors import MetricError, MetricSyntaxError, MetricWarning
from metricc.groups_metric import GroupMetric
from metricc.runtime.constrained import psi
from metricc.runtime.groups import group_counts

FORMULAS = ["equal_opportunity_difference", "equalized_odds_ratio", "demographic_parity_difference",
            "accuracy subject to gap(recall) <= 0.05", "f1 - 0.5*gap(fpr)", "worst(recall)",
            "vsrest(recall)", "groupmean(precision)", "ratio(PP/n)", "groupmax(fpr)"]


def _batch(n: int = 64, g: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen, dtype=torch.float64)
    y = (torch.rand(n, generator=gen) < 0.4).double()
    groups = torch.randint(0, g, (n,), generator=gen)
    return x, y, groups


def _reference(loss: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, groups: torch.Tensor,
               g: int, higher: bool) -> torch.Tensor:
    """The loss by autograd through the value kernel (no symbolic backward)."""
    a = loss.relax.value(x, True)
    counts = group_counts(a, y, None, groups, g)
    v = type(loss).group_value(*counts.unbind(-1), loss.eps, loss.tau)
    out = 1 - v[0] if higher else v[0]
    if v.shape[0] > 1:
        out = out + psi(v[1:], loss.multipliers.clone(), loss.penalty)[0].sum()
    return out


@pytest.mark.parametrize("formula", FORMULAS)
def test_loss_gradient_equals_autograd(formula: str) -> None:
    m = metricc.compile(formula)
    assert isinstance(m, GroupMetric)
    loss = m.loss(from_logits=True, num_groups=3, warn_monotonicity=False)
    loss.eval()  # no multiplier step between the two evaluations
    x, y, g = _batch()
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    loss(x1, y, g).backward()
    _reference(loss, x2, y, g, 3, m.higher_is_better).backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-9, atol=1e-12)


def test_soft_membership_equals_hard_ids_when_one_hot() -> None:
    m = metricc.compile("equal_opportunity_difference")
    loss = m.loss(from_logits=True, num_groups=3)
    x, y, g = _batch()
    onehot = torch.nn.functional.one_hot(g, 3).double()
    torch.testing.assert_close(loss(x, y, g), loss(x, y, onehot))
    half = torch.full((x.shape[0], 3), 1 / 3, dtype=torch.float64)
    assert torch.isfinite(loss(x, y, half))


def test_training_narrows_the_gap_and_meets_the_constraint() -> None:
    torch.manual_seed(0)
    n, g = 600, 2
    groups = torch.randint(0, g, (n,))
    # group 1: fewer positives, noisier features: BCE's recall there lags far behind group 0's
    y = (torch.rand(n) < torch.where(groups == 1, 0.25, 0.5)).double()
    feats = torch.stack([y + (0.6 + 0.9 * groups) * torch.randn(n, dtype=torch.float64),
                         groups.double()], 1)
    model = torch.nn.Linear(2, 1).double()
    m = metricc.compile("accuracy subject to gap(recall) <= 0.05")
    loss = m.loss(from_logits=True, num_groups=g)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    bce = torch.nn.BCEWithLogitsLoss()
    for _ in range(100):
        opt.zero_grad()
        bce(model(feats).squeeze(1), y).backward()
        opt.step()
    gap = metricc.compile("equal_opportunity_difference")
    before = gap.score(model(feats).squeeze(1).detach(), y, groups=groups, from_logits=True)
    for _ in range(300):
        opt.zero_grad()
        loss(model(feats).squeeze(1), y, groups).backward()
        opt.step()
    after = gap.score(model(feats).squeeze(1).detach(), y, groups=groups, from_logits=True)
    accuracy = metricc.compile("accuracy").score(model(feats).squeeze(1).detach(), y, from_logits=True)
    assert before > 0.3 and after <= 0.08 and accuracy > 0.65, (before, after, accuracy)
    assert float(loss.multipliers[0]) > 0


def test_memory_pools_counts_and_is_written_only_in_training_steps() -> None:
    m = metricc.compile("equal_opportunity_difference")
    loss = m.loss(from_logits=True, num_groups=3, memory_decay=1.0)
    x, y, g = _batch()
    loss(x.clone().requires_grad_(), y, g)
    remembered = loss.pool.memory.clone()
    with torch.no_grad():
        loss(x, y, g)
    torch.testing.assert_close(loss.pool.memory, remembered)
    assert remembered.shape == (3, 4)
    torch.testing.assert_close(remembered, group_counts(loss.relax.value(x, True), y, None, g, 3))
    loss.reset_memory()
    assert loss.pool.memory is None


def test_state_dict_pickle_and_compile() -> None:
    m = metricc.compile("accuracy subject to gap(recall) <= 0.05")
    loss = m.loss(from_logits=True, num_groups=3)
    x, y, g = _batch()
    loss(x.clone().requires_grad_(), y, g)
    assert float(loss.multipliers[0]) > 0
    fresh = m.loss(from_logits=True, num_groups=3)
    fresh.load_state_dict(loss.state_dict())
    torch.testing.assert_close(fresh.multipliers, loss.multipliers)
    back = pickle.loads(pickle.dumps(loss))
    torch.testing.assert_close(back.multipliers, loss.multipliers)
    loss.eval(), back.eval()
    torch.testing.assert_close(back(x, y, g), loss(x, y, g))
    other = metricc.compile("accuracy subject to gap(fpr) <= 0.05").loss(num_groups=3)
    with pytest.raises(MetricError, match="belongs to a loss with the constraints"):
        other.load_state_dict(loss.state_dict())


def test_torch_compile_fullgraph_matches_eager() -> None:
    m = metricc.compile("accuracy subject to gap(recall) <= 0.05")
    eager, compiled = (m.loss(from_logits=True, num_groups=3) for _ in range(2))
    fn = torch.compile(compiled, fullgraph=True)
    x, y, g = _batch()
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    eager(x1, y, g).backward()
    fn(x2, y, g).backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(eager.multipliers, compiled.multipliers)


def test_standalone_file_imports_with_torch_only(tmp_path: os.PathLike[str]) -> None:
    m = metricc.compile("equal_opportunity_difference")
    path = os.path.join(tmp_path, "eo_loss.py")
    m.standalone(path)
    code = ("import sys; sys.modules['metricc'] = None; sys.path.insert(0, sys.argv[1]);"
            "import torch, eo_loss; x = torch.randn(64, dtype=torch.float64, generator="
            "torch.Generator().manual_seed(0)); y = (torch.rand(64, generator=torch.Generator()"
            ".manual_seed(1)) < 0.4).double(); g = torch.arange(64) % 3;"
            "print(float(eo_loss.EqualOpportunityDifferenceLoss(from_logits=True)(x, y, g)))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                         check=True)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, dtype=torch.float64, generator=gen)
    y = (torch.rand(64, generator=torch.Generator().manual_seed(1)) < 0.4).double()
    expect = float(m.loss(from_logits=True)(x, y, torch.arange(64) % 3))
    assert float(out.stdout) == pytest.approx(expect, rel=1e-12)


def test_parse_errors_are_positioned() -> None:
    for text, where in [("gap(gap(recall))", "nest"), ("gap(recall, fpr)", "one 2 x 2 formula"),
                        ("worst(equal_opportunity_difference)", "cannot stand inside")]:
        with pytest.raises(MetricError, match=where):
            metricc.compile(text)
    with pytest.raises(MetricSyntaxError) as e:
        metricc.compile("accuracy - gap(gap(fpr))")
    assert e.value.column == 16
    with pytest.raises(MetricError, match="cannot be mixed"):
        metricc.compile("auroc - gap(recall)")
    with pytest.raises(MetricError, match="not real for all group counts"):
        metricc.compile("sqrt(gap(recall) - 0.5)")
    with pytest.raises(MetricError, match="does not apply"):
        metricc.compile("equal_opportunity_difference", constraints=["recall >= 0.5"])


def test_disparity_direction_warns() -> None:
    with pytest.warns(MetricWarning, match="widen"):
        metricc.compile("gap(recall)").loss()
    metricc.compile("gap(recall)", higher_is_better=False).loss()  # no warning expected


def test_bad_groups_are_refused() -> None:
    loss = metricc.compile("equal_opportunity_difference").loss(from_logits=True, num_groups=2)
    x, y, _ = _batch(8)
    for groups, match in [(torch.tensor([0, 1, 2, 0, 1, 0, 1, 0]), r"lie in \[0, 2\)"),
                          (torch.zeros(8, 2), "sum to 1"), (torch.zeros(7, dtype=torch.long), "shape"),
                          ([0] * 8, "tensor"), (torch.zeros(8, dtype=torch.bool), "bool")]:
        with pytest.raises(MetricError, match=match):
            loss(x, y, groups)


def test_score_undefined_group_is_named() -> None:
    m = metricc.compile("equal_opportunity_difference")
    with pytest.raises(MetricError, match=r"group 'b'.*zero_division=0"):
        m.score([0.9, 0.2, 0.8, 0.7], [1, 1, 0, 0], groups=["a", "a", "b", "b"])
    assert m.score([0.9, 0.2, 0.8, 0.7], [1, 1, 0, 0], groups=["a", "a", "b", "b"],
                   zero_division=0) == 0.5


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_best_threshold_reproduces_its_value(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 80
    g = rng.integers(0, 3, n)
    y = (rng.random(n) < 0.5).astype(float)
    s = np.round(rng.random(n), 2)
    m = metricc.compile("worst_group_accuracy")
    for per_group in (False, True):
        choice = m.best_threshold(s, y, groups=g, per_group=per_group)
        assert m.score(s, y, groups=g, threshold=choice.threshold) == pytest.approx(choice.value)
    common = m.best_threshold(s, y, groups=g)
    assert m.best_threshold(s, y, groups=g, per_group=True).value >= common.value - 1e-12


def test_per_group_thresholds_cover_at_the_stated_confidence() -> None:
    """Simulated coverage: every group's true recall at its chosen threshold >= 0.8 in at least
    90 % of validation draws (scores of positives in group k ~ N(1 + k/2, 1), known recall)."""
    from statistics import NormalDist

    rng = np.random.default_rng(5)
    m = metricc.compile("worst_group_accuracy")
    trials, held = 150, 0
    for _ in range(trials):
        n = 900
        g = rng.integers(0, 3, n)
        y = (rng.random(n) < 0.4).astype(float)
        s = np.where(y == 1, rng.normal(1 + g / 2, 1), rng.normal(0, 1, n))
        c = m.best_threshold(s, y, groups=g, per_group=True, constraints=["recall >= 0.8"],
                             confidence=0.9, from_logits=True)
        logits = np.log(np.asarray(c.threshold) / (1 - np.asarray(c.threshold)))
        true = [1 - NormalDist(1 + k / 2, 1).cdf(logits[k]) for k in range(3)]
        held += all(r >= 0.8 for r in true)
    assert held / trials >= 0.9, held / trials


def test_too_few_samples_names_the_group() -> None:
    rng = np.random.default_rng(1)
    g = np.r_[np.zeros(400, int), np.ones(12, int)]
    y = (rng.random(412) < 0.5).astype(float)
    s = np.clip(y * 0.6 + rng.random(412) * 0.4, 0, 1)
    with pytest.raises(MetricError, match=r"group 1:.*needs at least \d+ positives"):
        metricc.compile("worst_group_recall").best_threshold(
            s, y, groups=g, per_group=True, constraints=["recall >= 0.9"], confidence=0.9)


def test_missing_groups_are_named_not_a_type_error() -> None:
    m = metricc.compile("equal_opportunity_difference")
    with pytest.raises(MetricError, match="needs each sample's group"):
        m.loss()(torch.rand(4), torch.ones(4))
    for method in ("score", "best_threshold"):
        with pytest.raises(MetricError, match=rf"{method}\(\) of a group metric needs"):
            getattr(m, method)([0.1, 0.9], [0, 1])


def test_best_feasible_judges_whole_passes_of_a_group_metric() -> None:
    from metricc.decisions import BestFeasible

    keep = BestFeasible("accuracy subject to gap(recall) <= 0.05")
    groups = ["a", "a", "b", "b"]
    first = keep.update(0, [0.9, 0.2, 0.8, 0.7], [1, 1, 1, 0], groups=groups, state={"w": 0})
    assert not first.feasible and first.rates["gap(recall) <= 0.05"] == pytest.approx(0.45)
    second = keep.update(1, [0.9, 0.8, 0.8, 0.2], [1, 1, 1, 0], groups=groups, state={"w": 1})
    assert second.feasible and second.value == 1.0
    keep.update(2, [0.9, 0.8, 0.8, 0.9], [1, 1, 1, 0], groups=groups, state={"w": 2})  # worse
    assert keep.best_state == {"w": 1} and keep.result().step == 1
    with pytest.raises(MetricError, match="confidence= of a group metric"):
        BestFeasible("accuracy subject to gap(recall) <= 0.05", confidence=0.9)
    with pytest.raises(MetricError, match="needs a metric compiled with constraints"):
        BestFeasible("equal_opportunity_difference")
    never = BestFeasible("accuracy subject to gap(recall) <= 0.05")
    never.update(0, [0.9, 0.2, 0.8, 0.7], [1, 1, 1, 0], groups=groups)
    with pytest.raises(MetricError, match=r"smallest violation 0\.45"):
        never.result()


def test_non_finite_scores_and_per_element_inputs_are_refused() -> None:
    m = metricc.compile("equal_opportunity_difference")
    with pytest.raises(MetricError, match="NaN or infinite"):
        m.score([float("nan"), 0.2], [1, 1], groups=[0, 1])
    with pytest.raises(MetricError, match="one score per sample"):
        m.loss()(torch.rand(8, 2), torch.ones(8, 2), torch.arange(8) % 2)


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_steps_the_multipliers_once(reentrant: bool) -> None:
    from torch.utils.checkpoint import checkpoint

    m = metricc.compile("accuracy subject to gap(recall) <= 0.05")
    plain, checked = (m.loss(from_logits=True, num_groups=3) for _ in range(2))
    x, y, g = _batch()
    for _ in range(3):
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        plain(x1, y, g).backward()
        checkpoint(checked, x2, y, g, use_reentrant=reentrant).backward()
        torch.testing.assert_close(x2.grad, x1.grad)
        torch.testing.assert_close(checked.multipliers, plain.multipliers)
    assert float(plain.multipliers[0]) > 0


def test_constraints_are_named_as_written() -> None:
    m = metricc.compile("r = recall\naccuracy subject to gap(r) <= 0.05 and worst(recall) >= 0.5")
    assert [c.text for c in m.group_constraints] == ["gap(r) <= 0.05", "worst(recall) >= 0.5"]
    loss = m.loss(num_groups=2)
    assert list(loss.log_dict()) == ["gap(r) <= 0.05", "multiplier/gap(r) <= 0.05",
                                     "worst(recall) >= 0.5", "multiplier/worst(recall) >= 0.5"]


def test_warm_start_wraps_a_group_loss() -> None:
    loss = metricc.compile("accuracy subject to gap(recall) <= 0.05").loss(from_logits=True, num_groups=3)
    warm = metricc.WarmStart(loss, warmup_steps=1, blend_steps=1)
    x, y, g = _batch()
    bce = torch.nn.functional.binary_cross_entropy_with_logits(x, y)
    torch.testing.assert_close(warm(x.clone().requires_grad_(), y, groups=g), bce)
    loss.eval()
    metric_term = loss(x, y, g)  # the multipliers as the blend step will see them (no step here)
    loss.train()
    blended = warm(x.clone().requires_grad_(), y, groups=g)  # a = 1/2
    torch.testing.assert_close(blended, 0.5 * bce + 0.5 * metric_term, rtol=1e-12, atol=0)
    assert float(loss.multipliers[0]) > 0  # the blend step was a training step of the group loss


def test_best_threshold_honours_the_formulas_own_bounds_and_refuses_a_bare_confidence() -> None:
    rng = np.random.default_rng(3)
    n = 600
    g = rng.integers(0, 2, n)
    y = (rng.random(n) < 0.5).astype(float)
    s = 1 / (1 + np.exp(-((2 * y - 1) * (1.5 - g) + rng.normal(0, 1, n))))
    free = metricc.compile("accuracy").best_threshold(s, y)
    gap = metricc.compile("equal_opportunity_difference")
    assert gap.score(s, y, groups=g, threshold=free.threshold) > 0.05  # unconstrained: a wide gap
    bound = metricc.compile("accuracy subject to gap(recall) <= 0.05")
    for per_group in (False, True):
        c = bound.best_threshold(s, y, groups=g, per_group=per_group)
        assert gap.score(s, y, groups=g, threshold=c.threshold) <= 0.05 + 1e-12
    with pytest.raises(MetricError, match="confidence= applies to constraints"):
        bound.best_threshold(s, y, groups=g, confidence=0.9)


def test_best_feasible_passes_check_their_inputs_as_score_does() -> None:
    from metricc.decisions import BestFeasible

    keep = BestFeasible("accuracy subject to gap(recall) <= 0.05")
    with pytest.raises(MetricError, match="NaN or infinite"):
        keep.update(0, [float("nan"), 0.2], [1, 0], groups=[0, 1])
    with pytest.raises(MetricError, match="0/1 labels"):
        keep.update(0, [0.9, 0.2], [2, 0], groups=[0, 1])


def test_group_loss_weights_get_every_loss_weight_check() -> None:
    loss = metricc.compile("equal_opportunity_difference").loss(from_logits=True, num_groups=3)
    x, y, g = _batch(12)
    for w, match in [(torch.full((12,), float("nan")), "NaN or inf"), (-torch.ones(12), "negative"),
                     (torch.ones(5), "does not broadcast")]:
        with pytest.raises(MetricError, match=match):
            loss(x, y, g, w)
    torch.testing.assert_close(loss(x, y, g, torch.tensor(2.0)), loss(x, y, g))  # a scale changes no rate
