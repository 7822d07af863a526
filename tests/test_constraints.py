"""Constrained objectives: ``metricc.compile("precision", constraints=["recall >= 0.9"])``."""

from __future__ import annotations

import copy
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from script_loader import load_script
from sklearn.metrics import precision_score, recall_score

import metricc
from metricc.standalone_file import standalone_source

# ------------------------------------------------------------------------------ API


def test_list_and_formula_text_give_the_same_constraint() -> None:
    a = metricc.compile("precision", constraints=["recall >= 0.9"])
    b = metricc.compile("precision subject to recall >= 0.9")
    assert isinstance(a, metricc.Metric) and a.higher_is_better
    for m in (a, b):
        (c,) = m.constraints
        assert (c.text, str(c.metric.expr), c.op, c.bound) == (
            "recall >= 0.9", "TP/(FN + TP)", ">=", 0.9)
        assert str(m.expr) == "TP/(FP + TP)"
    assert metricc.compile("precision").constraints == ()
    assert "constraints=['recall >= 0.9']" in repr(a)


def test_several_constraints_any_formula_both_directions() -> None:
    m = metricc.compile(
        "p = TP/(TP+FP)\np subject to TP/(TP+FN) >= 0.8, fpr <= 0.05 and recall >= p",
        constraints=["0.3 <= f1", "sqrt(recall*specificity) >= 1/2"])
    got = [(c.text, str(c.metric.expr), c.op, c.bound) for c in m.constraints]
    assert got == [
        ("TP/(TP+FN) >= 0.8", "TP/(FN + TP)", ">=", 0.8),
        ("fpr <= 0.05", "FP/(FP + TN)", "<=", 0.05),
        ("recall >= p", "-TP/(FP + TP) + TP/(FN + TP)", ">=", 0.0),
        ("0.3 <= f1", "2*TP/(FN + FP + 2*TP)", ">=", 0.3),  # constant moved right
        ("sqrt(recall*specificity) >= 1/2", "sqrt(TN)*sqrt(TP)/(sqrt(FN + TP)*sqrt(FP + TN))", ">=", 0.5),
    ]
    scores = m.constraint_scores([0.9, 0.2, 0.7, 0.1], [1, 1, 0, 0])
    assert scores["fpr <= 0.05"] == 0.5 and scores["TP/(TP+FN) >= 0.8"] == 0.5
    assert not m.feasible([0.9, 0.2, 0.7, 0.1], [1, 1, 0, 0])
    assert m.feasible([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0])


@pytest.mark.parametrize(("text", "message", "column"), [
    ("recall >=", "no bound after '>='", 10),
    ("recall >= high", "unknown metric 'high'", 11),
    ("recal >= 0.9", "unknown metric 'recal' in a constraint (did you mean 'recall'?)", 1),
    ("recall == 0.9", "'==' is not a constraint", 8),
    ("recall > 0.9", "write '>='", 8),
    ("recall = 0.9", "'=' is not a constraint", 8),
    ("recall", "no comparison", 7),
    ("0.5 >= 0.2", "compares two constants", 1),
    ("recall >= 1/0", "not a finite real number", 1),
    ("recall >= 0.9x", "unexpected 'x'", 14),
])
def test_bad_constraints_get_positioned_errors(text: str, message: str, column: int) -> None:
    with pytest.raises(metricc.MetricSyntaxError) as e:
        metricc.compile("precision", constraints=[text])
    assert message in str(e.value)
    assert (e.value.line, e.value.column) == (1, column)
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize(("text", "message", "column"), [
    ("precision subject to recall >=", "no bound after '>='", 31),
    ("precision subject to recal >= 0.9", "did you mean 'recall'?", 22),
    ("precision subject to recall >= 0.9, fpr == 0", "'==' is not a constraint", 41),
    ("precision subject recall >= 0.9", "expected 'to'", 19),
])
def test_bad_constraints_in_formula_text_point_into_the_formula(text: str, message: str,
                                                                column: int) -> None:
    with pytest.raises(metricc.MetricSyntaxError) as e:
        metricc.compile(text)
    assert message in str(e.value) and e.value.column == column


