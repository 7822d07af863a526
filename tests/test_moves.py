"""check(): direction along the moves a batch allows (FN -> TP, TN -> FP), and formulas that
do not depend on the predictions at all."""

from __future__ import annotations

import random
import warnings

import pytest

import metricc
from metricc.cli import main
from metricc.library import METRICS

ISSUE = "TP/(TP+FP) - 0.5*FP/n"


def test_the_issue_formula_trains_the_right_way() -> None:
    """Per count it 'increases with FN' (through n), but FN only changes by becoming TP."""
    m = metricc.compile(ISSUE)
    r = m.check()
    assert r.monotonicity["FN"].direction == "increasing"  # the old, count-by-count verdict
    assert str(r.moves["FN->TP"]) == "increasing (symbolic)"
    assert str(r.moves["TN->FP"]) == "decreasing (symbolic)"
    assert r.wrong_way() == {} and r.depends_on_predictions
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.loss()
    text = str(r)
    assert "a positive's score rises (FN->TP): increasing (symbolic)" in text
    assert "no feasible move takes it the wrong way" in text


def test_cli_check_reports_moves_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", ISSUE]) == 0
    out = capsys.readouterr().out
    assert "along the moves a batch allows (P and N fixed):" in out
    assert "a negative's score rises (TN->FP): decreasing (symbolic)" in out


@pytest.mark.parametrize("formula", ["P/N", "P/n", "(TP + FN)/(TP + FP + FN + TN)"])
def test_formulas_of_p_and_n_only_are_flagged(formula: str, capsys: pytest.CaptureFixture[str]) -> None:
    m = metricc.compile(formula)
    r = m.check()
    assert not r.depends_on_predictions
    assert {k: v.direction for k, v in r.moves.items()} == {"FN->TP": "constant", "TN->FP": "constant"}
    assert "DOES NOT DEPEND ON THE PREDICTIONS" in str(r)
    with pytest.warns(metricc.MetricWarning, match="does not depend on the predictions"):
        m.loss()
    assert main(["check", formula]) == 1
    assert "gradient is zero everywhere" in capsys.readouterr().out


def test_wrong_way_along_moves() -> None:
    m = metricc.compile("FP/(TP+FP)", higher_is_better=True)
    wrong = m.check().wrong_way()
    assert set(wrong) == {"FN->TP", "TN->FP"}
    with pytest.warns(metricc.MetricWarning) as caught:
        m.loss()
    message = str(caught[0].message)
    assert "penalises true positives" in message and "rewards false positives" in message
    assert "an FN becomes a TP" in message and "a TN becomes an FP" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metricc.compile("FP/(TP+FP)", higher_is_better=False).loss()


@pytest.mark.parametrize("name", sorted(METRICS))
def test_named_metrics_train_the_right_way_along_moves(name: str) -> None:
    r = metricc.compile(name).check()
    assert r.wrong_way() == {}, (name, r.moves)
    assert r.depends_on_predictions


@pytest.mark.parametrize("formula", [ISSUE, "f1", "mcc", "FP/(TP+FP)", "cohen_kappa", "recall - 0.1*FP/N"])
def test_move_verdicts_agree_with_finite_moves(formula: str) -> None:
    """Moving one element (exact arithmetic on counts) changes the metric as the verdict says."""
    m = metricc.compile(formula)
    r = m.check()
    rng = random.Random(0)
    sign = {"increasing": 1, "decreasing": -1, "constant": 0}
    for key, (up, down) in {"FN->TP": ("tp", "fn"), "TN->FP": ("fp", "tn")}.items():
        want = sign[r.moves[key].direction]
        for _ in range(40):
            c = {k: rng.randint(1, 50) for k in ("tp", "fp", "fn", "tn")}
            moved = dict(c)
            moved[up] += 1e-4
            moved[down] -= 1e-4
            delta = m.value(**moved) - m.value(**c)
            assert delta * want >= -1e-12, (key, c, delta)
