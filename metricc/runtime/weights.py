"""Per-element weight maps of the loss: ``loss_fn(input, target, weight=w)``.

An element of weight ``k`` counts ``k`` times in every count, so integer weights
equal repeating elements (``docs/weights-and-soft-labels.md``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..errors import MetricError


def validate_weight(weight: Any, target: Tensor, validate_args: bool) -> Tensor:
    """A weight map as a detached tensor of the target's shape (a view, no copy).

    Type, device and shape checks always run; finiteness and ``>= 0`` (one
    min/max pass) with ``validate_args`` outside ``torch.compile``, as for the data.
    """
    err = MetricError
    if not isinstance(weight, Tensor):
        raise err(f"weight must be a tensor broadcastable to the target, got "
                  f"{type(weight).__name__}")
    if weight.is_complex():
        raise err(f"weight must be real, got {weight.dtype}")
    if weight.device != target.device:
        raise err(f"weight is on {weight.device} but target on {target.device}; move both to "
                  "one device")
    try:
        shape = torch.broadcast_shapes(weight.shape, target.shape)
    except RuntimeError:
        shape = None
    if shape != target.shape:
        raise err(f"weight of shape {tuple(weight.shape)} does not broadcast to the target's "
                  f"shape {tuple(target.shape)}: give one weight per target element, or a shape "
                  "that broadcasts to it ((N, 1, *) weighs elements of an (N, C, *) target)")
    weight = weight.detach()
    if validate_args and not torch.compiler.is_compiling():
        lo, hi = (float(v) for v in torch.aminmax(weight.to(torch.float64)))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise err("weight contains NaN or inf; weights must be finite numbers >= 0")
        if lo < 0:
            raise err(f"weight has negative values (min {lo:.4g}); weights must be >= 0 "
                      "(0 leaves an element out)")
        check_weight_total(hi * math.prod(target.shape), weight.dtype)
    return weight.expand(target.shape)


#: Most total weight a batch may carry, by the precision its counts are summed in: the
#: metrics multiply two counts (MCC's TP * TN), which must stay finite (float32: 3.4e38).
WEIGHT_TOTAL_LIMIT = {torch.float64: 1e150, "other": 1e18}


def check_weight_total(bound: float, dtype: torch.dtype) -> None:
    """Refuse a weight map whose total (bounded by max * elements) would overflow the counts.

    >>> check_weight_total(1e38 * 16, torch.float32)
    Traceback (most recent call last):
    ...
    metricc.errors.MetricError: weight total up to 1.6e+39 overflows the counts (float32: at most 1e+18); ...
    """
    limit = WEIGHT_TOTAL_LIMIT[torch.float64] if dtype == torch.float64 \
        else WEIGHT_TOTAL_LIMIT["other"]
    if bound > limit:
        name = str(dtype).replace("torch.", "")
        raise MetricError(f"weight total up to {bound:.2g} overflows the counts ({name}: at most "
                          f"{limit:g}); scale the weights down, or pass float64 weights")


def weight_rows(weight: Tensor, n: int, per_class: bool, classes: tuple[int, ...] | None,
                dtype: torch.dtype) -> Tensor:
    """A weight map of the target's shape laid out as ``(N, 1 or K, M)``, like the rows.

    Targets without a class dimension (binary, class indices) give one weight per
    element, shared by the classes; ``(N, C, *)`` targets (``per_class``) one per
    class and element, of which the selected ``classes`` are kept.
    """
    if not per_class:
        return weight.to(dtype).reshape(n, 1, -1)
    w = weight.to(dtype).reshape(n, weight.shape[1], -1)
    if classes is not None:
        w = w.index_select(1, torch.tensor(classes, device=w.device))
    return w