def test_constraints_must_be_a_list_of_strings() -> None:
    with pytest.raises(metricc.MetricError, match="list of strings"):
        metricc.compile("precision", constraints="recall >= 0.9")
    with pytest.raises(metricc.MetricError, match="must be a string"):
        metricc.compile("precision", constraints=[0.9])


def test_names_subject_to_and_stay_usable_as_parameters() -> None:
    # the keywords are keywords only after a complete metric expression
    m = metricc.compile("TP/(TP + to*FP)", to=2)
    assert m.value(tp=1, fp=1) == pytest.approx(1 / 3)


# ------------------------------------------------------------------------ gradients

def _reference(x: torch.Tensor, y: torch.Tensor, lam: list[float], rho: float,
               amplifier: float) -> torch.Tensor:
    """The Lagrangian written out by hand: sigmoid, AnyLoss, the four sums, the metrics."""
    p = 1 / (1 + torch.exp(-x))
    a = 1 / (1 + torch.exp(-amplifier * (p - 0.5)))
    tp, fp = (a * y).sum(), (a * (1 - y)).sum()
    fn, tn = ((1 - a) * y).sum(), ((1 - a) * (1 - y)).sum()
    precision, recall, fpr = tp / (tp + fp), tp / (tp + fn), fp / (fp + tn)
    loss = 1 - precision
    for lam_k, v in zip(lam, (0.9 - recall, fpr - 0.05, 0.01 - precision), strict=True):
        if rho == 0:
            loss = loss + lam_k * v
        elif lam_k + rho * v >= 0:
            loss = loss + lam_k * v + rho / 2 * v * v
        else:
            loss = loss - lam_k**2 / (2 * rho)
    return loss


def _batch(seed: int = 0, n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64) * 2
    y = (torch.rand(n, generator=g, dtype=torch.float64) < 0.35).double()
    return x, y


CONSTRAINED = ["recall >= 0.9", "fpr <= 0.05", "precision >= 0.01"]


@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
@pytest.mark.parametrize("rho", [0.0, 2.0])
def test_gradient_equals_independent_autograd_float64(backward: str, rho: float) -> None:
    m = metricc.compile("precision", constraints=CONSTRAINED)
    loss_fn = m.loss(amplifier=5.0, from_logits=True, eps=0.0, backward=backward, penalty=rho)
    lam = [0.7, 0.3, 0.1]
    loss_fn.multipliers.copy_(torch.tensor(lam, dtype=torch.float64))
    x, y = _batch()
    xs = x.clone().requires_grad_(True)
    ours = loss_fn(xs, y)
    ours.backward()
    xr = x.clone().requires_grad_(True)
    ref = _reference(xr, y, lam, rho, 5.0)
    ref.backward()
    assert float(ours.detach()) == pytest.approx(float(ref.detach()), abs=1e-12)
    torch.testing.assert_close(xs.grad, xr.grad, atol=1e-12, rtol=1e-10)
    assert float(xs.grad.abs().max()) > 1e-3
    if rho:  # both branches of the augmented term are exercised
        values = loss_fn.constraint_values.tolist()
        assert values[2] > 0.01 + 0.1 / rho


def test_symbolic_backward_passes_gradcheck() -> None:
    m = metricc.compile("precision", constraints=CONSTRAINED[:2])
    loss_fn = m.loss(amplifier=3.0, from_logits=True).eval()  # eval: multipliers held still
    loss_fn.multipliers.copy_(torch.tensor([0.4, 1.5]))
    x, y = _batch(1, 12)
    assert torch.autograd.gradcheck(lambda t: loss_fn(t, y), (x.requires_grad_(True),))


# ----------------------------------------------------------------------- multipliers

