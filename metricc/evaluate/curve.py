"""Exact ROC and precision-recall curves, and the threshold-free scores read off them.

One sort gives the hard counts ``TP(t), FP(t)`` at every distinct score ``t`` (ties
collapse into one threshold, as scikit-learn's ``_binary_clf_curve``); AUROC is the
trapezoid under the collapsed ROC curve (Mann-Whitney with ties counting 1/2), average
precision the step-wise sum ``sum_k (R_k - R_{k-1}) P_k``, partial AUROC McClish's
standardisation as ``roc_auc_score(max_fpr=...)``. ``thresholds=T`` gives the binned
variant on the grid ``linspace(0, 1, T)``, with ``O(T)`` state, as torchmetrics'
``BinaryAUROC(thresholds=T)``.

>>> round(auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]), 4)
0.75
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from ..errors import MetricError, MetricWarning
from ..runtime.modes import BINARY, MULTICLASS, MULTILABEL, Mode
from .threshold import as_array

__all__ = ["BinnedCounts", "ExactCurve", "OperatingPoint", "auroc", "average_precision", "best_value",
           "binned_counts", "column_average", "exact_curve", "partial_auroc", "value_at"]

CountFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], Any]
AVERAGES = ("macro", "weighted", "micro", None)


class ExactCurve(NamedTuple):
    """Distinct scores (descending) and the cumulative ``tp``, ``fp`` of ``score >= t``."""

    thresholds: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    pos: float
    neg: float


class BinnedCounts(NamedTuple):
    """``tp``, ``fp`` of ``score >= t_k`` on an increasing grid; these add across batches."""

    thresholds: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    pos: float
    neg: float


class OperatingPoint(NamedTuple):
    """A value and the threshold reaching it (predict positive where ``score >= threshold``)."""

    value: float
    threshold: float


def _scores(x: Any, ndim: tuple[int, ...]) -> np.ndarray:
    s = as_array(x, "scores")
    if s.ndim not in ndim:
        raise MetricError(f"scores must have {' or '.join(map(str, ndim))} dimensions, got shape {s.shape}")
    s = s.astype(np.float64) if not np.issubdtype(s.dtype, np.floating) else s
    if not np.isfinite(s).all():
        raise MetricError("scores hold NaN or infinite values; no curve can be formed on them "
                          "(check the model's outputs)")
    return s


def _labels(x: Any, shape: tuple[int, ...]) -> np.ndarray:
    y = as_array(x, "target")
    if y.shape != shape:
        raise MetricError(f"target must have the scores' shape {shape}, got {y.shape}")
    if not ((y == 0) | (y == 1)).all():
        found = np.unique(y[(y != 0) & (y != 1)])[:5].tolist()
        raise MetricError(f"target must hold only 0 and 1, found {found}; for class indices pass "
                          "(N, C) scores with an (N,) target")
    return y.astype(np.float64)


def _weights(x: Any, n: int) -> np.ndarray | None:
    if x is None:
        return None
    w = as_array(x, "sample_weight").astype(np.float64)
    if w.shape != (n,):
        raise MetricError(f"sample_weight must have shape ({n},), one weight per sample, got {w.shape}")
    if not (np.isfinite(w).all() and (w >= 0).all()):
        raise MetricError("sample_weight must be finite and >= 0")
    return w


def _curve(s: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> ExactCurve:
    if w is not None:  # zero weights change nothing, not even the thresholds (as scikit-learn)
        keep = w != 0
        s, y, w = s[keep], y[keep], w[keep]
    if s.size == 0:
        raise MetricError("no curve without scores (all of them empty or of weight 0)")
    order = np.argsort(s, kind="mergesort")[::-1]
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]  # the last index of each tied block
    if w is None:
        tp = np.cumsum(y)[last]
        fp = 1.0 + last - tp
    else:
        w = w[order]
        tp = np.cumsum(y * w)[last]
        fp = np.cumsum(w)[last] - tp
    return ExactCurve(s[last], tp, fp, float(tp[-1]), float(fp[-1]))


def exact_curve(scores: Any, target: Any, sample_weight: Any = None) -> ExactCurve:
    """The hard curve of binary ``scores`` against 0/1 ``target`` at every distinct score.

    >>> c = exact_curve([0.2, 0.9, 0.2, 0.6], [0, 1, 1, 0])
    >>> c.thresholds.tolist(), c.tp.tolist(), c.fp.tolist()
    ([0.9, 0.6, 0.2], [1.0, 1.0, 2.0], [0.0, 1.0, 2.0])
    """
    s = _scores(scores, (1,))
    return _curve(s, _labels(target, s.shape), _weights(sample_weight, s.size))


def _roc_area(c: ExactCurve, max_fpr: float | None) -> float:
    if c.pos == 0 or c.neg == 0:
        raise MetricError("AUROC needs positives and negatives, but the target holds only one "
                          "class; evaluate on data with both (or report another metric)")
    fpr, tpr = np.r_[0.0, c.fp] / c.neg, np.r_[0.0, c.tp] / c.pos
    if max_fpr is None or max_fpr == 1:
        return float(np.trapezoid(tpr, fpr))
    stop = np.searchsorted(fpr, max_fpr, "right")
    tpr = np.append(tpr[:stop], np.interp(max_fpr, fpr[stop - 1:stop + 1], tpr[stop - 1:stop + 1]))
    fpr = np.append(fpr[:stop], max_fpr)
    area, lo = float(np.trapezoid(tpr, fpr)), 0.5 * max_fpr ** 2
    return 0.5 * (1 + (area - lo) / (max_fpr - lo))


def _precision_area(c: ExactCurve) -> float:
    if c.pos == 0:
        warnings.warn("average precision of a target without positives is taken as 0 (as "
                      "scikit-learn); it is undefined", MetricWarning, stacklevel=4)
        return 0.0
    recall = c.tp / c.pos
    return float(max(0.0, np.sum(np.diff(np.r_[0.0, recall]) * c.tp / (c.tp + c.fp))))


def _binned_roc(b: BinnedCounts) -> float:
    # torchmetrics' binned AUROC: the trapezoid over the grid's points alone (no (0, 0)
    # appended: scores equal to the top grid point leave area uncounted, as there)
    if b.pos == 0 or b.neg == 0:
        raise MetricError("AUROC needs positives and negatives, but the target holds only one "
                          "class; evaluate on data with both (or report another metric)")
    return float(np.trapezoid(b.tp[::-1] / b.pos, b.fp[::-1] / b.neg))


def _binned_precision(b: BinnedCounts) -> float:
    pp = b.tp + b.fp
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(pp > 0, b.tp / np.where(pp > 0, pp, 1.0), 0.0)
    recall = b.tp / b.pos if b.pos else np.zeros_like(b.tp)
    precision, recall = np.r_[precision, 1.0], np.r_[recall, 0.0]
    return float(-np.sum((recall[1:] - recall[:-1]) * precision[:-1]))


def _grid(thresholds: Any) -> np.ndarray:
    if isinstance(thresholds, (int, np.integer)) and not isinstance(thresholds, bool):
        if thresholds < 2:
            raise MetricError(f"thresholds must be at least 2 grid points, got {thresholds}")
        # torch's linspace (float64), the grid of torchmetrics' binned mode: numpy's rounds
        # some points differently (0.6000000000000001 at T = 11), which moves tied scores
        return torch.linspace(0.0, 1.0, int(thresholds), dtype=torch.float64).numpy()
    grid = as_array(thresholds, "thresholds").astype(np.float64)
    if grid.ndim != 1 or grid.size < 2 or not (np.diff(grid) > 0).all() or not np.isfinite(grid).all():
        raise MetricError("thresholds must be an int (grid points on [0, 1]) or an increasing 1-D "
                          "sequence of at least 2 finite numbers")
    return grid


def binned_counts(scores: Any, target: Any, thresholds: Any = 100, sample_weight: Any = None
                  ) -> BinnedCounts:
    """``tp``, ``fp`` of binary ``scores >= t_k`` on a fixed grid (``O(T)`` state, ``O(n log T)``).

    >>> b = binned_counts([0.2, 0.9, 0.2, 0.6], [0, 1, 1, 0], thresholds=3)
    >>> b.thresholds.tolist(), b.tp.tolist(), b.fp.tolist()
    ([0.0, 0.5, 1.0], [2.0, 1.0, 0.0], [2.0, 1.0, 0.0])
    """
    s = _scores(scores, (1,))
    y, w = _labels(target, s.shape), _weights(sample_weight, s.size)
    grid = _grid(thresholds)
    if isinstance(thresholds, (int, np.integer)) and s.size and (s.min() < 0 or s.max() > 1):
        raise MetricError("binned scores must be probabilities in [0, 1] for a grid on [0, 1]; "
                          "apply a sigmoid to logits first, or pass the thresholds")
    # the number of grid points at or below each score: it is counted at exactly those
    slot = np.searchsorted(grid, s, side="right")
    w = np.ones_like(y) if w is None else w
    hist_pos = np.bincount(slot, weights=y * w, minlength=grid.size + 1)
    hist_all = np.bincount(slot, weights=w, minlength=grid.size + 1)
    tp = np.cumsum(hist_pos[::-1])[::-1][1:]
    fp = np.cumsum(hist_all[::-1])[::-1][1:] - tp
    return BinnedCounts(grid, tp, fp, float(hist_pos.sum()), float(hist_all.sum() - hist_pos.sum()))


def _columns(scores: Any, target: Any, what: str) -> tuple[np.ndarray, np.ndarray, Mode]:
    """``(S, Y, kind)``: ``(N, C)`` scores and 0/1 labels; ``kind`` the mode their shapes say."""
    s = _scores(scores, (1, 2))
    t = as_array(target, "target")
    if s.ndim == 2 and t.shape == s.shape[:1]:
        classes = s.shape[1]
        if not np.issubdtype(t.dtype, np.integer) and not (
                np.issubdtype(t.dtype, np.floating) and (t == np.round(t)).all()):
            raise MetricError(f"a multiclass {what} needs integer class indices as target, got {t.dtype}")
        if classes < 2:
            raise MetricError(f"a one-vs-rest {what} needs scores of 2 or more classes, got one "
                              f"column (shape {s.shape}); for one binary score per sample pass "
                              "shape (N,) (scores[:, 0]) with a 0/1 target")
        if (t < 0).any() or (t >= classes).any():
            bad = int(t.min()) if (t < 0).any() else int(t.max())
            raise MetricError(f"target holds class {bad}, but the scores have {classes} columns "
                              f"(classes 0..{classes - 1}); pass one score column per class")
        missing = sorted(set(range(classes)) - set(np.unique(t).astype(int).tolist()))
        if missing:
            raise MetricError(f"a one-vs-rest {what} needs every class 0..{classes - 1} (one per "
                              f"score column) in the target; missing {missing}: drop the columns "
                              "of absent classes (or evaluate on more data)")
        return s, (t[:, None] == np.arange(classes)).astype(np.float64), MULTICLASS
    y = _labels(t, s.shape)
    return (s, y, MULTILABEL) if s.ndim == 2 else (s[:, None], y[:, None], BINARY)


def column_average(score: Callable[[np.ndarray, np.ndarray, np.ndarray | None], float], scores: Any,
                   target: Any, sample_weight: Any = None, *, average: str | None = "macro",
                   what: str = "score", ignore_index: int | None = None) -> float | np.ndarray:
    """``score(scores, labels, weights)`` of each column, averaged as scikit-learn averages
    ``roc_auc_score`` and ``average_precision_score`` (binary ``(N,)``, multilabel ``(N, C)``,
    multiclass one-vs-rest ``(N, C)`` with ``(N,)`` class indices); :func:`auroc` does the same.
    Elements whose target is ``ignore_index`` get weight 0 in their column: a curve leaves
    zero-weight scores out exactly (not even their thresholds count).

    >>> column_average(lambda s, y, w: float(y.mean()), [[0.2, 0.8], [0.6, 0.4]], [[1, 0], [1, 1]])
    0.75
    """
    average = None if average == "none" else average
    if average not in AVERAGES:
        raise MetricError(f"average must be one of 'macro', 'weighted', 'micro' or None, got {average!r}")
    keep = None
    if ignore_index is not None:
        t = as_array(target, "target")
        keep = t != ignore_index
        target = np.where(keep, t, 0)  # any valid label: the element's weight is 0
    s, y, kind = _columns(scores, target, what)
    w = _weights(sample_weight, s.shape[0])
    if keep is not None:  # one weight per element: (N, C)
        keep = keep if keep.ndim == 2 else keep[:, None]
        w = (np.ones(s.shape[0]) if w is None else w)[:, None] * keep
    col = (lambda c: w) if w is None or w.ndim == 1 else (lambda c: w[:, c])
    if not kind.class_dim:
        return score(s[:, 0], y[:, 0], col(0))
    if average == "micro":
        return score(s.ravel(), y.ravel(), None if w is None else np.broadcast_to(
            w if w.ndim == 2 else w[:, None], s.shape).ravel())
    support = (y if w is None else y * (w if w.ndim == 2 else w[:, None])).sum(0) \
        if average == "weighted" else None
    if support is not None and np.isclose(support.sum(), 0):
        return 0.0  # scikit-learn's value when no column has a positive
    values = np.zeros(s.shape[1])
    for c in range(s.shape[1]):
        if support is not None and support[c] == 0:
            continue  # weight 0: scikit-learn forces it to 0 (its score may be undefined)
        try:
            values[c] = score(s[:, c], y[:, c], col(c))
        except MetricError as e:
            raise MetricError(f"{what} of column {c}: {e}; average='weighted' gives columns without "
                              "positives weight 0, 'micro' pools all columns") from None
    if average is None:
        return values
    return float(np.average(values, weights=support))


def auroc(scores: Any, target: Any, sample_weight: Any = None, *, average: str | None = "macro",
          max_fpr: float | None = None, thresholds: Any = None) -> float | np.ndarray:
    """Area under the ROC curve, as scikit-learn's ``roc_auc_score``.

    Binary: ``(N,)`` scores and 0/1 target. Multilabel: ``(N, C)`` both. Multiclass
    one-vs-rest (``multi_class="ovr"``): ``(N, C)`` class probabilities (rows summing to
    1) and ``(N,)`` class indices. ``average``: macro, weighted (by support), micro, or
    None (one per column). ``max_fpr``: the standardised partial AUROC (binary and
    multilabel). ``thresholds``: the binned value on that grid (torchmetrics' binned mode).

    >>> auroc([0.1, 0.4, 0.35, 0.8, 0.4], [0, 0, 1, 1, 1])  # the tie counts 1/2
    0.75
    """
    if max_fpr is not None and (isinstance(max_fpr, bool) or not isinstance(max_fpr, (int, float))
                                or not 0 < max_fpr <= 1):
        raise MetricError(f"max_fpr must be a number in (0, 1], got {max_fpr!r}")
    if thresholds is not None and max_fpr not in (None, 1):
        raise MetricError("a binned AUROC (thresholds=...) has no partial variant; leave max_fpr=None")
    s_arr = as_array(scores, "scores")
    if s_arr.ndim == 2 and np.ndim(as_array(target, "target")) == 1:
        if max_fpr not in (None, 1):
            raise MetricError("a partial AUROC (max_fpr) is not defined one-vs-rest (as in scikit-learn); "
                              "pass max_fpr=None, or (N, C) one-hot targets for per-column partial AUROCs")
        if not np.allclose(1, s_arr.sum(axis=1)):
            raise MetricError("a one-vs-rest multiclass AUROC needs class probabilities (each row summing "
                              "to 1, as scikit-learn): apply a softmax to logits first")

    def score(s: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> float:
        if thresholds is not None:
            return _binned_roc(binned_counts(s, y, thresholds, w))
        return _roc_area(_curve(s, y, w), max_fpr)

    return column_average(score, scores, target, sample_weight, average=average, what="AUROC")


def partial_auroc(scores: Any, target: Any, max_fpr: float, sample_weight: Any = None, *,
                  average: str | None = "macro") -> float | np.ndarray:
    """McClish's standardised area under the ROC curve up to ``max_fpr``
    (``roc_auc_score(max_fpr=...)``): 0.5 for a random ranking, 1 for a perfect one.

    >>> partial_auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], max_fpr=0.5)
    0.6666666666666666
    """
    return auroc(scores, target, sample_weight, average=average, max_fpr=max_fpr)


def average_precision(scores: Any, target: Any, sample_weight: Any = None, *,
                      average: str | None = "macro", thresholds: Any = None) -> float | np.ndarray:
    """Average precision ``sum_k (R_k - R_{k-1}) P_k``, as ``average_precision_score``
    (multiclass targets binarised one-vs-rest); shapes and ``average`` as :func:`auroc`.
    A column without positives scores 0 (with a warning), as scikit-learn.

    >>> round(average_precision([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]), 4)
    0.8333
    """

    def score(s: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> float:
        if thresholds is not None:
            return _binned_precision(binned_counts(s, y, thresholds, w))
        return _precision_area(_curve(s, y, w))

    return column_average(score, scores, target, sample_weight, average=average,
                          what="average precision")


def _evaluate(fn: CountFn, tp: np.ndarray, fp: np.ndarray, c: ExactCurve, what: str
              ) -> tuple[np.ndarray, np.ndarray]:
    """``fn`` at every threshold with NaN as -inf, and where it was NaN."""
    if not callable(fn):
        raise MetricError(f"{what} must be a function of (tp, fp, fn, tn) arrays, got {type(fn).__name__}")
    with np.errstate(all="ignore"):  # 0/0 at some thresholds: NaN, which is never chosen
        out = np.broadcast_to(np.asarray(fn(tp, fp, c.pos - tp, c.neg - fp), dtype=np.float64), tp.shape)
    return np.where(np.isnan(out), -np.inf, out), np.isnan(out)


def best_value(scores: Any, target: Any, fn: CountFn, sample_weight: Any = None) -> OperatingPoint:
    """The largest ``fn(tp, fp, fn, tn)`` over every threshold (each distinct score, and
    ``inf``: predict nothing); the highest threshold among equals. Thresholds where ``fn``
    is NaN (``0/0``) are skipped.

    >>> f1 = lambda tp, fp, fn, tn: 2 * tp / (2 * tp + fp + fn)
    >>> best_value([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], f1)
    OperatingPoint(value=0.8, threshold=0.35)
    """
    c = exact_curve(scores, target, sample_weight)
    tp, fp = np.r_[0.0, c.tp], np.r_[0.0, c.fp]
    values, undefined = _evaluate(fn, tp, fp, c, "fn")
    if undefined.all():
        raise MetricError("fn is NaN at every threshold; check it (0/0 where nothing is predicted?)")
    best = int(np.argmax(values))  # the first, i.e. the highest threshold, among equals
    return OperatingPoint(float(values[best]), float(np.r_[np.inf, c.thresholds][best]))


def value_at(scores: Any, target: Any, fn: CountFn, constraint_fn: CountFn, bound: float,
             sample_weight: Any = None) -> OperatingPoint:
    """The largest ``fn`` over the thresholds (distinct scores) where ``constraint_fn >= bound``,
    as torchmetrics' ``BinaryRecallAtFixedPrecision`` (``fn`` recall, constraint precision)
    and ``BinaryPrecisionAtFixedRecall``: ties go to the larger constraint, then the higher
    threshold; where no threshold qualifies, or the best value is 0, the value is 0 and
    the threshold NaN (torchmetrics' convention: no operating point).

    >>> recall = lambda tp, fp, fn, tn: tp / (tp + fn)
    >>> precision = lambda tp, fp, fn, tn: tp / (tp + fp)
    >>> value_at([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], recall, precision, 0.6)
    OperatingPoint(value=1.0, threshold=0.35)
    """
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or np.isnan(bound):
        raise MetricError(f"bound must be a number, got {bound!r}")
    c = exact_curve(scores, target, sample_weight)
    values, undefined = _evaluate(fn, c.tp, c.fp, c, "fn")
    limits, _ = _evaluate(constraint_fn, c.tp, c.fp, c, "constraint_fn")
    ok = np.flatnonzero((limits >= bound) & ~undefined)
    if ok.size == 0:
        return OperatingPoint(0.0, float("nan"))
    best = ok[np.lexsort((c.thresholds[ok], limits[ok], values[ok]))[-1]]
    if values[best] == 0:
        return OperatingPoint(0.0, float("nan"))
    return OperatingPoint(float(values[best]), float(c.thresholds[best]))
