"""The self-adjusting relaxation ``(1 - p)^alpha p`` (Li et al., ACL 2020), and relaxation
objects: options held and checked by the relaxation, one softmax for 2x2 and K x K losses."""

from __future__ import annotations

import pickle

import pytest
import torch

import metricc
from metricc.runtime.options import MODES, RELAXATION_NAMES
from metricc.runtime.relax import RELAXATIONS, SelfAdjusting, bound_relaxation
from metricc.runtime.sigmoids import stable_sigmoid

F1 = metricc.compile("f1")


def _scores(from_logits: bool) -> torch.Tensor:
    if from_logits:
        edge = [-200.0, -40.0, -17.0, -1e-3, 0.0, 1e-3, 17.0, 40.0, 200.0]
        return torch.tensor(edge + torch.linspace(-8, 8, 41).tolist(), dtype=torch.float64)
    edge = [0.0, 1e-7, 0.5, 0.9, 0.999, 1 - 1e-7, 1.0]
    return torch.tensor(edge + torch.linspace(0, 1, 41).tolist(), dtype=torch.float64)


def test_registered_with_its_option() -> None:
    r = RELAXATIONS["self_adjusting"]
    assert "self_adjusting" in RELAXATION_NAMES and isinstance(r, SelfAdjusting)
    assert r.options == ("alpha",) and r.alpha == 1.0
    assert r.bind(alpha=2).alpha == 2.0 and r.alpha == 1.0  # bind copies; the registry keeps defaults
    assert "relaxation='self_adjusting', alpha=0.5" in repr(F1.loss("self_adjusting", alpha=0.5,
                                                                    from_logits=True))


@pytest.mark.parametrize(("alpha", "from_logits", "words"), [
    (-1.0, True, ">= 0"), (float("nan"), True, "finite"), ("1", True, "finite number"),
    (True, True, "finite number"), (0.5, False, "infinite slope at p = 1"),
])
def test_bad_alpha_is_refused(alpha: object, from_logits: bool, words: str) -> None:
    with pytest.raises(metricc.MetricError, match=words):
        F1.loss("self_adjusting", alpha=alpha, from_logits=from_logits)


@pytest.mark.parametrize("from_logits", [False, True])
@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.5])
def test_value_and_derivative_equal_the_definition_and_autograd(from_logits: bool,
                                                                 alpha: float) -> None:
    r = bound_relaxation("self_adjusting", from_logits, {"alpha": alpha})
    s = _scores(from_logits).requires_grad_(True)
    p = torch.sigmoid(s) if from_logits else s
    q = torch.sigmoid(-s) if from_logits else 1 - s
    torch.testing.assert_close(r.value(s, from_logits), q**alpha * p, rtol=1e-12, atol=0)
    (auto,) = torch.autograd.grad(r.value(s, from_logits, sigmoid=stable_sigmoid).sum(), s)
    want = r.derivative(s.detach(), from_logits)
    finite = torch.isfinite(auto)
    torch.testing.assert_close(want[finite], auto[finite], rtol=1e-10, atol=1e-300)
    for pair in (r.pair, r.pair_fused):
        a, d, k = pair(s.detach().clone(), from_logits)
        torch.testing.assert_close(a, r.value(s.detach(), from_logits), rtol=1e-12, atol=0)
        got = torch.full_like(a, k) if d is None else k * d
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-300)


def test_logits_stay_exact_where_the_probability_rounds_to_one() -> None:
    """``1 - sigmoid(s)`` is 0 in float32 past s = 17; ``sigmoid(-s)`` is not."""
    r = bound_relaxation("self_adjusting", True, {"alpha": 1.0})
    s = torch.tensor([20.0, 30.0])
    want = r.derivative(s.double(), True)
    for pair in (r.pair, r.pair_fused):
        a, d, k = pair(s.clone(), True)
        assert bool((a > 0).all()) and d is not None
        torch.testing.assert_close((k * d).double(), want, rtol=1e-4, atol=0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
def test_gradcheck_through_every_mode(mode: str, backward: str) -> None:
    torch.manual_seed(0)
    shape = (3, 4) if mode == "binary" else (3, 3, 4)
    x = (torch.randn(shape, dtype=torch.float64) * 2).requires_grad_(True)
    if mode == "multiclass":
        y = torch.randint(0, 3, (3, 4))
        y.view(-1)[:3] = torch.arange(3)
    else:
        y = (torch.rand(shape, dtype=torch.float64) < 0.4).double()
    loss = F1.loss("self_adjusting", alpha=1.5, mode=mode, from_logits=True, backward=backward,
                   eps=1e-7)
    assert torch.autograd.gradcheck(lambda t: loss(t, y), (x,))
    # alpha = 0 is the linear relaxation
    lin = F1.loss("linear", mode=mode, from_logits=True)
    sa0 = F1.loss("self_adjusting", alpha=0.0, mode=mode, from_logits=True)
    torch.testing.assert_close(sa0(x, y), lin(x, y), rtol=1e-12, atol=1e-12)


def test_verify_checks_it_through_the_registry() -> None:
    report = metricc.compile("f1").verify()
    names = [c.name for c in report.checks if "self_adjusting" in c.name]
    assert any(n.startswith("relax_grad == d relax/ds (self_adjusting,") for n in names)
    assert any(n.startswith("self_adjusting/symbolic") for n in names)


def test_relaxation_objects_are_immutable_and_pickle() -> None:
    r = RELAXATIONS["anyloss"].bind(amplifier=50)
    with pytest.raises(AttributeError, match="immutable"):
        r.amplifier = 3.0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(r)) == r and hash(r) == hash(RELAXATIONS["anyloss"].bind(
        amplifier=50.0))
    with pytest.raises(metricc.MetricError, match="did you mean 'amplifier'"):
        RELAXATIONS["anyloss"].bind(amplifer=50)


def test_one_softmax_rule_and_default_for_2x2_and_k_by_k_losses() -> None:
    """Both default to temperature 1, refuse T > 1 on probabilities, and relax with the
    same object: at equal options the soft matrix's diagonal is the 2x2 losses' TP."""
    qwk = metricc.compile("quadratic_kappa")
    assert qwk.loss().temperature == F1.loss(mode="multiclass").temperature == 1.0
    assert qwk.loss(temperature=0.5).relax == F1.loss(mode="multiclass", temperature=0.5).relax
    for loss in (lambda **o: qwk.loss(**o), lambda **o: F1.loss(mode="multiclass", **o)):
        with pytest.raises(metricc.MetricError, match="infinite slope at p = 0"):
            loss(temperature=2.0)
        loss(temperature=2.0, from_logits=True)  # on logits any T > 0
    acc = metricc.compile("sum(i, C[i,i]) / n")
    x = torch.randn(6, 3, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    rec = metricc.compile("TP").loss(mode="multiclass", average="micro", from_logits=True,
                                     temperature=0.5, relaxation="softmax")
    tp = -float(rec(x, y))  # "TP" is higher-is-better: the loss is 1 - TP (micro sum)
    assert 1 - float(acc.loss(from_logits=True, temperature=0.5)(x, y)) == pytest.approx(
        (tp + 1) / 6, rel=1e-6)  # one of the two is summed in float32


def test_k_by_k_losses_get_the_probability_hint() -> None:
    loss = metricc.compile("quadratic_kappa").loss(from_logits=True)
    p = torch.softmax(torch.randn(8, 4), 1)
    with pytest.warns(metricc.MetricWarning, match="looks like probabilities"):
        loss(p, torch.randint(0, 4, (8,)))
