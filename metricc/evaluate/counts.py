"""Exact scores on hard labels (``Metric.score``): binary, multiclass and multilabel.

Hard labels get their own checks (``_<mode>_validate_hard``: targets must be
0/1 or class indices, predictions labels or scores), then go through the loss's
own stages: :func:`metricc.runtime.modes.class_rows` lays them out and picks
the classes, and :func:`~metricc.runtime.averages.class_average_weights` applies
the absent-class policy, so a loss and its score count and average the same
classes (``docs/modes.md``). ``value`` is the metric's exact evaluation at
counts (``Metric.value``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import MetricError
from ..runtime.averages import class_average_weights, reduce_samples
from ..runtime.hints import integer_preds_error, label_error, warn_if_ignore_drops_positives
from ..runtime.modes import BINARY, MULTICLASS, MULTILABEL, Mode, binary_validate, class_rows
from ..runtime.options import check_class_options, look_up_option, select_classes
from .scale import check_threshold, out_of_range_error, probabilities, refuse_multiclass_threshold
from .threshold import outside_stacklevel

__all__ = ["MAX_ONEHOT", "check_inputs", "input_tensor", "score", "score_classes"]

#: ``Metric.value``: ``(tp, fp, fn, tn, *, zero_division) -> float or tensor``.
Value = Callable[..., Any]


def score(value: Value, preds: Any, target: Any, threshold: float | None = None, *,
          zero_division: float | None = None, mode: Mode, average: str = "macro",
          ignore_index: int | None = None, classes: Any = None, class_weights: Any = None,
          num_classes: int | None = None, from_logits: bool = False,
          multidim_average: str = "global", reduction: str = "mean") -> Any:
    """The metric on hard labels; see :meth:`metricc.Metric.score`, which looks ``mode`` up
    (and holds its default)."""
    check_threshold(threshold, from_logits)  # NaN, and a logit where a probability belongs
    refuse_multiclass_threshold(mode, threshold)
    if mode.class_dim or ignore_index is not None or multidim_average != "global":
        return score_classes(value, preds, target, threshold, mode=mode, average=average,
                             ignore_index=ignore_index, classes=classes,
                             class_weights=class_weights, num_classes=num_classes,
                             zero_division=zero_division, from_logits=from_logits,
                             multidim_average=multidim_average, reduction=reduction)
    return _score_binary(value, preds, target, threshold, zero_division, from_logits)


def _decision(p: Tensor, threshold: float | None, from_logits: bool) -> tuple[Tensor, float]:
    """``(scores, cut)`` such that ``scores >= cut`` is the hard prediction of ``p``: the
    rule of :mod:`metricc.evaluate.scale`.

    0/1 labels pass as they are (other integers are refused). Probabilities are cut
    at ``threshold`` (0.5 by default), logits (``from_logits``) through their sigmoid
    (``threshold`` is then a probability too). Without a ``threshold``, scores outside
    ``[0, 1]`` are refused unless ``from_logits``, as the loss refuses them: thresholding
    logits at 0.5 would silently be the wrong decision. Without ``from_logits`` an explicit
    ``threshold`` applies to the scores as they are, on any scale.
    """
    cut = check_threshold(threshold, from_logits)
    if not p.is_floating_point():
        check_01_preds(p)
        return p, cut
    if p.numel() and threshold is None and not from_logits:
        lo, hi = (float(v) for v in torch.aminmax(p.detach()))  # no NaN: _check_preds refused it
        if lo < 0 or hi > 1:
            raise out_of_range_error(lo, hi)
    return probabilities(p, from_logits), cut


def input_tensor(name: str, v: Any, device: Any = None) -> Tensor:
    """``torch.as_tensor(v)``, or a MetricError naming the input (a string, a ragged list).

    >>> input_tensor("preds", [[0.1, 0.2], [0.3]])
    Traceback (most recent call last):
    ...
    metricc.errors.MetricError: preds must be a tensor or a rectangular (nested) list of numbers, got list ...
    """
    if isinstance(v, np.ndarray) and any(st < 0 for st in v.strides):
        v = np.ascontiguousarray(v)  # a reversed view (labels[::-1]): torch takes no negative strides
    try:
        return torch.as_tensor(v, device=device)
    except (TypeError, ValueError, RuntimeError) as e:
        raise MetricError(f"{name} must be a tensor or a rectangular (nested) list of numbers, "
                          f"got {type(v).__name__} ({str(e).splitlines()[0][:80]})") from None


def _score_binary(value: Value, preds: Any, target: Any, threshold: float | None,
                  zero_division: float | None, from_logits: bool = False) -> float:
    p = input_tensor("preds", preds)
    t = input_tensor("target", target)
    binary_validate(p, t, ("preds", "target"), "")
    _check_preds(p, t)
    _check_01(t, None, BINARY)
    scores, cut = _decision(p, threshold, from_logits)
    hard = (scores >= cut) if scores.is_floating_point() else (scores != 0)
    yt = t.to(torch.bool)
    f64 = torch.float64
    tp = (hard & yt).sum(dtype=f64)
    fp = (hard & ~yt).sum(dtype=f64)
    fn = (~hard & yt).sum(dtype=f64)
    tn = (~hard & ~yt).sum(dtype=f64)
    return float(value(tp, fp, fn, tn, zero_division=zero_division))


def score_classes(value: Value, preds: Any, target: Any, threshold: float | None = None, *,
                  mode: Mode, average: str = "macro",
                  ignore_index: int | None = None, classes: Any = None,
                  class_weights: Any = None, num_classes: int | None = None,
                  zero_division: float | None = None, from_logits: bool = False,
                  multidim_average: str = "global", reduction: str = "mean") -> float | Tensor:
    """The metric on hard labels, per class and averaged; see :meth:`metricc.Metric.score`.

    >>> import metricc
    >>> m = metricc.compile("f1")
    >>> round(score_classes(m.value, [0, 1, 2, 2], [0, 2, 2, 2], mode=MULTICLASS, num_classes=3), 4)
    0.6
    """
    ignore_index, classes, class_weights = check_class_options(
        mode, average, ignore_index, classes, class_weights)
    samplewise = look_up_option("multidim_average", multidim_average) == "samplewise"
    look_up_option("reduction", reduction)
    p = input_tensor("preds", preds)
    t = input_tensor("target", target, p.device)  # counted where the predictions are
    _check_preds(p, t)
    if not mode.class_dim:
        binary_validate(p, t, ("preds", "target"), "")
        mask = None if ignore_index is None else t != ignore_index
        _check_01(t, mask, mode, ignore_index=ignore_index)
        scores = p
        average = "micro"  # one class: every average is the same
    elif not mode.exclusive:
        scores = _multilabel_validate_hard(p, t, ignore_index, mode)
    else:
        # No range check: the argmax of logits is the argmax of their softmax.
        scores = _multiclass_validate_hard(p, t, ignore_index, num_classes)
    cut = 0.5
    if not mode.exclusive:  # the argmax needs no decision threshold
        scores, cut = _decision(scores, threshold, from_logits)
    hard, y, mask = _hard_rows(scores, t, mode, cut, ignore_index, classes, class_weights)
    f64 = torch.float64
    # One row of per-class counts for the batch, or one per sample (samplewise): (S, K).
    k = hard.shape[1]
    rows = hard.shape[0] if samplewise else 1
    dims: tuple[int, ...] = (2,) if samplewise else (0, 2)
    tp, fp, fn, tn = ((a & b & mask).sum(dims, dtype=f64).reshape(rows, k)
                      for a, b in ((hard, y), (hard, ~y), (~hard, y), (~hard, ~y)))
    # The weights again, in float64 (class_rows gives them in the scores' dtype).
    weights = None
    if mode.class_dim:
        _, weights = select_classes(scores.shape[1], classes, class_weights)
    w = None if weights is None else torch.tensor(weights, dtype=f64, device=tp.device)
    present = (tp + fp + fn) > 0
    if average == "micro":
        # Pool the per-class matrices (class weights scale each class's counts).
        tp, fp, fn, tn = ((x if w is None else x * w).sum(-1, keepdim=True)
                          for x in (tp, fp, fn, tn))
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
        per = (v * _values(value, (tp, fp, fn, tn), used, zero_division)).sum(-1)
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


def _check_preds(p: Tensor, t: Tensor) -> None:
    """Refuse what would crash later or count silently wrong."""
    if p.numel() == 0 or t.numel() == 0:
        raise MetricError("score() needs at least one prediction")
    check_inputs(p, t)


def check_inputs(p: Tensor, t: Tensor, nan_does: str = "a NaN would count as a negative prediction"
                 ) -> None:
    """Refuse tensors without values, complex ones, and NaN scores (``nan_does``: what a NaN
    would silently do: ``NaN >= threshold`` is False)."""
    if "meta" in (p.device.type, t.device.type):
        raise MetricError("score() needs real tensors; meta tensors hold no values")
    if p.is_complex() or t.is_complex():
        raise MetricError("score() needs real predictions and targets, got complex numbers")
    if p.is_floating_point() and bool(torch.isnan(p).any()):
        raise MetricError(f"preds contain NaN; check the model output ({nan_does})")


#: Most elements of the (N, C, *) one-hot layout score() builds for multiclass labels, and
#: of the K x K matrix a K x K score() counts into (one limit for both statistics).
MAX_ONEHOT = 2**28


def _hard_rows(scores: Tensor, t: Tensor, mode: Mode, threshold: float,
               ignore_index: int | None, classes: tuple[int, ...] | None = None,
               class_weights: tuple[float, ...] | None = None
               ) -> tuple[Tensor, Tensor, Tensor]:
    """``(hard, y, mask)``, bool ``(N, K, M)`` (``mask``: ``(N, 1 or K, M)``), from the
    loss's own format stage (:func:`metricc.runtime.modes.class_rows`)."""
    if mode.exclusive:
        threshold = 0.5  # unused: the hard prediction is the argmax
    if not scores.is_floating_point():  # 0/1 labels: a 1 is a positive prediction
        scores, threshold = (scores != 0).to(torch.float32), 0.5
    r = class_rows(scores, t, mode, False, ignore_index, classes, class_weights,
                   threshold=threshold)
    assert r.hard is not None
    hard, y = r.hard, r.y > 0.5
    if r.mask is not None:
        mask = r.mask
    else:
        mask = torch.ones_like(hard[:, :1] if mode.exclusive else hard)
    return hard, y, mask