def test_multipliers_step_in_training_only_and_live_in_state_dict() -> None:
    m = metricc.compile("precision", constraints=["recall >= 0.9", "fpr <= 0.5"])
    loss_fn = m.loss(from_logits=True, multiplier_lr=0.5)
    x = torch.tensor([3.0, -2.0, -1.0, 0.5, -4.0], requires_grad=True)
    y = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0])
    loss_fn(x, y).backward()
    # hard recall 1/3, hard fpr 1/2: v = (0.9 - 1/3, 0.5 - 0.5)
    assert loss_fn.constraint_values.tolist() == pytest.approx([1 / 3, 0.5])
    assert loss_fn.multipliers.tolist() == pytest.approx([0.5 * (0.9 - 1 / 3), 0.0])
    before = loss_fn.multipliers.clone()
    with torch.no_grad():
        loss_fn(x, y)
    loss_fn.eval()
    loss_fn(x, y)
    assert torch.equal(loss_fn.multipliers, before)
    state = loss_fn.state_dict()
    assert set(state) == {"multipliers"}
    fresh = m.loss(from_logits=True)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.multipliers, before)
    assert loss_fn.log_dict() == pytest.approx({
        "recall >= 0.9": 1 / 3, "multiplier/recall >= 0.9": float(before[0]),
        "fpr <= 0.5": 0.5, "multiplier/fpr <= 0.5": 0.0})
    loss_fn.reset_multipliers()
    assert loss_fn.multipliers.tolist() == [0.0, 0.0]


def test_relaxed_rates_step_from_the_relaxed_counts() -> None:
    m = metricc.compile("precision", constraints=["recall >= 0.9"])
    loss_fn = m.loss("linear", multiplier_rates="relaxed", multiplier_lr=1.0)
    p = torch.tensor([0.8, 0.4, 0.3, 0.1], requires_grad=True)
    y = torch.tensor([1.0, 1.0, 0.0, 0.0])
    loss_fn(p, y)
    assert loss_fn.multipliers.tolist() == pytest.approx([0.9 - 1.2 / 2])


@pytest.mark.parametrize(("option", "value"), [
    ("multiplier_lr", -1.0), ("penalty", float("nan")), ("max_multiplier", True),
    ("multiplier_rates", "soft")])
def test_bad_multiplier_options(option: str, value: object) -> None:
    m = metricc.compile("precision", constraints=["recall >= 0.9"])
    with pytest.raises(metricc.MetricError, match=option):
        m.loss(**{option: value})


def test_constraints_need_one_confusion_matrix() -> None:
    m = metricc.compile("precision", constraints=["recall >= 0.9"])
    with pytest.raises(metricc.MetricError, match="mode='binary'"):
        m.loss(mode="multilabel")


def test_infeasible_batches_never_give_nan() -> None:
    m = metricc.compile("precision", constraints=["recall >= 0.9", "fpr <= 0.1"])
    for backward in ("symbolic", "autograd"):
        loss_fn = m.loss(from_logits=True, backward=backward, penalty=1.0, multiplier_lr=1.0)
        loss_fn.multipliers.fill_(2.0)
        for y in (torch.zeros(6), torch.ones(6)):  # recall, then fpr, undefined
            x = torch.linspace(-3, 3, 6, requires_grad=True)
            loss = loss_fn(x, y)
            loss.backward()
            assert torch.isfinite(loss) and bool(torch.isfinite(x.grad).all())
            undefined = 0 if y[0] == 0 else 1  # recall without positives, fpr without negatives
            assert math.isnan(loss_fn.constraint_values[undefined])
            assert float(loss_fn.multipliers[undefined]) == 2.0  # undefined: no step
            loss_fn.multipliers.fill_(2.0)


def test_unsatisfiable_constraint_warns_and_its_multiplier_is_capped() -> None:
    m = metricc.compile("precision", constraints=["recall >= 1.5"])
    with pytest.warns(metricc.MetricWarning, match="CANNOT be met"):
        loss_fn = m.loss(from_logits=True, multiplier_lr=10.0, max_multiplier=50.0)
    x = torch.zeros(8, requires_grad=True)
    y = torch.tensor([1.0, 0.0] * 4)
    opt = torch.optim.SGD([x], lr=0.1)
    for _ in range(30):
        opt.zero_grad()
        loss = loss_fn(x, y)
        loss.backward()
        assert torch.isfinite(loss) and bool(torch.isfinite(x.grad).all())
        opt.step()
    assert loss_fn.multipliers.tolist() == [50.0]


def test_memory_decay_pools_the_constraint_estimates() -> None:
    """decay 1 and hard rates: the multiplier sees the recall of every batch so far."""
    m = metricc.compile("precision", constraints=["recall >= 0.9"])
    loss_fn = m.loss(from_logits=True, memory_decay=1.0)
    x, y = _batch(3, 60)
    seen_x, seen_y = [], []
    for xb, yb in zip(x.split(15), y.split(15), strict=True):
        loss_fn(xb.clone().requires_grad_(True), yb)
        seen_x.append(xb)
        seen_y.append(yb)
        allx, ally = torch.cat(seen_x), torch.cat(seen_y)
        expected = recall_score(ally.numpy(), (allx >= 0).numpy().astype(int))
        assert float(loss_fn.constraint_values[0]) == pytest.approx(expected, abs=1e-12)
    loss_fn.reset_memory()
    assert loss_fn.hard_pool.memory is None


