"""The curve language: every reduction, its index form, every misuse as a positioned error, and
the exact values of the named curve metrics against scikit-learn and torchmetrics."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score

from metricc.errors import MetricError, MetricSyntaxError
from metricc.evaluate.curve_formula import evaluate_curve
from metricc.language.curve import Area, AreaWithin, Best, BestWhere, CurveFormula, Steps, reductions
from metricc.language.parse import parse, parse_constraint
from metricc.library import CURVE_METRICS, lookup

TP, FP, FN, TN = sympy.symbols("TP FP FN TN")
P, N = sympy.symbols("P N")
RECALL, FPR, PRECISION = TP / (TP + FN), FP / (FP + TN), TP / (TP + FP)


# --- parsing and index form --------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("area(recall, fpr)", Area(RECALL, FPR)),
    ("area(TP/(TP+FN), FP/(FP+TN))", Area(RECALL, FPR)),
    ("area(recall, fpr, 0, 0.5)", AreaWithin(RECALL, FPR, 0, sympy.Rational(1, 2))),
    ("steps(precision, recall)", Steps(PRECISION, RECALL)),
    ("best(f1)", Best(2 * TP / (2 * TP + FP + FN))),
    ("best(recall, precision >= 0.9)", BestWhere(RECALL, PRECISION - sympy.Rational(9, 10))),
    ("best(precision, fpr <= 0.1)", BestWhere(PRECISION, sympy.Rational(1, 10) - FPR)),
    ("best(TP/P)", Best(TP / (TP + FN))),  # inside a reduction P is TP + FN at that threshold
    ("auroc", Area(RECALL, FPR)),
    ("roc_auc", Area(RECALL, FPR)),
    ("ap", Steps(PRECISION, RECALL)),
    ("auprc", Steps(PRECISION, RECALL)),
    ("2*auroc - 1", 2 * Area(RECALL, FPR) - 1),
    ("(auroc + average_precision)/2", (Area(RECALL, FPR) + Steps(PRECISION, RECALL)) / 2),
    ("area(recall, fpr) * P / n", Area(RECALL, FPR) * P / (P + N)),
    ("r = TP/(TP+FN); x = FP/(FP+TN)\narea(r, x)", Area(RECALL, FPR)),
    ("a = area(recall, fpr)\nb = steps(precision, recall)\na*b", Area(RECALL, FPR) * Steps(PRECISION, RECALL)),
    ("best(\n  recall,\n  precision >= 0.5\n)", BestWhere(RECALL, PRECISION - sympy.Rational(1, 2))),
])
def test_every_reduction_resolves_to_index_form(text: str, expected: sympy.Expr) -> None:
    f = parse(text)
    assert isinstance(f, CurveFormula)
    assert sympy.simplify(f.expr - expected) == 0, f.expr
    assert {type(r) for r in reductions(f.expr)} == {type(r) for r in reductions(expected)}


def test_parameters_and_named_metric_defaults() -> None:
    f = parse("best(fbeta, recall >= q)")
    assert isinstance(f, CurveFormula)
    assert f.parameters == ("beta", "q") and f.defaults == {"beta": 1.0}
    assert f.metrics == ("fbeta", "recall")
    f = parse("partial_auroc")
    assert isinstance(f, CurveFormula)
    assert f.parameters == ("max_fpr",) and f.defaults == {"max_fpr": 0.1}
    (node,) = reductions(f.expr)
    assert isinstance(node, AreaWithin) and node.args[3] == sympy.Symbol("max_fpr")
    f = parse("area(recall, fpr, lo, hi)")
    assert isinstance(f, CurveFormula)
    assert f.parameters == ("hi", "lo")


def test_library_marks_curve_metrics_and_their_aliases() -> None:
    assert set(CURVE_METRICS) == {"auroc", "average_precision", "partial_auroc", "recall_at_precision",
                                  "precision_at_recall", "best_f1"}
    for alias, name in {"roc_auc": "auroc", "ap": "average_precision", "auprc": "average_precision"}.items():
        metric = lookup(alias)
        assert metric is not None and metric.name == name and metric.curve and not metric.matrix
    for metric in CURVE_METRICS.values():
        assert isinstance(parse(metric.formula), CurveFormula)
        assert set(metric.params) == set(parse(metric.formula).parameters)
    recall = lookup("recall")
    assert recall is not None and not recall.curve


def _error(text: str) -> MetricSyntaxError:
    with pytest.raises(MetricSyntaxError) as info:
        parse(text)
    return info.value


@pytest.mark.parametrize(("text", "column", "words"), [
    ("aera(recall, fpr)", 1, "did you mean 'area'"),
    ("area(recall)", 1, "area() takes 2 or 4 arguments, got 1"),
    ("1 - steps(precision, recall, 0)", 5, "steps() takes 2 arguments"),
    ("best(f1, recall >= 0.5, 1)", 1, "best() takes 1 or 2 arguments"),
    ("area(recall, fpr) + TP", 21, "'TP' is a count at one threshold"),
    ("area(recall, fpr) / (2 * FP)", 26, "'FP' is a count at one threshold"),
    ("recall + auroc", 1, "'recall' is a 2x2 metric at one threshold"),
    ("area(best(f1), fpr)", 6, "reductions do not nest"),
    ("area(auroc, fpr)", 6, "'auroc' is a curve metric"),
    ("area(recall, fpr) + sum(i, C[i,i])/n", 21, "K x K constructs"),
    ("auroc + multiclass_accuracy", 9, "'multiclass_accuracy' is a K x K metric"),
    ("auroc subject to recall >= 0.9", 7, "best(recall, precision >= 0.9)"),
    ("area(recall >= 0.5, fpr)", 13, "a comparison ('>=') is an argument only of best"),
    ("sqrt(recall >= 0.5)", 13, "only of best"),
    ("best(recall >= 0.5)", 13, "only of best"),
    ("best(recall, precision == 0.9)", 24, "'==' is not a bound"),
    ("best(recall, precision > 0.9)", 24, "'>' is not a bound"),
    ("best(recall, precision)", 1, "takes a bound as its second argument"),
    ("area(recall, fpr, 0, TP)", 22, "'TP' is a count at one threshold"),
    ("area(recall, fpr, 0, P/n)", 1, "area()'s range [lo, hi] takes numbers or parameters"),
    ("best = TP\narea(recall, fpr)", 1, "'best' is a function and cannot be redefined"),
    ("P = TP\narea(recall, fpr)", 1, "'P' is built in"),
    ("a = b\nb = area(recall, fpr)\na", 5, "'b' is used before it is defined"),
    ("x = 2*TP\narea(recall, fpr) - x", 7, "'TP' is a count at one threshold"),
])
def test_every_misuse_is_a_positioned_error(text: str, column: int, words: str) -> None:
    err = _error(text)
    assert words in err.reason, err.reason
    assert err.column == column, str(err)


def test_comparison_outside_any_call_and_curve_metric_in_a_constraint() -> None:
    err = _error("recall >= 0.5")
    assert (err.line, err.column) == (1, 8)
    with pytest.raises(MetricSyntaxError, match="'auroc' is a curve metric"):
        parse_constraint("auroc >= 0.9")
    with pytest.raises(MetricSyntaxError, match="no 'subject to' clause"):
        parse("recall subject to auroc >= 0.9")
    with pytest.raises(MetricError, match="without values"):
        evaluate_curve(parse("recall_at_precision").expr, np.array([1, 0]), np.array([1, 0]), 1, 1)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["==", "!=", ">", "<", "=>", "=<"]), st.text(" ", max_size=5),
       st.sampled_from(["recall", "precision", "f1", "TP/(TP+FP)"]))
def test_a_bound_that_is_not_ge_or_le_is_refused_at_its_operator(op: str, pad: str, g: str) -> None:
    text = f"best(recall,{pad}{g} {op} 0.5)"
    err = _error(text)
    assert err.column == text.index(op) + 1
    assert "not a bound" in err.reason


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["recall", "precision", "fpr", "f1", "specificity", "TP/(TP+FP+1)"]),
       st.sampled_from(["recall", "fpr", "TP/P"]), st.sampled_from(["area", "steps"]))
def test_any_two_named_2x2_metrics_make_a_reduction(y: str, x: str, kind: str) -> None:
    f = parse(f"{kind}({y}, {x})")
    assert isinstance(f, CurveFormula)
    (node,) = reductions(f.expr)
    assert isinstance(node, Area if kind == "area" else Steps)
    y2x2, x2x2 = parse(y).expr, parse(x).expr
    assert sympy.simplify(node.args[0] - y2x2) == 0 and sympy.simplify(node.args[1] - x2x2) == 0


# --- exact values ------------------------------------------------------------------------------

def exact_points(scores: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The exact curve by one sort: ascending thresholds (every distinct score), then the top point."""
    order = np.argsort(-scores, kind="mergesort")
    s, t = scores[order], target[order]
    tps, fps = np.cumsum(t), np.cumsum(1 - t)
    last = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]
    tp, fp = np.r_[0, tps[last]], np.r_[0, fps[last]]
    return tp[::-1], fp[::-1], int(tps[-1]), int(fps[-1])


