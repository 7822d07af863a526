"""Exact scores on hard labels (``Metric.score``): binary, multiclass and multilabel.

The class options and absent-class policy are the loss's
(:mod:`metricc.runtime.options`, :mod:`metricc.runtime.modes`), so a loss and
its score average the same classes; see ``docs/modes.md``. ``value`` is the
metric's exact evaluation at counts (``Metric.value``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .errors import MetricError
from .runtime.modes import class_average_weights
from .runtime.options import check_class_options, select_classes

__all__ = ["score", "score_classes"]

#: ``Metric.value``: ``(tp, fp, fn, tn, *, zero_division) -> float or tensor``.
Value = Callable[..., Any]


def score(value: Value, preds: Any, target: Any, threshold: float = 0.5, *,
          zero_division: float | None = None, mode: str = "binary", average: str = "macro",
          ignore_index: int | None = None, classes: Any = None, class_weights: Any = None,
          num_classes: int | None = None) -> Any:
    """The metric on hard labels; see :meth:`metricc.Metric.score`."""
    if mode != "binary" or ignore_index is not None:
        return score_classes(value, preds, target, threshold, mode=mode, average=average,
                             ignore_index=ignore_index, classes=classes,
                             class_weights=class_weights, num_classes=num_classes,
                             zero_division=zero_division)
    return _score_binary(value, preds, target, threshold, zero_division)


def _score_binary(value: Value, preds: Any, target: Any, threshold: float,
                  zero_division: float | None) -> float:
    p = torch.as_tensor(preds)
    t = torch.as_tensor(target)
    if p.shape != t.shape:
        raise MetricError(f"preds and target must have the same shape, got {tuple(p.shape)} "
                          f"and {tuple(t.shape)}")
    if p.numel() == 0:
        raise MetricError("score() needs at least one prediction")
    if not bool(((t == 0) | (t == 1)).all()):
        raise MetricError("target must hold only 0 and 1 (for 0/255 masks, divide by 255)")
    hard = (p >= threshold) if p.is_floating_point() else (p != 0)
    yt = t.to(torch.bool)
    f64 = torch.float64
    tp = (hard & yt).sum(dtype=f64)
    fp = (hard & ~yt).sum(dtype=f64)
    fn = (~hard & yt).sum(dtype=f64)
    tn = (~hard & ~yt).sum(dtype=f64)
    return float(value(tp, fp, fn, tn, zero_division=zero_division))


def score_classes(value: Value, preds: Any, target: Any, threshold: float = 0.5, *,
                  mode: str = "multiclass", average: str = "macro",
                  ignore_index: int | None = None, classes: Any = None,
                  class_weights: Any = None, num_classes: int | None = None,
                  zero_division: float | None = None) -> float | Tensor:
    """The metric on hard labels, per class and averaged; see :meth:`metricc.Metric.score`.

    >>> import metricc
    >>> m = metricc.compile("f1")
    >>> round(score_classes(m.value, [0, 1, 2, 2], [0, 2, 2, 2], num_classes=3), 4)
    0.6
    """
    err = MetricError
    ignore_index, classes, class_weights = check_class_options(
        mode, average, ignore_index, classes, class_weights)
    p = torch.as_tensor(preds)
    t = torch.as_tensor(target, device=p.device)  # counted where the predictions are
    if mode == "binary":
        if p.shape != t.shape:
            raise err(f"preds and target must have the same shape, got {tuple(p.shape)} "
                      f"and {tuple(t.shape)}")
        keep = t != ignore_index if ignore_index is not None else torch.ones_like(t, dtype=bool)
        return _score_binary(value, p[keep], t[keep], threshold, zero_division)

    if mode == "multilabel":
        hard, y, mask = _multilabel(p, t, threshold, ignore_index)
    else:
        hard, y, mask = _multiclass(p, t, ignore_index, num_classes)
    n, c = hard.shape[:2]
    chosen, weights = select_classes(c, classes, class_weights)
    hard, y, mask = (x.reshape(n, x.shape[1], -1) for x in (hard, y, mask))
    if chosen is not None:
        idx = torch.tensor(chosen, device=hard.device)
        hard, y = hard.index_select(1, idx), y.index_select(1, idx)
        mask = mask if mask.shape[1] == 1 else mask.index_select(1, idx)
    f64 = torch.float64
    dims = (0, 2)
    tp = (hard & y & mask).sum(dims, dtype=f64)
    fp = (hard & ~y & mask).sum(dims, dtype=f64)
    fn = (~hard & y & mask).sum(dims, dtype=f64)
    tn = (~hard & ~y & mask).sum(dims, dtype=f64)
    w = None if weights is None else torch.tensor(weights, dtype=f64, device=tp.device)

    if average == "micro":
        # Pool the per-class matrices (class weights scale each class's counts).
        pooled = [(x if w is None else x * w).sum() for x in (tp, fp, fn, tn)]
        return float(value(*pooled, zero_division=zero_division))
    if average == "none":
        return value(tp, fp, fn, tn, zero_division=zero_division)
    present = (tp + fp + fn) > 0
    v = class_average_weights(present[None], (tp + fn)[None], w, average)[0]
    # Only classes that take part are evaluated: an absent class's 0/0 never raises.
    used = v > 0
    values = torch.zeros_like(v)
    values[used] = value(tp[used], fp[used], fn[used], tn[used],
                                zero_division=zero_division)
    return float((v * values).sum())


def _multilabel(p: Tensor, t: Tensor, threshold: float, ignore_index: int | None
                ) -> tuple[Tensor, Tensor, Tensor]:
    if p.dim() < 2 or p.shape != t.shape:
        raise MetricError(f"mode='multilabel' needs preds and target of the same shape (N, C, *), "
                          f"got {tuple(p.shape)} and {tuple(t.shape)}")
    mask = t != ignore_index if ignore_index is not None else torch.ones_like(t, dtype=torch.bool)
    if not bool(((t == 0) | (t == 1) | ~mask).all()):
        raise MetricError("multilabel target must hold only 0 and 1"
                          + (f" (or ignore_index={ignore_index})" if ignore_index is not None
                             else ""))
    hard = (p >= threshold) if p.is_floating_point() else (p != 0)
    return hard, (t == 1) & mask, mask


def _multiclass(p: Tensor, t: Tensor, ignore_index: int | None, num_classes: int | None
                ) -> tuple[Tensor, Tensor, Tensor]:
    err = MetricError
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
