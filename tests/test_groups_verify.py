"""verify() of group metrics (metricc.verify.groups): the generated group kernels proved equal to
SymPy's derivatives for G = 2 and 3, the runtime's smooth reductions and value kernel compared in
float64, and the loss's gradient = autograd of a plain implementation = finite differences; a
broken kernel is a FAILED report, never a crash."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

import metricc
from metricc.groups_metric import GroupMetric
from metricc.library import GROUP_METRICS
from metricc.verify.groups import prove_gradient, verify_groups

GROUP_NAMES = sorted(GROUP_METRICS)
FORMULAS = ["accuracy subject to gap(recall) <= 0.05", "f1 - 0.5*gap(fpr)", "vsrest(recall)",
            "ratio(PP/n)", "groupmean(precision)"]


def test_every_named_group_metric_is_listed() -> None:
    assert len(GROUP_NAMES) >= 9, GROUP_NAMES
    assert {"equalized_odds_difference", "worst_group_accuracy"} <= set(GROUP_NAMES)


@pytest.mark.parametrize("formula", GROUP_NAMES + FORMULAS)
def test_group_metrics_verify(formula: str) -> None:
    start = time.perf_counter()
    report = metricc.compile(formula).verify(raise_on_failure=False)
    took = time.perf_counter() - start
    assert report.ok, str(report)
    names = [c.name for c in report.checks]
    # both group counts proved, the runtime's reductions and value compared, both numeric cases ran
    assert any("(G=2)" in n for n in names) and any("(G=3)" in n for n in names), names
    assert any(n.startswith("grp_reduce") for n in names), names
    assert any(n.startswith("group_value") for n in names), names
    assert sum("finite differences" in n for n in names) == 2, names
    assert any("soft memberships" in n for n in names) and any("hard group ids" in n for n in names)
    # a couple of seconds; 30 s catches a hang (docs/numerics.md, the verify budget)
    assert took < 30, took


def test_constrained_formula_proves_the_violation_too() -> None:
    m = metricc.compile("accuracy subject to gap(recall) <= 0.05")
    ok, how = prove_gradient(tuple(m.kernel_exprs), m.kernels_source, 2)
    # metric and violation: 2 values, 2 x 4 x 2 partials
    assert ok and "16 partials and 2 values" in how, how


def _broken(source: str, old: str, new: str) -> str:
    out = source.replace(old, new)
    assert out != source, old
    return out


# Texts no other test compiles: compile() caches the metric with the loss class built from the
# broken source, which would otherwise leak into later tests of the same text.
@pytest.mark.parametrize("formula, old, new", [
    ("gap(recall) + 0*TN", "p0_tp = ", "p0_tp = 1.0001*"),  # a local partial
    ("f1 - 0.5*gap(fpr) + 0*TN", "a0_tp = ", "a0_tp = 1.0001*"),  # an outer partial at the overall counts
    ("vsrest(recall) + 0*TN", "(torch.sum(z0_0_fn, -1) - z0_0_fn)", "0*z0_0_fn"),  # the rest of the groups
    ("accuracy + 0*TN subject to gap(recall) <= 0.05", "h1_0 = torch.zeros_like(TPa) + 1",
     "h1_0 = torch.zeros_like(TPa) + 0.999"),  # the violation's partial
])
def test_a_broken_kernel_is_reported_failed(monkeypatch: pytest.MonkeyPatch, formula: str, old: str,
                                            new: str) -> None:
    broken = _broken(metricc.compile(formula).kernels_source, old, new)
    monkeypatch.setattr(GroupMetric, "kernels_source", property(lambda self: broken))
    m = metricc.compile(formula)
    assert m.kernels_source == broken
    report = m.verify(raise_on_failure=False)
    failed = [c for c in report.checks if not c.ok]
    assert not report.ok and any("(G=2)" in c.name for c in failed), str(report)
    assert any("differs from SymPy's" in c.how for c in failed)
    with pytest.raises(metricc.MetricError, match="verification FAILED"):
        m.verify()


def test_a_wrong_loss_gradient_fails_the_numeric_checks_only() -> None:
    m = metricc.compile("equal_opportunity_difference")
    good = m.loss_class

    class Broken(good):  # type: ignore[misc, valid-type]
        @staticmethod
        def group_and_gradient(*args: Any) -> Any:
            value, d_tp, *rest = good.group_and_gradient(*args)
            return (value, 1.5 * d_tp, *rest)

    report = verify_groups(m.kernel_exprs, m.kernels_source, Broken, "eod", raise_on_failure=False)
    failed = [c.name for c in report.checks if not c.ok]
    assert failed and all("G=" not in n for n in failed), failed
    assert any("finite differences" in n for n in failed) and any("autograd" in n for n in failed), failed


def test_a_wrong_smooth_reduction_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime's grp_reduce is torch, outside the symbolic proof: its own float64 check."""
    import metricc.runtime.groups as runtime_groups

    real = runtime_groups.grp_reduce

    def off(kind: str, f: torch.Tensor, ok: torch.Tensor, tau: float, eps: float) -> Any:
        r, w = real(kind, f, ok, tau, eps)
        return r, w * 1.01

    m = metricc.compile("gap(recall)")
    loss_class = m.loss_class  # built (with the real grp_reduce) before the patch
    monkeypatch.setattr(runtime_groups, "grp_reduce", off)
    report = verify_groups(m.kernel_exprs, m.kernels_source, loss_class, "gap", sizes=(2,),
                           raise_on_failure=False)
    failed = [c.name for c in report.checks if not c.ok]
    assert any(n.startswith("grp_reduce") for n in failed), str(report)


