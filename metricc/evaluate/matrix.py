"""Exact K x K scores on hard labels: the confusion matrix of class labels.

``MatrixMetric.score`` and ``MatrixMetric.metric()`` (a torchmetrics ``Metric``) count
hard labels here, then evaluate the formula's generated value kernel on the matrix.

>>> hard_confusion_matrix([0, 1, 2, 2], [0, 2, 2, 1], num_classes=3).tolist()
[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 1.0]]
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import MetricError
from .counts import MAX_ONEHOT, check_inputs, input_tensor

__all__ = ["hard_confusion_matrix", "hard_labels"]


def hard_labels(preds: Any, target: Any, num_classes: int | None,
                ignore_index: int | None, classes_from: str | None = None
                ) -> tuple[Tensor, Tensor, int]:
    """``(target, predicted class, K)``: 1-d long tensors of the kept elements.

    ``preds``: ``(N, K, *)`` scores (argmax over dim 1) or ``(N, *)`` class labels
    with ``num_classes``; ``target``: ``(N, *)`` class indices; elements whose
    target is ``ignore_index`` are dropped. ``classes_from``: where ``num_classes`` came
    from when the user did not pass it (``"this metric's K x K parameter M is 2 x 2"``),
    for the messages; ``None``: the user passed ``num_classes``.
    """
    p = input_tensor("preds", preds)
    t = input_tensor("target", target, p.device)
    check_inputs(p, t, "argmax would pick a class for a NaN row")
    if p.is_floating_point():
        if p.dim() < 2:
            raise MetricError(f"preds must be scores (N, K, *) or integer labels (N, *) "
                              f"with num_classes; got floating-point preds of shape "
                              f"{tuple(p.shape)}")
        k = p.shape[1]
        if num_classes is not None and num_classes != k:
            raise MetricError(f"{classes_from or f'num_classes={num_classes}'}, but preds has {k} "
                              "classes on dim 1")
        pred = p.argmax(1)
    else:
        if num_classes is None:
            raise MetricError("integer preds are class labels: pass num_classes=<K>")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int):
            raise MetricError(f"num_classes must be an integer, got {num_classes!r}")
        k = int(num_classes)
        pred = p
    if k < 2:
        raise MetricError(f"a K x K metric needs K >= 2 classes, got {k}")
    if k * k > MAX_ONEHOT:
        raise MetricError(f"num_classes={k} needs a {k} x {k} matrix of {k * k} counts (the limit "
                          f"is {MAX_ONEHOT}); pass the true number of classes")
    if t.shape != pred.shape or t.is_floating_point():
        raise MetricError(f"target must be integer class indices of shape "
                          f"{tuple(pred.shape)}, got {t.dtype} of shape {tuple(t.shape)}")
    keep = torch.ones_like(t, dtype=torch.bool) if ignore_index is None else t != ignore_index
    t, pred = t[keep].long(), pred[keep].long()
    for what, v in (("target", t), ("preds", pred)):
        if bool(((v < 0) | (v >= k)).any()):
            raise MetricError(f"{what} must hold class indices in 0..{k - 1}"
                              f"{f' ({classes_from})' if classes_from else ''}")
    return t, pred, k


def hard_confusion_matrix(preds: Any, target: Any, num_classes: int | None = None,
                          ignore_index: int | None = None, classes_from: str | None = None
                          ) -> Tensor:
    """The ``(K, K)`` float64 confusion matrix (rows true, columns predicted) of hard labels;
    ``classes_from`` as in :func:`hard_labels`."""
    t, pred, k = hard_labels(preds, target, num_classes, ignore_index, classes_from)
    return torch.bincount(t * k + pred, minlength=k * k).to(torch.float64).view(k, k)
