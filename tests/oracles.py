"""Test oracles: independent reference implementations every test that needs one imports.

* :func:`plain_loss`: a binary loss written out directly (relaxation, four sums,
  SymPy's ``lambdify`` of the exact metric), for values and gradients;
* :func:`reference_loss`: the loss of every mode, average and reduction, in
  float64 loops (``MODE_METRICS`` are the metrics it knows, written by hand);
* :func:`sklearn_reference`: scikit-learn's value of a named metric on hard labels.

None of these uses metricc's runtime or generated code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import sympy
import torch
import torch.nn.functional as F

import metricc
from metricc.library import lookup

F64 = torch.float64
EPS = 1e-7
TP, FP, FN, TN = sympy.symbols("TP FP FN TN")


def plain_loss(m: metricc.Metric, relaxation: str, amplifier: float = 73.0):
    """Written out directly: relaxation, four sums, SymPy's own lambdify of the exact metric."""
    f = sympy.lambdify((TP, FP, FN, TN), m.expr, modules=[{"sqrt": torch.sqrt, "log": torch.log}, "math"])

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if relaxation == "anyloss":
            a = 1 / (1 + torch.exp(-amplifier * (x - 0.5)))
        elif relaxation == "sigmoid":
            a = 1 / (1 + torch.exp(-x))
        else:
            a = x
        tp = (y * a).sum()
        fn = (y * (1 - a)).sum()
        fp = ((1 - y) * a).sum()
        tn = ((1 - y) * (1 - a)).sum()
        value = f(tp, fp, fn, tn)
        return 1 - value if m.higher_is_better else value

    return loss


# name, compile kwargs, metric of (tp, fp, fn, tn, eps) with eps where the kernel puts it.
MODE_METRICS = {
    "f1": ({}, lambda tp, fp, fn, tn, e: 2 * tp / (2 * tp + fp + fn + e)),
    "jaccard": ({}, lambda tp, fp, fn, tn, e: tp / (tp + fp + fn + e)),
    "tversky": ({"alpha": 0.3, "beta": 0.7},
                lambda tp, fp, fn, tn, e: tp / (tp + 0.3 * fp + 0.7 * fn + e)),
    "accuracy": ({}, lambda tp, fp, fn, tn, e: (tp + tn) / (tp + fp + fn + tn + e)),
    "fpr": ({}, lambda tp, fp, fn, tn, e: fp / (fp + tn + e)),  # lower is better
}


def reference_loss(name, x, target, *, mode, average="macro", multidim_average="global",
                   reduction="mean", relaxation="linear", from_logits=False,
                   ignore_index=None, classes=None, class_weights=None, eps=EPS):
    """The loss of every mode, average and reduction, written out: four products per
    count, Python loops over samples and classes, autograd for the gradient."""
    kwargs, f = MODE_METRICS[name]
    higher = metricc.compile(name, **kwargs).higher_is_better
    if mode == "binary":
        x, target = x.unsqueeze(1), target.unsqueeze(1)
        average = "micro"
    c = x.shape[1]
    if mode == "multiclass":
        p = torch.softmax(x, 1) if from_logits else x
        hard = F.one_hot(x.argmax(1), c).movedim(-1, 1).to(F64)
        if target.dtype == torch.long:
            m = torch.ones(target.shape, dtype=F64) if ignore_index is None else \
                (target != ignore_index).to(F64)
            safe = torch.where(target == ignore_index, 0, target) if ignore_index is not None \
                else target
            y = F.one_hot(safe, c).movedim(-1, 1).to(F64)
            m = m.unsqueeze(1).expand_as(y)
        else:
            y, m = target.to(F64), torch.ones_like(target, dtype=F64)
    else:
        p = torch.sigmoid(x) if from_logits else x
        hard = (p >= 0.5).to(F64)
        m = torch.ones(target.shape, dtype=F64) if ignore_index is None else \
            (target != ignore_index).to(F64)
        y = target.to(F64) * m
    a = p if relaxation == "linear" else torch.sigmoid(73.0 * (p - 0.5))
    cls = list(range(c)) if classes is None else list(classes)
    cw = [1.0] * len(cls) if class_weights is None else [class_weights[k] for k in cls]
    n = x.shape[0]
    groups = [list(range(n))] if multidim_average == "global" else [[i] for i in range(n)]

    def counts(idx, ks, weights):
        tp = fp = fn = tn = pos = pred = 0.0
        for i in idx:
            for k, wk in zip(ks, weights, strict=True):
                mm, yy, aa, hh = m[i, k] * wk, y[i, k], a[i, k], hard[i, k]
                tp = tp + (mm * yy * aa).sum()
                fn = fn + (mm * yy * (1 - aa)).sum()
                fp = fp + (mm * (1 - yy) * aa).sum()
                tn = tn + (mm * (1 - yy) * (1 - aa)).sum()
                pos = pos + float((mm * yy).sum())
                pred = pred + float((mm * hh).sum())
        value = f(tp, fp, fn, tn, eps)
        loss = 1 - value if higher else value
        return loss, pos, (pos > 0 or pred > 0)

    pers, keeps = [], []
    for g in groups:
        if average == "micro":
            loss, _, present = counts(g, cls, cw)
            pers.append(loss)
            keeps.append(present)
            continue
        rows = [counts(g, [k], [1.0]) for k in cls]
        losses = [r[0] for r in rows]
        present = [r[2] for r in rows]
        if average == "none":
            pers.append(torch.stack(losses))
            keeps.append(present)
            continue
        cands = [[w * pr for w, pr in zip(cw, present, strict=True)], cw]
        if average == "weighted":
            cands.insert(0, [w * r[1] for w, r in zip(cw, rows, strict=True)])
        weights = next(c for c in cands if sum(c) > 0)
        pers.append(sum(w * loss for w, loss in zip(weights, losses, strict=True)) / sum(weights))
        keeps.append(any(present))
    if multidim_average == "global":
        return pers[0]
    per = torch.stack(pers)
    if reduction == "none":
        return per
    keep = torch.tensor(keeps, dtype=F64)
    if keep.dim() == 1:
        u = keep if keep.sum() > 0 else torch.ones_like(keep)
    else:
        u = torch.where(keep.sum(0, keepdim=True) > 0, keep, torch.ones_like(keep))
    if reduction == "mean":
        u = u / u.sum(0, keepdim=True)
    return (u * per).sum(0)


