"""Exact scores on hard labels (``Metric.score``): binary, multiclass and multilabel.

The class options and absent-class policy are the loss's
(:mod:`metricc.runtime.options`, :mod:`metricc.runtime.modes`), so a loss and
its score average the same classes; see ``docs/modes.md``. ``value`` is the
metric's exact evaluation at counts (``Metric.value``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .errors import MetricError
from .runtime.modes import class_average_weights, reduce_samples
from .runtime.options import check_class_options, look_up_option, select_classes

__all__ = ["score", "score_classes"]

#: ``Metric.value``: ``(tp, fp, fn, tn, *, zero_division) -> float or tensor``.
Value = Callable[..., Any]


def score(value: Value, preds: Any, target: Any, threshold: float | None = None, *,
          zero_division: float | None = None, mode: str = "binary", average: str = "macro",
          ignore_index: int | None = None, classes: Any = None, class_weights: Any = None,
          num_classes: int | None = None, from_logits: bool = False,
          multidim_average: str = "global", reduction: str = "mean") -> Any:
    """The metric on hard labels; see :meth:`metricc.Metric.score`."""
    if mode != "binary" or ignore_index is not None or multidim_average != "global":
        return score_classes(value, preds, target, threshold, mode=mode, average=average,
                             ignore_index=ignore_index, classes=classes,
                             class_weights=class_weights, num_classes=num_classes,
                             zero_division=zero_division, from_logits=from_logits,
                             multidim_average=multidim_average, reduction=reduction)
    return _score_binary(value, preds, target, threshold, zero_division, from_logits)


def _hard(p: Tensor, threshold: float | None, from_logits: bool, what: str) -> Tensor:
    """``p >= threshold`` for probabilities, ``sigmoid(p) >= threshold`` for logits, 0/1 labels as they are.

    Without a ``threshold`` (0.5 then) scores outside ``[0, 1]`` are refused unless
    ``from_logits``, as the loss refuses them: thresholding logits at 0.5 would silently
    be the wrong decision. An explicit ``threshold`` applies to the scores as they are,
    on any scale (``best_threshold`` picks thresholds among the scores themselves).
    """
    if not p.is_floating_point():
        if p.dtype != torch.bool and p.numel() and not bool(((p == 0) | (p == 1)).all()):
            raise MetricError(f"{what} holds integers other than 0 and 1; pass 0/1 labels, or "
                              "probabilities (or logits with from_logits=True) as floats")
        return p != 0
    if p.numel():
        lo, hi = (float(v) for v in torch.aminmax(p.detach()))
        if math.isnan(lo) or math.isnan(hi):
            raise MetricError(f"{what} contains NaN")
        if threshold is None and not from_logits and (lo < 0 or hi > 1):
            raise MetricError(f"{what} has values outside [0, 1] (min {lo:.4g}, max {hi:.4g}) but "
                              "from_logits=False: pass from_logits=True if these are logits (the "
                              "decision is then sigmoid(logit) >= 0.5), apply torch.sigmoid "
                              "first, or give the threshold on their own scale")
    cut = 0.5 if threshold is None else threshold
    return (torch.sigmoid(p.double()) if from_logits else p) >= cut


def _score_binary(value: Value, preds: Any, target: Any, threshold: float | None,
                  zero_division: float | None, from_logits: bool = False) -> float:
    p = torch.as_tensor(preds)
    t = torch.as_tensor(target)
    if p.shape != t.shape:
        raise MetricError(f"preds and target must have the same shape, got {tuple(p.shape)} "
                          f"and {tuple(t.shape)}")
    if p.numel() == 0:
        raise MetricError("score() needs at least one prediction")
    if not bool(((t == 0) | (t == 1)).all()):
        raise MetricError("target must hold only 0 and 1 (for 0/255 masks, divide by 255)")
    hard = _hard(p, threshold, from_logits, "preds")
    yt = t.to(torch.bool)
    f64 = torch.float64
    tp = (hard & yt).sum(dtype=f64)
    fp = (hard & ~yt).sum(dtype=f64)
    fn = (~hard & yt).sum(dtype=f64)
    tn = (~hard & ~yt).sum(dtype=f64)
    return float(value(tp, fp, fn, tn, zero_division=zero_division))


def score_classes(value: Value, preds: Any, target: Any, threshold: float | None = None, *,
                  mode: str = "multiclass", average: str = "macro",
                  ignore_index: int | None = None, classes: Any = None,
                  class_weights: Any = None, num_classes: int | None = None,
                  zero_division: float | None = None, from_logits: bool = False,
                  multidim_average: str = "global", reduction: str = "mean") -> float | Tensor:
    """The metric on hard labels, per class and averaged; see :meth:`metricc.Metric.score`.

    >>> import metricc
    >>> m = metricc.compile("f1")
    >>> round(score_classes(m.value, [0, 1, 2, 2], [0, 2, 2, 2], num_classes=3), 4)
    0.6
    """
    err = MetricError
    ignore_index, classes, class_weights = check_class_options(
        mode, average, ignore_index, classes, class_weights)
    samplewise = look_up_option("multidim_average", multidim_average) == "samplewise"
    look_up_option("reduction", reduction)
    p = torch.as_tensor(preds)
    t = torch.as_tensor(target, device=p.device)  # counted where the predictions are
    if mode == "binary":
        if p.shape != t.shape:
            raise err(f"preds and target must have the same shape, got {tuple(p.shape)} "
                      f"and {tuple(t.shape)}")
        if p.numel() == 0:
            raise err("score() needs at least one prediction")
        mask = t != ignore_index if ignore_index is not None else torch.ones_like(t, dtype=bool)
        if not bool(((t == 0) | (t == 1) | ~mask).all()):
            raise err("target must hold only 0 and 1 (for 0/255 masks, divide by 255)")
        hard = _hard(p, threshold, from_logits, "preds")
        n = p.shape[0] if p.dim() > 0 else 1
        hard, y, mask = (x.reshape(n, 1, -1) for x in (hard, (t == 1) & mask, mask))
        average = "micro"  # one class: every average is the same
    elif mode == "multilabel":
        hard, y, mask = _multilabel(p, t, threshold, ignore_index, from_logits)
    else:
        hard, y, mask = _multiclass(p, t, ignore_index, num_classes, from_logits)
    n, c = hard.shape[:2]
    chosen, weights = select_classes(c, classes, class_weights)
    hard, y, mask = (x.reshape(n, x.shape[1], -1) for x in (hard, y, mask))
    if chosen is not None:
        idx = torch.tensor(chosen, device=hard.device)
        hard, y = hard.index_select(1, idx), y.index_select(1, idx)
        mask = mask if mask.shape[1] == 1 else mask.index_select(1, idx)
    f64 = torch.float64
    # One row of per-class counts for the batch, or one per sample (samplewise): (S, K).
    dims: tuple[int, ...] = (2,) if samplewise else (0, 2)
    tp, fp, fn, tn = ((a & b & mask).sum(dims, dtype=f64).reshape(-1 if samplewise else 1, hard.shape[1])
                      for a, b in ((hard, y), (hard, ~y), (~hard, y), (~hard, ~y)))
    w = None if weights is None else torch.tensor(weights, dtype=f64, device=tp.device)
    present = (tp + fp + fn) > 0
    if average == "micro":
        # Pool the per-class matrices (class weights scale each class's counts).
        tp, fp, fn, tn = ((x if w is None else x * w).sum(-1, keepdim=True) for x in (tp, fp, fn, tn))
        present = present.any(-1, keepdim=True)
    if average in ("micro", "none"):
        # Globally every class is reported (average="none"); per sample, absent ones are skipped.
        used = present if samplewise else torch.ones_like(present)
        per, keep = _values(value, (tp, fp, fn, tn), used, zero_division), present
        if average == "micro":
            per, keep = per[:, 0], keep[:, 0]
    else:
        v = class_average_weights(present, tp + fn, w, average)
        keep = present.any(-1)
        # Only classes (and samples) that take part are evaluated: an absent one's 0/0 never raises.
        used = (v > 0) & (keep[:, None] | ~keep.any())
        values = _values(value, (tp, fp, fn, tn), used, zero_division)
        per = (v * values).sum(-1)
    if not samplewise:
        return float(per[0]) if per.dim() == 1 else per[0]
    out = reduce_samples(per, keep, reduction)
    return float(out) if out.dim() == 0 else out


def _values(value: Value, counts: tuple[Tensor, ...], used: Tensor,
            zero_division: float | None) -> Tensor:
    """The metric at ``counts`` where ``used`` (else 0); where nothing is used, everywhere."""
    if not bool(used.any()):
        used = torch.ones_like(used)
    out = torch.zeros(used.shape, dtype=torch.float64, device=used.device)
    out[used] = torch.as_tensor(value(*(x[used] for x in counts), zero_division=zero_division),
                                dtype=torch.float64)
    return out


def _multilabel(p: Tensor, t: Tensor, threshold: float | None, ignore_index: int | None,
                from_logits: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    if p.dim() < 2 or p.shape != t.shape:
        raise MetricError(f"mode='multilabel' needs preds and target of the same shape (N, C, *), "
                          f"got {tuple(p.shape)} and {tuple(t.shape)}")
    mask = t != ignore_index if ignore_index is not None else torch.ones_like(t, dtype=torch.bool)
    if not bool(((t == 0) | (t == 1) | ~mask).all()):
        raise MetricError("multilabel target must hold only 0 and 1"
                          + (f" (or ignore_index={ignore_index})" if ignore_index is not None
                             else ""))
    hard = _hard(p, threshold, from_logits, "preds")
    return hard, (t == 1) & mask, mask


def _multiclass(p: Tensor, t: Tensor, ignore_index: int | None, num_classes: int | None,
                from_logits: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    err = MetricError
    # Scores need no range check here: the argmax of logits is the argmax of their softmax.
    if p.is_floating_point():
        if p.dim() < 2:
            raise err(f"multiclass preds must be scores of shape (N, C, *) or integer labels of "
                      f"shape (N, *), got floating-point preds of shape {tuple(p.shape)}")
        c = p.shape[1]
        if num_classes is not None and num_classes != c:
            raise err(f"num_classes={num_classes} but preds has {c} classes on dim 1")
        pred = p.argmax(1)
    else:
        if num_classes is None:
            raise err("integer multiclass preds are class labels: pass num_classes=<C>")
        c = int(num_classes)
        pred = p
        if pred.numel() and not bool(((pred >= 0) & (pred < c)).all()):
            raise err(f"multiclass preds must be class indices in 0..{c - 1}")
    if c < 2:
        raise err(f"mode='multiclass' needs at least 2 classes, got {c}")
    labels = torch.arange(c, device=pred.device).view(1, c, *([1] * (pred.dim() - 1)))
    onehot_shape = (*pred.shape[:1], c, *pred.shape[1:])
    if tuple(t.shape) == onehot_shape:
        if ignore_index is not None:
            raise err("ignore_index applies to class-index targets of shape (N, *); pass "
                      "class indices instead of one-hot targets")
        if not bool((((t == 0) | (t == 1)).all()) and bool((t.sum(1) == 1).all())):
            raise err("one-hot multiclass targets must hold a single 1 per element")
        t = t.argmax(1)
        mask = torch.ones_like(t, dtype=torch.bool)
    elif t.shape == pred.shape:
        if t.is_floating_point():
            raise err(f"class-index targets must be integers, got {t.dtype}; use target.long()")
        mask = t != ignore_index if ignore_index is not None else torch.ones_like(t, dtype=bool)
        if not bool(((t >= 0) & (t < c) | ~mask).all()):
            raise err(f"multiclass target must hold class indices in 0..{c - 1}"
                      + (f" (or ignore_index={ignore_index})" if ignore_index is not None
                         else ""))
    else:
        raise err(f"multiclass target must have shape {tuple(pred.shape)} (class indices) or "
                  f"{onehot_shape} (one-hot), "
                  f"got {tuple(t.shape)}")
    hard = pred.unsqueeze(1) == labels
    y = (t.unsqueeze(1) == labels) & mask.unsqueeze(1)
    return hard, y, mask.unsqueeze(1)
