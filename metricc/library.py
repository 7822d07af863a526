"""The named metrics: formula, parameters, aliases, direction and scikit-learn counterpart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ALIASES", "METRICS", "NamedMetric", "lookup", "names"]


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
    params: Mapping[str, float] = field(default_factory=dict)
    #: parameter -> (lowest allowed value, why): compile refuses values below it.
    bounds: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    sklearn: str | None = None


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

METRICS: dict[str, NamedMetric] = {m.name: m for m in _ALL}
ALIASES: dict[str, str] = {a: m.name for m in _ALL for a in m.aliases}


def lookup(name: str) -> NamedMetric | None:
    """The named metric for ``name`` or one of its aliases, else ``None``."""
    return METRICS.get(ALIASES.get(name, name))


def names() -> list[str]:
    """Every name and alias a formula or ``metricc.compile`` accepts."""
    return sorted([*METRICS, *ALIASES])