def sklearn_reference(name: str, **params: float) -> Callable[..., float]:
    """A function ``(y_true, y_pred) -> float`` computing the named metric ``name`` with
    scikit-learn: the independent reference for hard binary labels.

    >>> import numpy as np
    >>> sklearn_reference("f1")(np.array([0, 1, 1]), np.array([0, 1, 0]))
    0.666...
    """
    import numpy as np
    from sklearn import metrics as skm

    metric = lookup(name)
    if metric is None:
        raise KeyError(name)
    p = {**metric.params, **params}

    def cm(y: np.ndarray, yhat: np.ndarray) -> tuple[float, float, float, float]:
        tn, fp, fn, tp = skm.confusion_matrix(y, yhat, labels=[0, 1]).ravel()
        return float(tp), float(fp), float(fn), float(tn)

    def g_mean(y: np.ndarray, yhat: np.ndarray) -> float:
        tp, fp, fn, tn = cm(y, yhat)
        return float(np.sqrt(tp / (tp + fn) * tn / (tn + fp)))

    def markedness(y: np.ndarray, yhat: np.ndarray) -> float:
        return float(skm.precision_score(y, yhat) + skm.precision_score(y, yhat, pos_label=0) - 1)

    def fowlkes_mallows(y: np.ndarray, yhat: np.ndarray) -> float:
        return float(np.sqrt(skm.precision_score(y, yhat) * skm.recall_score(y, yhat)))

    def prevalence_threshold(y: np.ndarray, yhat: np.ndarray) -> float:
        tpr = skm.recall_score(y, yhat)
        fpr = 1 - skm.recall_score(y, yhat, pos_label=0)
        return float((np.sqrt(tpr * fpr) - fpr) / (tpr - fpr))

    def tversky(y: np.ndarray, yhat: np.ndarray) -> float:
        tp, fp, fn, _ = cm(y, yhat)
        return tp / (tp + p["alpha"] * fp + p["beta"] * fn)

    def dor(y: np.ndarray, yhat: np.ndarray) -> float:
        tp, fp, fn, tn = cm(y, yhat)
        return tp * tn / (fp * fn)

    refs: dict[str, Callable[..., float]] = {
        "accuracy": skm.accuracy_score,
        "balanced_accuracy": skm.balanced_accuracy_score,
        "precision": skm.precision_score,
        "recall": skm.recall_score,
        "specificity": lambda y, yh: skm.recall_score(y, yh, pos_label=0),
        "npv": lambda y, yh: skm.precision_score(y, yh, pos_label=0),
        "fpr": lambda y, yh: 1 - skm.recall_score(y, yh, pos_label=0),
        "fnr": lambda y, yh: 1 - skm.recall_score(y, yh),
        "fdr": lambda y, yh: 1 - skm.precision_score(y, yh),
        "f1": skm.f1_score,
        "fbeta": lambda y, yh: skm.fbeta_score(y, yh, beta=p["beta"]),
        "jaccard": skm.jaccard_score,
        "dice": skm.f1_score,
        "tversky": tversky,
        "mcc": skm.matthews_corrcoef,
        "cohen_kappa": skm.cohen_kappa_score,
        "g_mean": g_mean,
        "informedness": lambda y, yh: skm.balanced_accuracy_score(y, yh, adjusted=True),
        "markedness": markedness,
        "fowlkes_mallows": fowlkes_mallows,
        "prevalence_threshold": prevalence_threshold,
        "lr_plus": lambda y, yh: skm.class_likelihood_ratios(y, yh)[0],
        "lr_minus": lambda y, yh: skm.class_likelihood_ratios(y, yh)[1],
        "diagnostic_odds_ratio": dor,
        "error_rate": lambda y, yh: 1 - skm.accuracy_score(y, yh),
    }
    fn = refs[metric.name]
    return lambda y, yhat: float(fn(np.asarray(y), np.asarray(yhat)))


