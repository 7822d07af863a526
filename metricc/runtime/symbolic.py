"""The symbolic autograd Function of ``MetricLoss``, and the kernel's twin on plain numbers.

The forward relaxes the scores, sums the soft counts and runs the generated kernel
``metric_and_coefficients``; the backward is one elementwise pass from its two
coefficients per row (``docs/architecture.md``). A confusion matrix of one row on
the CPU in eager mode (a binary loss, or a micro average) runs the same kernel's
code on Python floats (:func:`host_twin`): on 0-d float64 tensors each of its dozen
operations is a torch call of several microseconds, a large share of a call on a
small batch.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..errors import MetricError
from .counts import (
    as_count_rows,
    count_adjoint,
    count_sums,
    derive_counts,
    masked_counts,
    on_host,
    overlap_share,
    row_adjoint,
    to_input_dtype,
    wide_dtype,
)
from .distributed import CountPool
from .relax import Relaxation


def _maximum(a: float, b: float) -> float:
    # a NaN operand gives NaN, as torch.maximum (Python's max would drop it)
    return a if a >= b else b if b > a else a + b


def _minimum(a: float, b: float) -> float:
    return a if a <= b else b if b < a else a + b


def _clamp(x: float, min: float | None = None, max: float | None = None) -> float:
    if min is not None:
        x = _maximum(x, min)
    return x if max is None else _minimum(x, max)


def _sign(x: float) -> float:
    return float((x > 0) - (x < 0))  # 0 for NaN, as torch.sign


#: The ``torch`` functions generated kernels call, on Python floats. Where torch's float64
#: result is finite they agree with it (the same IEEE operations); where it is not, Python
#: raises (``1/0``, ``log(0)``, ``sqrt(-1)``, ``exp(1000)``) or gives a non-finite or complex
#: number, and :func:`host_values` falls back to the tensor kernel, so those cases keep
#: torch's semantics exactly.
HOST_MATH = types.SimpleNamespace(
    sqrt=math.sqrt, rsqrt=lambda x: 1.0 / math.sqrt(x), log=math.log, exp=math.exp,
    abs=abs, sign=_sign, maximum=_maximum, minimum=_minimum, clamp=_clamp,
    where=lambda c, a, b: a if c else b, zeros_like=lambda x: 0.0, ones_like=lambda x: 1.0,
)


def host_twin(kernel: Callable[..., Any]) -> Callable[..., Any] | None:
    """``kernel``'s code with ``torch`` bound to :data:`HOST_MATH`, or ``None`` where the
    kernel names anything else (a hand-written kernel, a function not mapped here).

    >>> def k(TP, FP, FN, TN, eps):
    ...     return torch.sqrt(TP / (TP + FP + eps))
    >>> host_twin(k)(4.0, 12.0, 0.0, 0.0, 0.0)
    0.5
    """
    code = getattr(kernel, "__code__", None)
    if code is None or kernel.__closure__ or any(
            n != "torch" and not hasattr(HOST_MATH, n) for n in code.co_names):
        return None
    return types.FunctionType(code, {"torch": HOST_MATH, "__builtins__": {}}, kernel.__name__,
                              kernel.__defaults__)


def host_values(twin: Callable[..., Any], counts: tuple[float, ...], eps: float
                ) -> tuple[float, ...] | None:
    """The twin's outputs on the counts as a tuple (``(value, g1, g0)``, or ``(value,)``
    for ``metric_value``), or ``None`` where torch's result would not be finite (the
    caller then runs the tensor kernel: its inf or NaN, as before)."""
    try:
        out = twin(*counts, eps)
    except (ArithmeticError, ValueError, TypeError):  # 1/0, log(0), complex operands
        return None
    out = out if isinstance(out, tuple) else (out,)
    if all(type(v) is float and math.isfinite(v) for v in out):
        return out
    return None


def host_row(a: Tensor, y: Tensor) -> bool:
    """One row of 0/1 (or soft) labels on the CPU in eager mode: reading its four sums as
    Python floats costs nothing (no device to sync, no graph being traced)."""
    return a.dim() == 2 and a.shape[0] == 1 and y.is_floating_point() and on_host(a)


def host_gradient(ctx: Any, grad: Tensor) -> Tensor:
    """The backward of a forward that took the host path: ``ctx.host`` holds the row's
    ``(c1, c0)`` as numbers, ``y, w, d`` are saved; the gradient in the input's dtype."""
    y, w, d = ctx.saved_tensors
    g = float(grad)
    return to_input_dtype(row_adjoint(y, w, d, g * ctx.host[0], g * ctx.host[1]),
                           ctx.in_dtype)


