"""Options that were not checked or not used (issue 36, point 4): each is now refused with a
MetricError saying what to do, applied, or warned about."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import f1_score

import metricc
from metricc import MetricError, MetricWarning
from metricc.cli import main
from metricc.runtime import hints

F1 = metricc.compile("f1")
QWK = metricc.compile("quadratic_kappa")


# --- relaxation options the relaxation in use does not take ----------------------------------
@pytest.mark.parametrize(("args", "options", "message"), [
    (("linear",), {"amplifier": 20}, r"relaxation='linear' does not use 'amplifier' \(its "
                                     r"options: none\).*relaxation='anyloss'"),
    ((), {"temperature": 0.5}, r"relaxation='anyloss' does not use 'temperature' \(its "
                               r"options: amplifier\).*'softmax'"),
    (("sigmoid",), {"amplifier": 5, "from_logits": True}, r"'sigmoid' does not use 'amplifier'"
                                                          r" \(its options: slope, offset\)"),
    ((), {"mode": "multiclass", "num_classes": 3, "amplifier": 5}, "does not use"),
    (("anyloss",), {"alpha": 2.0}, r"'alpha' \(its options: amplifier\).*'self_adjusting'"),
])
def test_an_option_of_another_relaxation_is_refused(args, options, message):
    options.pop("num_classes", None)
    with pytest.raises(MetricError, match=message):
        F1.loss(*args, **options)


def test_the_relaxations_own_options_are_taken():
    assert F1.loss("anyloss", amplifier=20).relax.amplifier == 20
    assert F1.loss(mode="multiclass", temperature=0.5).relax.temperature == 0.5
    assert QWK.loss(temperature=0.5).relax.temperature == 0.5
    with pytest.raises(MetricError, match="relaxation='linear' does not use 'temperature'"):
        QWK.loss("linear", temperature=0.5)
    with pytest.raises(MetricError, match="relaxation='linear' does not use 'amplifier'"):
        metricc.compile("precision subject to recall >= 0.9").loss("linear", amplifier=3)


# --- a threshold in multiclass mode -------------------------------------------------------------
def test_multiclass_refuses_a_threshold_multilabel_applies_it():
    g = torch.Generator().manual_seed(0)
    p = torch.rand(40, 3, generator=g)
    t = torch.randint(0, 3, (40,), generator=g)
    with pytest.raises(MetricError, match=r"threshold=0.99 does not apply to mode='multiclass'.*"
                                          r"argmax"):
        F1.score(p, t, 0.99, mode="multiclass")
    with pytest.raises(MetricError, match="argmax"):
        F1.metric(mode="multiclass", num_classes=3, threshold=0.7)
    assert F1.score(p, t, mode="multiclass") == F1.score(p, t, None, mode="multiclass")
    y = torch.nn.functional.one_hot(t, 3)
    for cut in (0.3, 0.99):
        ref = f1_score(y.numpy(), (p >= cut).numpy(), average="macro", zero_division=0)
        assert F1.score(p, y, cut, mode="multilabel", zero_division=0) == pytest.approx(ref, abs=1e-12)


# --- ignore_index -------------------------------------------------------------------------------
@pytest.fixture
def fresh_ignore_warning(monkeypatch):
    monkeypatch.setattr(hints, "_IGNORE_WARNED", set())


def test_metric_and_score_warn_when_ignore_index_drops_every_positive(fresh_ignore_warning):
    p = torch.tensor([0.9, 0.8, 0.1, 0.2])
    t = torch.tensor([0, 255, 255, 0])  # a 0/255 mask read with ignore_index=255
    m = F1.metric(ignore_index=255)
    with pytest.warns(MetricWarning, match="ignore_index=255 removed every positive.*target / 255"):
        m.update(p, t)
    assert float(m.compute()) == 0.0
    hints._IGNORE_WARNED.clear()
    with pytest.warns(MetricWarning, match="ignore_index=255 removed every positive"):
        F1.score(p, t, ignore_index=255, zero_division=0.0)
    hints._IGNORE_WARNED.clear()
    with pytest.warns(MetricWarning, match="removed every positive"):
        F1.score(p.reshape(2, 2), t.reshape(2, 2), mode="multilabel", ignore_index=255,
                 zero_division=0.0)


def test_no_warning_when_positives_are_kept(fresh_ignore_warning, recwarn):
    p = torch.tensor([0.9, 0.8, 0.1, 0.2])
    t = torch.tensor([1, 255, 255, 0])
    assert F1.score(p, t, ignore_index=255) == 1.0
    m = F1.metric(ignore_index=255)
    m.update(p, t)
    assert not [w for w in recwarn if issubclass(w.category, MetricWarning)]


@pytest.mark.parametrize("mode", ["binary", "multilabel"])
@pytest.mark.parametrize("label", [0, 1])
def test_ignore_index_equal_to_a_label_is_refused(mode, label):
    match = rf"ignore_index={label} is a label of mode='{mode}'"
    with pytest.raises(MetricError, match=match):
        F1.loss(mode=mode, ignore_index=label)
    with pytest.raises(MetricError, match=match):
        F1.score(torch.rand(4, 2), torch.randint(0, 2, (4, 2)), mode=mode, ignore_index=label)
    with pytest.raises(MetricError, match=match):
        F1.metric(mode=mode, num_classes=None if mode == "binary" else 2, ignore_index=label)


def test_multiclass_may_still_ignore_a_real_class():
    p, t = torch.tensor([0, 1, 2, 2]), torch.tensor([0, 2, 2, 1])
    assert F1.score(p, t, mode="multiclass", num_classes=3, ignore_index=0) == pytest.approx(
        f1_score([2, 2, 1], [1, 2, 2], labels=[1, 2], average="macro"))


# --- metricc grad with constraints --------------------------------------------------------------
def test_grad_prints_each_constraint(capsys):
    assert main(["grad", "precision subject to recall >= 0.9, fpr <= 0.1"]) == 0
    out = capsys.readouterr().out
    head, first, second = out.split("\nconstraint ")
    assert "f                    = TP/(FP + TP)" in head
    assert first.startswith("1: recall >= 0.9  (h1 >= 0.9)")
    assert second.startswith("2: fpr <= 0.1  (h2 <= 0.1)")
    rows = dict(line.split(" = ", 1) for line in first.splitlines()[1:])
    TP, FN = sympy.symbols("TP FN")
    recall = TP / (TP + FN)
    assert sympy.simplify(sympy.sympify(rows["h1".ljust(22)].strip()) - recall) == 0
    assert sympy.simplify(sympy.sympify(rows["dh1/dFN".ljust(22)].strip())
                          - sympy.diff(recall, FN)) == 0
    assert main(["grad", "--latex", "f1 subject to recall >= 0.5"]) == 0
    assert r"\frac{\partial h1}{\partial \mathrm{FN}}" in capsys.readouterr().out


# --- a K x K loss on a batch with nothing left -------------------------------------------------
@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
@pytest.mark.parametrize("name", ["quadratic_kappa", "expected_cost", "multiclass_accuracy"])
def test_an_all_ignored_batch_is_not_the_optimum_and_has_no_gradient(name, backward):
    m = metricc.compile(name)
    x = torch.rand(6, 3, dtype=torch.float64, requires_grad=True)
    loss = m.loss(ignore_index=255, backward=backward)(x, torch.full((6,), 255))
    loss.backward()
    assert loss.item() == 1.0 and x.grad is not None and not x.grad.any()
    t = torch.tensor([0, 1, 2, 0, 1, 2])
    perfect = m.loss(backward=backward, from_logits=True)(
        20 * torch.nn.functional.one_hot(t, 3).double(), t)
    assert perfect.item() < 0.01 < loss.item()  # the optimum is elsewhere
    weights = torch.zeros(6, dtype=torch.float64)
    assert m.loss(backward=backward)(x, t, weights).item() == 1.0


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**32 - 1), st.sampled_from(["mean", "sum"]))
def test_samplewise_leaves_empty_samples_out(n, seed, reduction):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 4, generator=g, dtype=torch.float64)
    t = torch.randint(0, 3, (n, 4), generator=g)
    empty = torch.from_numpy(np.random.default_rng(seed).random(n) < 0.5)
    empty[0] = False
    t[empty] = 255
    loss = QWK.loss(ignore_index=255, multidim_average="samplewise", reduction=reduction)
    per = QWK.loss(ignore_index=255, multidim_average="samplewise", reduction="none")(x, t)
    assert (per[empty] == 1.0).all()
    alone = QWK.loss(ignore_index=255, multidim_average="samplewise", reduction=reduction)(
        x[~empty], t[~empty])
    assert loss(x, t).item() == pytest.approx(alone.item(), rel=1e-12)


# --- duplicate constraints -----------------------------------------------------------------------
@pytest.mark.parametrize(("formula", "constraints"), [
    ("precision", ["recall >= 0.9", "recall >= 0.9"]),
    ("precision subject to recall >= 0.9", ["0.9 <= TP/(TP + FN)"]),
    ("precision subject to recall >= 0.9 and recall >= 0.9", []),
])
def test_a_constraint_given_twice_is_refused(formula, constraints):
    with pytest.raises(MetricError, match="give each constraint once"):
        metricc.compile(formula, constraints=constraints)


def test_different_constraints_are_kept():
    m = metricc.compile("precision", constraints=["recall >= 0.9", "recall >= 0.8",
                                                  "recall <= 0.95"])
    assert [c.text for c in m.constraints] == ["recall >= 0.9", "recall >= 0.8", "recall <= 0.95"]