def multilabel_hard_rows(p: Tensor, t: Tensor, threshold: float, ignore_index: int | None,
                mode: Mode, call: str = "score takes (preds, target)"
                ) -> tuple[Tensor, Tensor, Tensor]:
    """``(hard, y, mask)`` of multilabel (or ``(N, 1, *)`` binary) hard labels, all classes."""
    scores = _multilabel_validate_hard(p, t, ignore_index, mode, call)
    return _hard_rows(scores, t, MULTILABEL, threshold, ignore_index)


def multiclass_hard_rows(p: Tensor, t: Tensor, ignore_index: int | None, num_classes: int | None
                ) -> tuple[Tensor, Tensor, Tensor]:
    """``(hard, y, mask)`` of multiclass hard labels, all classes."""
    scores = _multiclass_validate_hard(p, t, ignore_index, num_classes)
    return _hard_rows(scores, t, MULTICLASS, 0.5, ignore_index)


def check_01_preds(p: Tensor) -> None:
    """Refuse binary/multilabel integer predictions other than 0 and 1 (``3 >= 0.5`` would
    silently count as a positive)."""
    if p.dtype != torch.bool and not p.is_floating_point() and p.numel():
        bad = (p != 0) & (p != 1)
        if bool(bad.any()):
            raise integer_preds_error(float(p[bad].flatten()[0]))