def symbolic_function(cls: Any) -> Any:
    """A ``torch.autograd.Function`` whose backward uses the metric's symbolic partials;
    ``cls`` is the ``MetricLoss`` subclass holding the kernels."""
    # A hot path, kept in one piece past 80 lines: forward and backward run on every loss
    # call, and each helper call costs a Python frame that small batches measure.
    sign = -1.0 if cls.higher_is_better else 1.0
    twin = cls._host_coefficients

    class SymbolicMetric(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, s: Tensor, y: Tensor, w: Tensor | None, relax: Relaxation,
                    from_logits: bool, eps: float, pool: CountPool | None = None,
                    soft_label: bool = False, update: bool = True) -> tuple[Tensor, Tensor]:
            # Half and bfloat16 work in float32 (see backward); the gradient returns
            # in the input's dtype.
            in_dtype = s.dtype
            work = wide_dtype(in_dtype)
            if work != in_dtype:
                s = s.to(work)
                y = y.to(work) if y.is_floating_point() else y  # class indices stay
                w = None if w is None else w.to(work)
            # dA/ds is computed here, alongside A(s), and saved: the backward is then
            # one fused multiply (two passes in eager torch) with nothing recomputed.
            # Compiled, the backward recomputes it from s instead, in its one fused loop:
            # saving d would add a full write and read of it (and its memory).
            a, d, k = relax.value_and_derivative(s, from_logits)
            ctx.recompute = ((relax, from_logits) if d is not None
                             and torch.compiler.is_compiling() else None)
            if ctx.recompute is not None:
                # then only A(s) is needed here: the plain sigmoid is fewer operations than
                # the pair's (the unused dA/ds is dropped from the graph)
                a = relax.value(s, from_logits)
            ctx.in_dtype, ctx.pool, ctx.host = in_dtype, pool, None
            overwrite = a is not s and not soft_label
            if twin is not None and pool is None and not soft_label and host_row(a, y):
                sums = count_sums(a, y, w, overwrite)
                out = host_values(twin, derive_counts(*sums.view(-1).tolist()), eps)
                if out is not None:
                    # Python floats here (the twin's), tensors below: other names.
                    host_value, h1, h0 = out
                    ctx.host = (sign * k * h1, sign * k * h0)
                    ctx.save_for_backward(y, w, d)
                    support = sums[2]
                    ctx.mark_non_differentiable(support)
                    host_loss = 1 - host_value if cls.higher_is_better else host_value
                    return torch.full((1,), fits(host_loss, work), dtype=work), support
                counts = derive_counts(*sums.unbind())
            else:
                counts = masked_counts(a, y, w, overwrite=overwrite, soft_label=soft_label)
            support = counts[0] + counts[2]  # this batch's TP + FN: for the averages
            ctx.mark_non_differentiable(support)
            if pool is not None:
                # Global (and remembered) counts: g1, g0 below are then the global partials.
                counts = pool(counts, update=update)
            value, g1, g0 = (as_count_rows(x, counts[0])
                             for x in cls.metric_and_coefficients(*counts, eps))
            # The per-row coefficients, scaled and in the working dtype here, so that the
            # backward's elementwise pass (which torch.compile fuses with them) does two
            # float multiplies per row instead of a chain in float64.
            coef = torch.stack((g1, g0)).to(work) * (sign * k)
            # d metric / d a = u g1 + (1 - u) g0 with u = y for the product counts and
            # u = d min(a, y) / d a for soft labels: the backward below serves both.
            u = overlap_share(a, y, g1, g0) if soft_label else y
            ctx.save_for_backward(u, w, d if ctx.recompute is None else s, coef)
            loss = 1 - value if cls.higher_is_better else value
            # Half inputs get a float32 loss, as autocast gives torch's own losses:
            # unbounded metrics (odds ratios) pass 65504 at their singular set.
            return loss.to(wide_dtype(s.dtype)), support

        @staticmethod
        def backward(ctx: Any, grad: Tensor, _support_grad: Tensor | None = None
                     ) -> tuple[Tensor | None, ...]:
            if ctx.host is not None:  # one row on the CPU: plain-number coefficients
                return (host_gradient(ctx, grad), *(None,) * 8)
            y, w, d, coef = ctx.saved_tensors
            if ctx.recompute is not None:  # d holds s (compiled): see the forward
                relax, from_logits = ctx.recompute
                d = relax.pair_fused(d, from_logits)[1]
            if ctx.pool is not None:
                # Every rank's loss depends on this rank's counts through the all-reduce.
                grad = ctx.pool.sum_grad(grad)
            # d loss / d a = sign * (y g1 + (1 - y) g0): two per-row scalars and
            # one elementwise pass, with no autograd graph through the sums. It runs in
            # the forward's working dtype (float32 at least): in half, a coefficient of
            # 1e5 times a dA/ds of 1e-10 would be inf * 0 = NaN instead of 1e-5.
            c1, c0 = (grad.to(coef.dtype) * coef).unsqueeze(-1).unbind()
            grad_s = count_adjoint(y, w, d, c1, c0)
            return (to_input_dtype(grad_s, ctx.in_dtype), *(None,) * 8)

    SymbolicMetric.__name__ = SymbolicMetric.__qualname__ = f"{cls.__name__}Function"
    return SymbolicMetric


def fits(loss: float, dtype: torch.dtype) -> float:
    """``loss`` if ``dtype`` can hold it, else a MetricError (not torch's raw overflow error).

    A formula's constants may reach 1e300 (docs/numerics.md), but a float32 loss ends at
    3.4e38: ``1e39*TP/(TP+FP)`` needs float64 input.

    >>> fits(-1e39, torch.float32)
    Traceback (most recent call last):
    ...
    metricc.errors.MetricError: the loss is -1e+39, beyond float32's range (3.4e+38): ...
    """
    top = torch.finfo(dtype).max
    if abs(loss) > top:
        name = str(dtype).replace("torch.", "")
        raise MetricError(f"the loss is {loss:.3g}, beyond {name}'s range ({top:.2g}): the "
                          "formula's constants scale it; pass float64 input (input.double()) or "
                          "scale the formula down")
    return loss
