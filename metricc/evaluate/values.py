"""Exact values of a 2x2 metric at given counts (:meth:`metricc.Metric.value`): numbers or tensors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..errors import MetricError

__all__ = ["count_tensor", "exact_value", "is_array"]


def exact_value(kernel: Callable[..., Any], counts: list[Any], zero_division: float | None,
                undefined: Callable[[], list[str]]) -> Any:
    """``kernel(tp, fp, fn, tn, 0.0)`` on validated counts (:meth:`metricc.Metric.value`).

    A float for numbers, a tensor (of the counts' floating dtype) for tensors; where the
    result is not finite, ``zero_division`` or a MetricError naming ``undefined()``.
    """
    if zero_division is not None and (isinstance(zero_division, bool)
                                      or not isinstance(zero_division, (int, float))):
        raise MetricError(f"zero_division must be a number (or float('nan')), got "
                          f"{zero_division!r}")
    names = ("tp", "fp", "fn", "tn")
    tensors = [count_tensor(k, v if v is not None else 0) for k, v in zip(names, counts, strict=True)]
    tensor_in = any(is_array(v) for v in counts)
    # Computed in float64 whatever the input (float16 counts overflow in the
    # products of MCC); tensors come back in their own floating dtype.
    out_dtype = next((v.dtype for v in counts if isinstance(v, torch.Tensor)
                      and v.is_floating_point()), torch.float64)
    tensors = list(torch.broadcast_tensors(*tensors)) if tensor_in else tensors
    out = torch.as_tensor(kernel(*tensors, 0.0), dtype=torch.float64)
    bad = ~torch.isfinite(out)
    if bool(bad.any()):
        if zero_division is None:
            zeros = undefined()
            if not zeros and bool(torch.isinf(out).any()):  # nothing divides: an overflow
                raise MetricError("the metric overflows float64 at these counts (past 1.8e308: "
                                  "exp of a count, a count to the power of a count); rescale "
                                  "the counts in the formula (exp(TP/n)) or pass "
                                  "zero_division=<value> to choose what such a case scores")
            where = " or ".join(f"{d} = 0" for d in zeros) or "these counts"
            raise MetricError(
                f"the metric is undefined here ({where}); pass zero_division=<value> to "
                "choose what such a case scores"
            )
        out = torch.where(bad, torch.full_like(out, float(zero_division)), out)
    return out.to(out_dtype) if tensor_in else float(out)


def is_array(v: Any) -> bool:
    """A tensor or an array; numpy scalars (np.int64(3)) are numbers, and give a float."""
    import numbers

    return (hasattr(v, "__array__") or hasattr(v, "__torch_function__")) \
        and not isinstance(v, numbers.Number)


def count_tensor(name: str, v: Any) -> Any:
    """One count for :meth:`Metric.value` as a float64 tensor, or a clear MetricError."""
    import numbers

    if is_array(v):
        t = v if isinstance(v, torch.Tensor) else torch.as_tensor(v)
        if t.device.type == "meta":
            raise MetricError(f"{name} is a meta tensor, which holds no values; pass real counts")
        if t.is_complex() or t.dtype == torch.bool:
            raise MetricError(f"{name} must hold real numbers, got a tensor of {t.dtype}")
        t = t.detach().to(torch.float64) if t.dtype != torch.float64 else t
    elif isinstance(v, bool) or not isinstance(v, numbers.Real):
        hint = "; use a tensor for several values" if isinstance(v, (list, tuple)) else ""
        raise MetricError(f"{name} must be a number or a tensor, got {type(v).__name__} "
                          f"{v!r:.40}{hint}")
    else:
        try:
            t = torch.tensor(float(v), dtype=torch.float64)
        except OverflowError:
            raise MetricError(f"{name} is too large for a float ({str(v)[:20]}...)") from None
    if not bool(torch.isfinite(t).all()):
        raise MetricError(f"{name} must be finite, got {v if t.dim() == 0 else 'a tensor with'}"
                          f"{'' if t.dim() == 0 else ' inf or nan'}")
    if bool((t < 0).any()):
        raise MetricError(f"{name} must be >= 0 (a count), got "
                          f"{float(t) if t.dim() == 0 else 'a negative entry'}")
    return t