def test_verify_refuses_options_it_does_not_take() -> None:
    m = metricc.compile("gap(recall)")
    with pytest.raises(metricc.MetricError):
        m.verify(derivatives={"TP": 1})
    with pytest.raises(metricc.MetricError):
        m.verify(no_such_option=1)


def _batch(n: int = 10) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    ids = torch.arange(n) % 3
    y = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0] + [float(i % 2) for i in range(n - 6)],
                     dtype=torch.float64)
    soft = torch.rand(n, 3, generator=gen, dtype=torch.float64) + 0.1
    w = torch.rand(n, generator=gen, dtype=torch.float64) + 0.5
    x = torch.randn(n, generator=gen, dtype=torch.float64)
    return x, y, ids, soft / soft.sum(1, keepdim=True), w


@pytest.mark.parametrize("formula", ["equalized_odds_difference", "vsrest(recall)",
                                     "accuracy subject to gap(recall) <= 0.05", "ratio(PP/n)"])
def test_group_loss_passes_torch_gradcheck(formula: str) -> None:
    """torch's own gradcheck (float64 central differences) of the loss, independent of verify():
    hard group ids with sample weights, and soft memberships; a constrained formula with a live
    multiplier."""
    loss = metricc.compile(formula).loss(from_logits=True, amplifier=3.0, tau=0.1, num_groups=3,
                                         warn_monotonicity=False).eval()
    if loss.multipliers.numel():
        loss.multipliers.fill_(0.5)
    x, y, ids, soft, w = _batch()
    for groups, weight in ((ids, w), (soft, None)):
        assert torch.autograd.gradcheck(lambda s, g=groups, v=weight: loss(s, y, g, v),
                                        (x.clone().requires_grad_(True),), eps=1e-6, atol=1e-7)


def test_a_wrong_mask_is_caught_numerically(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mask (a group whose local formula is undefined takes no part) is outside the symbolic
    proof (on positive symbols every group counts); the value check with an empty group sees it."""
    text = "gap(TP/(TP + FN)) + 0*TP"  # a text no other test compiles: its loss class is built here
    broken = _broken(metricc.compile(text).kernels_source, "ok0 = (d0_0 > eps)", "ok0 = (d0_0 >= 0)")
    monkeypatch.setattr(GroupMetric, "kernels_source", property(lambda self: broken))
    m = metricc.compile(text)
    assert "d0_0 >= 0" in m.loss_class.source
    report = m.verify(raise_on_failure=False, sizes=(2,))
    failed = [c.name for c in report.checks if not c.ok]
    assert "group_value == the written-out metric (float64)" in failed, str(report)
    assert all("G=" not in n for n in failed), failed


def test_a_kernel_that_raises_is_a_failed_report_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "gap(TP/(TP + FN)) + 0*FP"  # a text no other test compiles: its loss class is built here
    broken = _broken(metricc.compile(text).kernels_source, "r0, w0 = grp_reduce(", "r0, w0 = torch.no_such(")
    monkeypatch.setattr(GroupMetric, "kernels_source", property(lambda self: broken))
    report = metricc.compile(text).verify(raise_on_failure=False)
    failed = [c for c in report.checks if not c.ok]
    assert any("did not run on symbols" in c.how for c in failed), str(report)
    assert any("the loss and its kernels run" in c.name for c in failed), str(report)


def test_group_stand_in_is_the_function_table() -> None:
    """One table: the group stand-in has every torch call of the function table, and a group
    kernel calls nothing on torch that the stand-in lacks."""
    import re

    from metricc.language.functions import TORCH_CALLS
    from metricc.verify.groups import group_torch

    ns = vars(group_torch())
    assert set(TORCH_CALLS) <= set(ns)
    for text in [*GROUP_NAMES, *FORMULAS, "sqrt(gap(recall))", "log(1 + worst(f1))", "groupmean(mcc)"]:
        called = set(re.findall(r"torch\.(\w+)", metricc.compile(text).kernels_source))
        assert called <= set(ns), (text, called - set(ns))


@pytest.mark.parametrize("formula", ["equal_opportunity_difference", "equalized_odds_ratio",
                                     "worst_group_accuracy", "vsrest(recall)", "groupmean(precision)",
                                     "f1 - 0.5*gap(fpr)"])
def test_loss_on_hard_predictions_is_the_exact_score(formula: str) -> None:
    """The loss (linear relaxation, tau -> 0) at 0/1 predictions is the exact score of
    metricc.evaluate.groups, up to eps and tau: the runtime and the exact values agree."""
    gen = torch.Generator().manual_seed(0)
    d = (torch.rand(60, generator=gen) < 0.5).double()
    y = (torch.rand(60, generator=gen) < 0.5).double()
    g = torch.randint(0, 3, (60,), generator=gen)
    m = metricc.compile(formula)
    loss = float(m.loss("linear", tau=1e-9, warn_monotonicity=False)(d, y, g))
    relaxed = 1 - loss if m.higher_is_better else loss
    assert relaxed == pytest.approx(m.score(d.numpy(), y.numpy(), groups=g.numpy()), abs=1e-6)