def _check_01(t: Tensor, mask: Tensor | None, mode: Mode,
              call: str = "score takes (preds, target)", ignore_index: int | None = None) -> None:
    """Refuse targets other than 0 and 1 (where ``mask`` is True), with the loss's message;
    warn, as the loss does, when ``ignore_index`` (``mask``) left only negatives."""
    ok = (t == 0) | (t == 1)
    if not bool((ok if mask is None else ok | ~mask).all()):
        kept = t if mask is None else t[mask]
        lo, hi = (float(v) for v in torch.aminmax(kept.double()))
        raise label_error(mode, lo, hi, hard=True, call=call)
    if mask is not None and ignore_index is not None:
        kept = t[mask]
        if kept.numel() and not bool(kept.any()):  # every kept target 0: a 0/255 mask?
            warn_if_ignore_drops_positives(t, ignore_index, mode, [0.0, 0.0],
                                           stacklevel=outside_stacklevel() + 1)


def _multilabel_validate_hard(p: Tensor, t: Tensor, ignore_index: int | None,
                              mode: Mode,
                              call: str = "score takes (preds, target)") -> Tensor:
    """Multilabel preds and 0/1 targets of one shape ``(N, C, *)``; returns the preds.
    ``mode`` and ``call`` name the caller in messages (binary rows are ``(N, 1, *)``)."""
    if p.dim() < 2 or p.shape != t.shape:
        raise MetricError(f"mode='multilabel' needs preds and target of the same shape (N, C, *), "
                          f"got {tuple(p.shape)} and {tuple(t.shape)}")
    mask = None if ignore_index is None else t != ignore_index
    _check_01(t, mask, mode, call, ignore_index)
    return p