def _data(seed: int, n: int = 200, levels: int = 12) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    target = (rng.random(n) < 0.3).astype(np.int64)
    target[:2] = [0, 1]
    scores = np.round(np.clip(rng.normal(0.5 + 0.15 * target, 0.2), 0, 1) * levels) / levels  # many ties
    return scores, target


def _exact(name: str, scores: np.ndarray, target: np.ndarray, **values: float) -> float:
    f = parse(name)
    tp, fp, pos, neg = exact_points(scores, target)
    return float(evaluate_curve(f.expr, tp, fp, pos, neg, {**f.defaults, **values}))


@pytest.mark.parametrize("seed", range(6))
def test_auroc_ap_and_partial_auroc_equal_scikit_learn_with_ties(seed: int) -> None:
    scores, target = _data(seed)
    assert _exact("auroc", scores, target) == pytest.approx(roc_auc_score(target, scores), abs=1e-12)
    assert _exact("2*roc_auc - 1", scores, target) == pytest.approx(2 * roc_auc_score(target, scores) - 1,
                                                                   abs=1e-12)
    assert _exact("average_precision", scores, target) == pytest.approx(
        average_precision_score(target, scores), abs=1e-12)
    for m in (0.05, 0.1, 0.3, 0.5, 1.0):
        assert _exact("partial_auroc", scores, target, max_fpr=m) == pytest.approx(
            roc_auc_score(target, scores, max_fpr=m), abs=1e-9), m