def test_row_losses_keep_one_set_of_multipliers_per_row() -> None:
    m = metricc.compile("precision", constraints=["recall >= 0.9"])
    loss_fn = m.loss(from_logits=True, multiplier_lr=1.0)
    x = torch.tensor([[3.0, -3.0, -3.0, 1.0], [3.0, 3.0, -3.0, -3.0]], requires_grad=True)
    y = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    loss_fn.row_losses(x, y).sum().backward()
    assert loss_fn.multipliers[:, 0].tolist() == pytest.approx([0.4, 0.0])
    with pytest.raises(metricc.MetricError, match="reset_multipliers"):
        loss_fn(x[0], y[0])


def test_deepcopy_and_device_moves_keep_the_multipliers() -> None:
    loss_fn = metricc.compile("precision", constraints=["recall >= 0.9"]).loss()
    loss_fn.multipliers.fill_(0.25)
    assert copy.deepcopy(loss_fn).multipliers.tolist() == [0.25]
    assert loss_fn.to("cpu").multipliers.tolist() == [0.25]


# -------------------------------------------------------------------------- training

def test_trains_to_the_recall_target_with_a_standard_optimizer() -> None:
    """A logistic model, Adam, nothing else: precision alone gives up recall; the
    constrained loss holds recall at the target on the training data."""
    torch.manual_seed(0)
    n = 400
    y = (torch.rand(n) < 0.3).float()
    x = torch.randn(n, 2) + y[:, None] * 1.2
    results = {}
    for name, constraints in (("plain", None), ("constrained", ["recall >= 0.9"])):
        m = metricc.compile("precision", constraints=constraints)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", metricc.MetricWarning)
            loss_fn = m.loss(from_logits=True, amplifier=20.0)
        model = torch.nn.Linear(2, 1)
        torch.nn.init.zeros_(model.weight)
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        for _ in range(300):
            opt.zero_grad()
            loss_fn(model(x).squeeze(-1), y).backward()
            opt.step()
        with torch.no_grad():
            pred = (model(x).squeeze(-1) >= 0).numpy().astype(int)
        results[name] = (recall_score(y.numpy(), pred), precision_score(y.numpy(), pred))
    assert results["plain"][0] < 0.7
    assert 0.87 <= results["constrained"][0] <= 0.95
    assert results["constrained"][1] > 0.45


# -------------------------------------------------------------------------- threshold

def _brute_force(p: np.ndarray, y: np.ndarray, target: float) -> tuple[float, float]:
    """Every distinct score, lowest first; the first best precision with enough recall."""
    best, best_t = -1.0, math.nan
    for t in sorted(set(p.tolist())):
        pred = (p >= t).astype(int)
        if recall_score(y, pred) >= target:
            prec = precision_score(y, pred, zero_division=0)
            if prec > best + 1e-12:
                best, best_t = prec, t
    return best_t, best


@pytest.mark.parametrize("seed", range(6))
def test_best_threshold_with_constraints_equals_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 60
    y = (rng.random(n) < 0.3).astype(int)
    y[:2] = [0, 1]
    p = np.round(np.clip(rng.normal(0.4 + 0.25 * y, 0.2), 0, 1), 2)  # ties on purpose
    for target in (0.5, 0.8, 0.9):
        m = metricc.compile(f"precision subject to recall >= {target}")
        choice = m.best_threshold(p, y)
        assert (choice.threshold, choice.value) == pytest.approx(_brute_force(p, y, target))
        assert m.feasible(p, y, choice.threshold)
        plain = metricc.compile("precision").best_threshold(
            p, y, constraints=[f"recall >= {target}"])
        assert plain == choice