def _multiclass_validate_hard(p: Tensor, t: Tensor, ignore_index: int | None,
                              num_classes: int | None) -> Tensor:
    """Multiclass scores ``(N, C, *)`` or integer labels ``(N, *)`` with ``num_classes``,
    against class indices ``(N, *)`` or one-hot ``(N, C, *)`` targets.

    Returns scores of shape ``(N, C, *)`` whose argmax is the predicted class
    (integer labels become one-hot).
    """
    err = MetricError
    if p.is_floating_point():
        if p.dim() < 2:
            raise err(f"multiclass preds must be scores of shape (N, C, *) or integer labels of "
                      f"shape (N, *), got floating-point preds of shape {tuple(p.shape)}")
        c = p.shape[1]
        if num_classes is not None and num_classes != c:
            raise err(f"num_classes={num_classes} but preds has {c} classes on dim 1")
        pred_shape = (*p.shape[:1], *p.shape[2:])
    else:
        if num_classes is None:
            raise err("integer multiclass preds are class labels: pass num_classes=<C>")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int):
            raise err(f"num_classes must be an integer, got {num_classes!r}")
        c = num_classes
        if c < 2:  # before the index check below, which would say "in 0..-2"
            raise err(f"mode='multiclass' needs num_classes >= 2, got {c}")
        if p.numel() * c > MAX_ONEHOT:
            raise err(f"num_classes={c} with {p.numel()} predictions needs a one-hot layout "
                      f"of {p.numel() * c} elements (the limit is {MAX_ONEHOT}); pass the "
                      "true number of classes")
        if p.numel() and not bool(((p >= 0) & (p < c)).all()):
            raise err(f"multiclass preds must be class indices in 0..{c - 1}")
        pred_shape = tuple(p.shape)
    if c < 2:
        raise err(f"mode='multiclass' needs at least 2 classes, got {c}")
    onehot_shape = (*pred_shape[:1], c, *pred_shape[1:])
    if tuple(t.shape) == onehot_shape:
        if ignore_index is not None:
            raise err("ignore_index applies to class-index targets of shape (N, *); pass "
                      "class indices instead of one-hot targets")
        if not bool((((t == 0) | (t == 1)).all()) and bool((t.sum(1) == 1).all())):
            raise err("one-hot multiclass targets must hold a single 1 per element")
    elif tuple(t.shape) == pred_shape:
        if t.is_floating_point():
            raise err(f"class-index targets must be integers, got {t.dtype}; use target.long()")
        mask = t != ignore_index if ignore_index is not None else torch.ones_like(t, dtype=torch.bool)
        if not bool(((t >= 0) & (t < c) | ~mask).all()):
            raise err(f"multiclass target must hold class indices in 0..{c - 1}"
                      + (f" (or ignore_index={ignore_index})" if ignore_index is not None
                         else ""))
    else:
        raise err(f"multiclass target must have shape {pred_shape} (class indices) or "
                  f"{onehot_shape} (one-hot), "
                  f"got {tuple(t.shape)}")
    if p.is_floating_point():
        return p
    return torch.nn.functional.one_hot(p.long(), c).movedim(-1, 1).to(torch.float32)