def curve_reference(name: str, **params: float) -> Callable[..., float]:
    """A function ``(y_true, scores) -> float`` computing the named curve metric ``name`` with
    scikit-learn (AUROC, average precision, partial AUROC, the best F1 over
    ``precision_recall_curve``) or torchmetrics (recall at a fixed precision and precision at a
    fixed recall, in float64): the independent reference on binary labels, as
    ``tests/test_curve_metric.py`` checks them with ties.

    >>> import numpy as np
    >>> curve_reference("auroc")(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8]))
    0.75
    """
    import numpy as np
    from sklearn import metrics as skm

    metric = lookup(name)
    if metric is None or not metric.curve:
        raise KeyError(name)
    p = {**metric.params, **params}

    def best_f1(y: np.ndarray, s: np.ndarray) -> float:
        precision, recall, _ = skm.precision_recall_curve(y, s)
        with np.errstate(invalid="ignore"):
            return float(np.nan_to_num(2 * precision * recall / (precision + recall)).max())

    def at_fixed(kind: str) -> Callable[[np.ndarray, np.ndarray], float]:
        def value(y: np.ndarray, s: np.ndarray) -> float:
            from torchmetrics.classification import BinaryPrecisionAtFixedRecall, BinaryRecallAtFixedPrecision

            ref = (BinaryRecallAtFixedPrecision(min_precision=float(p["min_precision"]))
                   if kind == "recall" else BinaryPrecisionAtFixedRecall(min_recall=float(p["min_recall"])))
            old = torch.get_default_dtype()
            torch.set_default_dtype(F64)  # torchmetrics otherwise forms its curve in float32
            try:
                return float(ref(torch.as_tensor(s, dtype=F64), torch.as_tensor(y))[0])
            finally:
                torch.set_default_dtype(old)

        return value

    refs: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
        "auroc": skm.roc_auc_score,
        "average_precision": skm.average_precision_score,
        "partial_auroc": lambda y, s: skm.roc_auc_score(y, s, max_fpr=p["max_fpr"]),
        "recall_at_precision": at_fixed("recall"),
        "precision_at_recall": at_fixed("precision"),
        "best_f1": best_f1,
    }
    fn = refs[metric.name]
    return lambda y, s: float(fn(np.asarray(y), np.asarray(s)))


# --- group metrics: fairlearn's values ------------------------------------------------------------

def metric_frame(metric: Any, y: np.ndarray, d: np.ndarray, g: np.ndarray, w: np.ndarray | None) -> Any:
    import fairlearn.metrics as fm

    """fairlearn's ``MetricFrame`` of ``metric`` on 0/1 decisions ``d`` by groups ``g``."""
    return fm.MetricFrame(metrics=metric, y_true=y, y_pred=d, sensitive_features=g,
                          sample_params={"sample_weight": w})


def precision0(y_true: Any, y_pred: Any, sample_weight: Any = None) -> float:
    """scikit-learn's precision, 0 where nothing is predicted positive (fairlearn's reading)."""
    from sklearn.metrics import precision_score

    return float(precision_score(y_true, y_pred, sample_weight=sample_weight, zero_division=0))


def recall0(y_true: Any, y_pred: Any, sample_weight: Any = None) -> float:
    """scikit-learn's recall, 0 where there is no positive (fairlearn's reading)."""
    from sklearn.metrics import recall_score

    return float(recall_score(y_true, y_pred, sample_weight=sample_weight, zero_division=0))


def fairlearn_reference(name: str, y: np.ndarray, d: np.ndarray, g: np.ndarray, w: np.ndarray | None) -> float:
    """fairlearn's value of the named metricc group metric on 0/1 decisions ``d``, groups ``g``."""
    import fairlearn.metrics as fm
    from sklearn.metrics import accuracy_score

    if name == "predictive_parity_difference":
        return float(metric_frame(precision0, y, d, g, w).difference())
    if name == "worst_group_recall":
        return float(metric_frame(recall0, y, d, g, w).group_min())
    if name == "worst_group_accuracy":
        return float(metric_frame(accuracy_score, y, d, g, w).group_min())
    return float(getattr(fm, name)(y, d, sensitive_features=g, sample_weight=w))