def test_best_threshold_when_no_threshold_meets_the_constraints() -> None:
    m = metricc.compile("precision", constraints=["recall >= 0.9", "fpr <= 0.0"])
    with pytest.raises(metricc.MetricError, match="no threshold meets every constraint") as e:
        m.best_threshold([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 1])
    assert "recall >= 0.9: highest 1" in str(e.value) and "fpr <= 0.0: lowest 0" in str(e.value)
    with pytest.raises(metricc.MetricSyntaxError, match="unknown metric"):
        metricc.compile("f1").best_threshold([0.3, 0.6], [0, 1], constraints=["recal >= 0.5"])


# ------------------------------------------------------------------------------ check

def test_check_says_whether_each_constraint_can_be_met() -> None:
    m = metricc.compile("f1", constraints=["recall >= 0.9", "fpr <= 0.05", "precision >= 2",
                                           "recall <= 0.5", "P >= 10", "recall >= precision"])
    report = m.check()
    verdicts = {c.constraint.text: (c.positives, c.negatives, c.met_by_right_moves)
                for c in report.constraints}
    assert verdicts["recall >= 0.9"] == ("increasing", "constant", True)
    assert verdicts["fpr <= 0.05"] == ("constant", "decreasing", True)
    assert verdicts["precision >= 2"][2] is False
    assert verdicts["recall <= 0.5"] == ("increasing", "constant", False)
    assert verdicts["P >= 10"] == ("constant", "constant", None)
    assert verdicts["recall >= precision"][2] is True
    assert report.monotonicity["TP"].direction == "increasing"  # the objective's report
    text = str(report)
    assert "precision >= 2: CANNOT be met" in text
    assert "P >= 10: does not depend on the predictions" in text
    assert set(report.unmet()) == {"precision >= 2", "recall <= 0.5"}


def test_standalone_files_refuse_constraints_rather_than_drop_them() -> None:
    with pytest.raises(metricc.MetricError, match="do not carry constraints"):
        standalone_source(metricc.compile("precision subject to recall >= 0.9"))


def test_benchmark_smoke_run(tmp_path: Path) -> None:
    """The evidence script end to end on one set for a few epochs (the recorded run is
    ``python benchmarks/constraints_tabular.py``)."""
    bench = load_script(Path("benchmarks/constraints_tabular.py"))
    assert bench.main(["--quick", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "constraints_summary.json").read_text())
    assert {(s["target"], s["method"]) for s in summary} == {
        (t, m) for t in bench.TARGETS for m in bench.METHODS}
    rows = (tmp_path / "constraints_runs.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * len(bench.TARGETS) * len(bench.METHODS)  # 2 folds, 1 seed
    assert (tmp_path / "constraints_recall.png").stat().st_size > 1000


def test_verify_checks_the_objective_and_every_constraint_kernel() -> None:
    m = metricc.compile("precision subject to recall >= 0.9")
    report = m.verify(numeric=False)
    assert report.ok
    assert any(c.name.startswith("constraint recall >= 0.9: ") for c in report.checks)
    assert any(not c.name.startswith("constraint ") for c in report.checks)


def test_constraints_refuse_k_by_k_metrics_clearly() -> None:
    with pytest.raises(metricc.MetricSyntaxError, match="K x K formula cannot take"):
        metricc.compile("quadratic_kappa subject to recall >= 0.5")
    with pytest.raises(metricc.MetricError, match="a K x K metric"):
        metricc.compile("quadratic_kappa", constraints=["recall >= 0.5"])
    with pytest.raises(metricc.MetricSyntaxError, match="'quadratic_kappa' is a K x K metric"):
        metricc.compile("precision", constraints=["quadratic_kappa >= 0.5"])


def test_pickled_metric_keeps_its_constraints() -> None:
    import pickle

    m = metricc.compile("precision subject to fpr <= 0.1", constraints=["recall >= 0.9"])
    back = pickle.loads(pickle.dumps(m))
    assert [c.text for c in back.constraints] == ["fpr <= 0.1", "recall >= 0.9"]


def test_constrained_losses_share_one_objective_class() -> None:
    # Each loss() analysed the objective again and built (exec'd) a class of its own:
    # 20 ms a call, and a fresh torch.compile trace for each.
    m = metricc.compile("precision subject to recall >= 0.9")
    first, second = m.loss(), m.loss(from_logits=True)
    assert type(first.objective) is type(second.objective)
    assert type(first.objective).formula == m.loss_class.formula
