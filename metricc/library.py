"""The named metrics: formula, parameters, aliases, direction and scikit-learn counterpart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ALIASES", "CURVE_METRICS", "GROUP_METRICS",
           "MATRIX_METRICS", "METRICS", "REGISTRIES", "NamedMetric", "lookup", "micro_tn_refusal",
           "names"]


@dataclass(frozen=True)
class NamedMetric:
    """A metric metricc knows by name.

    ``sklearn`` names the scikit-learn call it must agree with on hard binary
    labels (``None`` where scikit-learn has none; the tests then use
    ``sklearn.metrics.confusion_matrix``): ``tests/oracles.py`` holds the references.
    """

    name: str
    formula: str
    description: str
    higher_is_better: bool = True
    params: Mapping[str, float | str] = field(default_factory=dict)
    #: parameter -> (lowest allowed value, why): compile refuses values below it.
    bounds: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    sklearn: str | None = None
    #: A metric over the whole K x K matrix (``docs/matrix.md``) rather than TP, FP, FN, TN.
    matrix: bool = False
    #: A threshold-free metric over the ROC/PR curve (``docs/curve.md``): a formula of
    #: ``area``, ``steps`` and ``best`` over the 2 x 2 counts at every threshold.
    curve: bool = False
    #: A fairness metric over the 2 x 2 counts of each group (``docs/groups.md``): a formula of
    #: ``gap``, ``ratio``, ``worst``, ... over per-group rates; ``sklearn`` names fairlearn's.
    groups: bool = False


_TPR = "TP/(TP+FN)"
_TNR = "TN/(TN+FP)"
_FPR = "FP/(FP+TN)"
_FNR = "FN/(FN+TP)"
_PPV = "TP/(TP+FP)"
_NPV = "TN/(TN+FN)"

_ALL = [
    NamedMetric("accuracy", "(TP+TN)/(TP+FP+FN+TN)", "fraction of correct predictions",
                sklearn="accuracy_score"),
    NamedMetric("balanced_accuracy", f"({_TPR} + {_TNR})/2", "mean of recall and specificity",
                sklearn="balanced_accuracy_score"),
    NamedMetric("precision", _PPV, "positive predictive value", aliases=("ppv",),
                sklearn="precision_score"),
    NamedMetric("recall", _TPR, "true positive rate", aliases=("sensitivity", "tpr", "hit_rate"),
                sklearn="recall_score"),
    NamedMetric("specificity", _TNR, "true negative rate", aliases=("tnr", "selectivity"),
                sklearn="recall_score(pos_label=0)"),
    NamedMetric("npv", _NPV, "negative predictive value", sklearn="precision_score(pos_label=0)"),
    NamedMetric("fpr", _FPR, "false positive rate", higher_is_better=False,
                aliases=("fall_out",)),
    NamedMetric("fnr", _FNR, "false negative rate", higher_is_better=False,
                aliases=("miss_rate",)),
    NamedMetric("fdr", "FP/(FP+TP)", "false discovery rate", higher_is_better=False),
    NamedMetric("f1", "2*TP/(2*TP+FP+FN)", "harmonic mean of precision and recall",
                aliases=("f1_score",), sklearn="f1_score"),
    NamedMetric("fbeta", "(1+beta^2)*TP/((1+beta^2)*TP + beta^2*FN + FP)",
                "F-beta: recall weighted beta times as much as precision",
                params={"beta": 1.0}, sklearn="fbeta_score(beta=beta)",
                bounds={"beta": (0.0, "recall is weighted beta times as much as precision, and the "
                                      "formula's beta^2 would silently turn -2 into 2")}),
    NamedMetric("jaccard", "TP/(TP+FP+FN)", "intersection over union",
                aliases=("iou", "threat_score", "csi"), sklearn="jaccard_score"),
    NamedMetric("dice", "2*TP/(2*TP+FP+FN)", "Dice coefficient (equal to F1 on binary labels)",
                aliases=("sorensen_dice",), sklearn="f1_score"),
    NamedMetric("tversky", "TP/(TP + alpha*FP + beta*FN)",
                "Tversky index: alpha weighs false positives, beta false negatives",
                params={"alpha": 0.5, "beta": 0.5}, sklearn="f1_score (alpha = beta = 0.5)",
                bounds={"alpha": (0.0, "a negative weight rewards false positives"),
                        "beta": (0.0, "a negative weight rewards false negatives")}),
    NamedMetric("mcc", "(TP*TN - FP*FN)/sqrt((TP+FP)*(TP+FN)*(TN+FP)*(TN+FN))",
                "Matthews correlation coefficient", aliases=("phi", "matthews"),
                sklearn="matthews_corrcoef"),
    NamedMetric("cohen_kappa", "2*(TP*TN - FN*FP)/((TP+FP)*(FP+TN) + (TP+FN)*(FN+TN))",
                "Cohen's kappa: agreement beyond chance", aliases=("kappa",),
                sklearn="cohen_kappa_score"),
    NamedMetric("g_mean", f"sqrt({_TPR} * {_TNR})", "geometric mean of recall and specificity",
                aliases=("gmean", "geometric_mean")),
    NamedMetric("informedness", f"{_TPR} + {_TNR} - 1", "Youden's J: recall + specificity - 1",
                aliases=("youden_j", "bookmaker_informedness"),
                sklearn="balanced_accuracy_score(adjusted=True)"),
    NamedMetric("markedness", f"{_PPV} + {_NPV} - 1", "precision + NPV - 1",
                aliases=("deltap",)),
    NamedMetric("fowlkes_mallows", f"sqrt({_PPV} * {_TPR})",
                "geometric mean of precision and recall", aliases=("fmi",)),
    # (sqrt(TPR*FPR) - FPR)/(TPR - FPR) with the common factor sqrt(TPR) - sqrt(FPR)
    # cancelled: the same function, minus a removable 0/0 on the diagonal TPR = FPR
    # where every untrained model starts (and where no eps guard can help).
    NamedMetric("prevalence_threshold",
                f"sqrt({_FPR})/(sqrt({_TPR}) + sqrt({_FPR}))",
                "prevalence threshold of the ROC point (lower is better)",
                higher_is_better=False),
    NamedMetric("lr_plus", f"({_TPR})/({_FPR})", "positive likelihood ratio",
                aliases=("positive_likelihood_ratio",), sklearn="class_likelihood_ratios[0]"),
    NamedMetric("lr_minus", f"({_FNR})/({_TNR})", "negative likelihood ratio",
                higher_is_better=False, aliases=("negative_likelihood_ratio",),
                sklearn="class_likelihood_ratios[1]"),
    NamedMetric("diagnostic_odds_ratio", "(TP*TN)/(FP*FN)", "diagnostic odds ratio",
                aliases=("dor",)),
    NamedMetric("error_rate", "(FP+FN)/(TP+FP+FN+TN)", "fraction of wrong predictions",
                higher_is_better=False, aliases=("misclassification_rate",),
                sklearn="1 - accuracy_score"),
]

# K x K metrics. Kappa is 1 - observed/expected weighted disagreement, with the
# expected matrix row(i) col(j) / n; the weights are those of scikit-learn's
# cohen_kappa_score (1 - delta, |i-j|, (i-j)^2 over class indices 0..K-1).
_KAPPA = "1 - n * sum(i, j, {w} * C[i,j]) / sum(i, j, {w} * row(i) * col(j))"
_MATRIX = [
    NamedMetric("multiclass_accuracy", "sum(i, C[i,i]) / n",
                "fraction of samples whose predicted class is the true class", matrix=True,
                sklearn="accuracy_score"),
    NamedMetric("multiclass_balanced_accuracy",
                "has = present(row(i))  # classes absent from the target are left out\n"
                "sum(i, has * C[i,i] / (row(i) + 1 - has)) / sum(i, has)",
                "mean recall over the classes present in the target", matrix=True,
                sklearn="balanced_accuracy_score"),
    NamedMetric("multiclass_mcc",
                "c = sum(k, C[k,k])\n"
                "(c*n - sum(k, col(k)*row(k))) / "
                "sqrt((n^2 - sum(k, col(k)^2)) * (n^2 - sum(k, row(k)^2)))",
                "multiclass Matthews correlation (Gorodkin's R_K)", matrix=True,
                aliases=("rk", "multiclass_matthews"), sklearn="matthews_corrcoef"),
    NamedMetric("multiclass_kappa", _KAPPA.format(w="(1 - delta(i,j))"),
                "Cohen's kappa over K classes (unweighted)", matrix=True,
                aliases=("multiclass_cohen_kappa",), sklearn="cohen_kappa_score"),
    NamedMetric("linear_kappa", _KAPPA.format(w="abs(i-j)"),
                "Cohen's kappa with linear weights |i-j| (ordinal classes)", matrix=True,
                aliases=("linear_weighted_kappa",),
                sklearn="cohen_kappa_score(weights='linear')"),
    NamedMetric("quadratic_kappa", _KAPPA.format(w="(i-j)^2"),
                "Cohen's kappa with quadratic weights (i-j)^2 (QWK, ordinal grading)",
                matrix=True, aliases=("qwk", "quadratic_weighted_kappa"),
                sklearn="cohen_kappa_score(weights='quadratic')"),
    NamedMetric("expected_cost", "sum(i, j, M[i,j] * C[i,j]) / n",
                "mean misclassification cost under the cost matrix M (M[i,j]: true i "
                "predicted j)", higher_is_better=False, matrix=True,
                params={"M": "1 - delta(i, j)"}),
]

# Threshold-free metrics over the curve: the counts at every threshold (docs/curve.md).
# partial_auroc is McClish-standardised exactly as scikit-learn's roc_auc_score(max_fpr=m).
_CURVE = [
    NamedMetric("auroc", "area(recall, fpr)", "area under the ROC curve", curve=True,
                aliases=("roc_auc",), sklearn="roc_auc_score"),
    NamedMetric("average_precision", "steps(precision, recall)",
                "average precision: the step-wise area under the precision-recall curve",
                curve=True, aliases=("ap", "auprc"), sklearn="average_precision_score"),
    NamedMetric("partial_auroc",
                "A = area(recall, fpr, 0, max_fpr)  # the ROC area with fpr in [0, max_fpr]\n"
                "(1 + (A - max_fpr^2/2) / (max_fpr - max_fpr^2/2)) / 2",
                "ROC area up to fpr = max_fpr, standardised (McClish): 0.5 is chance, 1 perfect",
                curve=True, params={"max_fpr": 0.1}, sklearn="roc_auc_score(max_fpr=max_fpr)",
                bounds={"max_fpr": (0.0, "the area is taken over fpr in [0, max_fpr], and "
                                         "max_fpr must lie in (0, 1]")}),
    NamedMetric("recall_at_precision", "best(recall, precision >= min_precision)",
                "the highest recall at a threshold whose precision is at least min_precision "
                "(0 where none is)", curve=True, params={"min_precision": 0.9},
                sklearn="torchmetrics BinaryRecallAtFixedPrecision"),
    NamedMetric("precision_at_recall", "best(precision, recall >= min_recall)",
                "the highest precision at a threshold whose recall is at least min_recall "
                "(0 where none is)", curve=True, params={"min_recall": 0.9},
                sklearn="torchmetrics BinaryPrecisionAtFixedRecall"),
    NamedMetric("best_f1", "best(f1)", "F1 at its best threshold", curve=True,
                sklearn="max F1 over precision_recall_curve"),
]

# Fairness metrics over the counts of each group (docs/groups.md), with fairlearn's meaning:
# a difference is MetricFrame(...).difference() (largest minus smallest group), a ratio
# .ratio() (smallest over largest); equalized odds takes the worse of TPR and FPR.
_SELECTION = "PP/n"
_GROUPS = [
    NamedMetric("demographic_parity_difference", f"gap({_SELECTION})",
                "largest minus smallest selection rate (PP/n) over the groups",
                higher_is_better=False, groups=True,
                sklearn="fairlearn.metrics.demographic_parity_difference"),
    NamedMetric("demographic_parity_ratio", f"ratio({_SELECTION})",
                "smallest over largest selection rate over the groups", groups=True,
                sklearn="fairlearn.metrics.demographic_parity_ratio"),
    NamedMetric("equalized_odds_difference", f"max(gap({_TPR}), gap({_FPR}))",
                "the larger of the TPR gap and the FPR gap over the groups",
                higher_is_better=False, groups=True,
                sklearn="fairlearn.metrics.equalized_odds_difference"),
    NamedMetric("equalized_odds_ratio", f"min(ratio({_TPR}), ratio({_FPR}))",
                "the smaller of the TPR ratio and the FPR ratio over the groups", groups=True,
                sklearn="fairlearn.metrics.equalized_odds_ratio"),
    NamedMetric("equal_opportunity_difference", f"gap({_TPR})",
                "largest minus smallest true positive rate over the groups",
                higher_is_better=False, groups=True,
                sklearn="fairlearn.metrics.equal_opportunity_difference"),
    NamedMetric("equal_opportunity_ratio", f"ratio({_TPR})",
                "smallest over largest true positive rate over the groups", groups=True,
                sklearn="fairlearn.metrics.equal_opportunity_ratio"),
    NamedMetric("predictive_parity_difference", f"gap({_PPV})",
                "largest minus smallest precision over the groups", higher_is_better=False,
                groups=True, sklearn="MetricFrame(precision_score).difference()"),
    NamedMetric("worst_group_recall", f"worst({_TPR})", "the recall of the worst-served group",
                groups=True, sklearn="MetricFrame(recall_score).group_min()"),
    NamedMetric("worst_group_accuracy", "worst((TP+TN)/(TP+FP+FN+TN))",
                "the accuracy of the worst-served group", groups=True,
                sklearn="MetricFrame(accuracy_score).group_min()"),
]

#: The 2x2 metrics (formulas over TP, FP, FN, TN).
METRICS: dict[str, NamedMetric] = {m.name: m for m in _ALL}
#: The K x K metrics (formulas over the whole confusion matrix, ``docs/matrix.md``).
MATRIX_METRICS: dict[str, NamedMetric] = {m.name: m for m in _MATRIX}
#: The curve metrics (formulas over the counts at every threshold, ``docs/curve.md``).
CURVE_METRICS: dict[str, NamedMetric] = {m.name: m for m in _CURVE}
#: The group metrics (formulas over the counts of each group, ``docs/groups.md``).
GROUP_METRICS: dict[str, NamedMetric] = {m.name: m for m in _GROUPS}
#: Every statistic's registry, in the order ``metricc list`` shows them.
REGISTRIES: tuple[dict[str, NamedMetric], ...] = (METRICS, MATRIX_METRICS, CURVE_METRICS, GROUP_METRICS)
ALIASES: dict[str, str] = {a: m.name for r in REGISTRIES for m in r.values() for a in m.aliases}


#: 2x2 metrics that use TN, and the K x K metric that means what their name says over
#: K classes (``docs/modes.md``: micro-averaging them in multiclass mode is refused).
MATRIX_COUNTERPARTS: dict[str, str] = {
    "accuracy": "multiclass_accuracy",
    "error_rate": "expected_cost",
    "balanced_accuracy": "multiclass_balanced_accuracy",
    "mcc": "multiclass_mcc",
    "cohen_kappa": "multiclass_kappa",
}


def micro_tn_refusal(name: str | None) -> str:
    """Why ``average='micro'`` of a TN-dependent metric is refused in multiclass mode."""
    counterpart = MATRIX_COUNTERPARTS.get(name or "")
    use = (f"use the K x K metric {counterpart!r}" if counterpart else
           "write the metric over the K x K matrix C[i,j] (docs/matrix.md)")
    return (f"average='micro' in multiclass mode pools one-vs-rest counts, and their TN "
            f"counts every element K-1 times, so {name or 'this metric'!s} (which uses TN) "
            f"would change with the number of classes; {use}, or average='macro'")


def lookup(name: str) -> NamedMetric | None:
    """The named metric for ``name`` or one of its aliases, else ``None``."""
    canonical = ALIASES.get(name, name)
    return next((r[canonical] for r in REGISTRIES if canonical in r), None)


def names() -> list[str]:
    """Every name and alias a formula or ``metricc.compile`` accepts."""
    return sorted([*(n for r in REGISTRIES for n in r), *ALIASES])