@pytest.mark.parametrize("seed", range(6))
def test_best_f1_and_operating_points_equal_scikit_learn_and_torchmetrics(seed: int) -> None:
    from torchmetrics.classification import BinaryPrecisionAtFixedRecall, BinaryRecallAtFixedPrecision

    scores, target = _data(seed)
    p, r, _ = precision_recall_curve(target, scores)
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.nan_to_num(2 * p * r / (p + r))
    assert _exact("best_f1", scores, target) == pytest.approx(f1.max(), abs=1e-12)
    preds, labels = torch.tensor(scores, dtype=torch.float64), torch.tensor(target)
    tp, fp, pos, _ = exact_points(scores, target)
    with np.errstate(invalid="ignore"):
        recall, precision = tp / pos, tp / (tp + fp)
    for m in (0.0, 0.3, 0.5, 0.7, 0.9, 0.99, 1.0):
        got = _exact("recall_at_precision", scores, target, min_precision=m)
        feasible = recall[precision >= m]
        assert got == (feasible.max() if feasible.size else 0.0), m  # float64, by brute force
        # torchmetrics computes its curve in float32 whatever the input: equal once rounded so.
        want, _ = BinaryRecallAtFixedPrecision(min_precision=m)(preds, labels)
        assert np.float32(got) == want.numpy(), m
        got = _exact("precision_at_recall", scores, target, min_recall=m)
        feasible = precision[(recall >= m) & ~np.isnan(precision)]
        assert got == (feasible.max() if feasible.size else 0.0), m
        want, _ = BinaryPrecisionAtFixedRecall(min_recall=m)(preds, labels)
        assert np.float32(got) == want.numpy(), m


def test_no_feasible_threshold_gives_zero_as_torchmetrics() -> None:
    from torchmetrics.classification import BinaryRecallAtFixedPrecision

    scores, target = np.array([0.9, 0.8, 0.4, 0.2]), np.array([0, 1, 0, 1])  # the top score is a negative
    want, _ = BinaryRecallAtFixedPrecision(min_precision=0.95)(torch.tensor(scores), torch.tensor(target))
    assert float(want) == 0.0
    assert _exact("recall_at_precision", scores, target, min_precision=0.95) == 0.0
    assert _exact("best(recall, precision >= 0.5)", scores, target) == 1.0


@pytest.mark.parametrize("seed", range(3))
def test_any_formula_over_reductions_by_brute_force(seed: int) -> None:
    scores, target = _data(seed, n=60, levels=7)
    tp, fp, pos, neg = exact_points(scores, target)
    fn, tn = pos - tp, neg - fp
    with np.errstate(invalid="ignore", divide="ignore"):
        recall, prec, f1 = tp / pos, tp / (tp + fp), 2 * tp / (2 * tp + fp + fn)
    want = max(f1[(recall >= 0.5)]) * pos / (pos + neg) + np.nanmax(tn / (tn + fn + 1))
    got = _exact("best(f1, recall >= 0.5) * P / n + best(TN/(TN+FN+1))", scores, target)
    assert got == pytest.approx(want, abs=1e-12)
    batched = evaluate_curve(parse("steps(precision, recall)").expr, np.stack([tp, tp]), np.stack([fp, fp]),
                             np.array([pos, pos]), np.array([neg, neg]))
    assert batched.shape == (2,) and np.allclose(batched, average_precision_score(target, scores))
    assert np.isnan(prec[-1])  # the top point's 0/0 is never used by steps()
