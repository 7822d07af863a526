"""The multiclass loss on logits with class-index targets, with its own logit gradient.

Under ``torch.compile`` a softmax taken under autograd and then the loss's Function
(``loss._symbolic_function``) make AOTAutograd save the logits and *recompute* the
softmax in the backward graph: an ``exp`` pass and two reductions over the classes,
then the softmax backward's own reduction. Where the class step is a plain softmax
(``linear``, or ``softmax`` at any temperature: ``softmax(x / T)``) and the labels are
class indices, the Function here takes the logits instead: its forward runs the
softmax, the counts, the metric's coefficients and the class average, and with them
``d loss / d x = a (g - sum_c a_c g_c) / T`` (``g = d loss / d a``) in the same fused
loops, and saves it; the backward multiplies it by the incoming scalar.

It needs the class average inside (``g`` depends on each class's weight in it), so it
serves the batch-wide ``macro`` and ``weighted`` averages. In eager mode on the CPU a
twin (:func:`softmax_eager_function`) takes the softmax already computed and forms the
same gradient in its backward, with one fresh ``(N, C, M)`` buffer where building
``d loss / d a`` and running torch's softmax backward on it takes two (peak memory on
``(8, 21, 128, 128)``: 31.5 -> 22.5 MB). Eager on a GPU keeps the general path.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .averages import class_average_weights, predicted
from .counts import (
    as_count_rows,
    gather_own,
    graph_kept,
    host_indices,
    index_counts,
    index_hits,
    masked_counts,
    own_rows,
    to_input_dtype,
    wide_dtype,
)
from .distributed import CountPool, updates_state
from .modes import ClassRows


def softmax_index_function(cls: Any) -> Any:
    """A ``torch.autograd.Function`` for ``cls`` (a ``MetricLoss`` subclass) from
    ``(N, C, M)`` logits and ``(N, 1, M)`` class indices to the averaged loss."""
    sign = -1.0 if cls.higher_is_better else 1.0

    class SoftmaxIndexMetric(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Tensor, y: Tensor, hit: Tensor, temperature: float,
                    eps: float, pool: CountPool | None, weights: Tensor | None,
                    average: str, update: bool) -> Tensor:
            # ``hit`` (C,) bool: the class is some element's hard prediction (presence).
            in_dtype = x.dtype
            x = x.to(wide_dtype(in_dtype))
            a = torch.softmax(x if temperature == 1 else x / temperature, 1)
            counts = masked_counts(a, y, None, overwrite=False)  # the loss's own index counts
            support = counts[0] + counts[2]
            present = (support > 0) | hit
            loss, c1, c0 = _averaged(cls, counts, support, present, pool, weights, average,
                                     eps, sign / temperature, a.dtype, update)
            # d loss / d a = g: c1_c at an element's own class c, c0_c at the others; then
            # the softmax's vector-Jacobian product a (g - sum_c a_c g_c).
            # The sum is written as sum_c a_c c0_c + sum_c [y = c] a_c (c1_c - c0_c), not from
            # g itself: Inductor would store g, (N, C, M), for its two uses; this way it
            # stores two (N, 1, M) sums instead (measured: ~15 % of the 3-D case's time).
            own = index_hits(y, a.shape[1])
            dot = ((a * c0).sum(1, keepdim=True)
                   + torch.where(own, a * (c1 - c0), 0.0).sum(1, keepdim=True))
            ctx.save_for_backward(a * (torch.where(own, c1, c0) - dot))
            ctx.pool, ctx.in_dtype = pool, in_dtype
            return loss

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
            (gx,) = ctx.saved_tensors
            if ctx.pool is not None:
                # Every rank's loss depends on this rank's counts through the all-reduce.
                grad = ctx.pool.sum_grad(grad)
            return (to_input_dtype(gx * grad.to(gx.dtype), ctx.in_dtype), *(None,) * 8)

    SoftmaxIndexMetric.__name__ = SoftmaxIndexMetric.__qualname__ = f"{cls.__name__}Softmax"
    return SoftmaxIndexMetric


def _averaged(cls: Any, counts: tuple[Tensor, ...], support: Tensor, present: Tensor,
              pool: CountPool | None, weights: Tensor | None, average: str, eps: float,
              scale: float, dtype: torch.dtype, update: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The class-averaged loss and each class's ``d loss / d a`` at an element of that
    class (``c1``) and of another (``c0``), both ``(C, 1)`` in ``dtype``; ``scale`` is
    ``sign / temperature``; ``update`` whether the pool's memory takes this batch."""
    if pool is not None:
        # Global (and remembered) counts give the coefficients; every rank averages the
        # same classes with the same weights (as MetricLoss does).
        counts = pool(counts, update=update)
        support = pool.across_ranks(support)
        present = pool.across_ranks(present) > 0
    value, g1, g0 = (as_count_rows(v, counts[0]) for v in cls.metric_and_coefficients(*counts, eps))
    losses = (1 - value if cls.higher_is_better else value).to(dtype)
    v = class_average_weights(present, support, weights, average)
    coef = torch.stack((g1, g0)) * (v * scale)
    c1, c0 = coef.to(dtype).unsqueeze(-1).unbind()
    return (v.to(dtype) * losses).sum(), c1, c0


def softmax_eager_function(cls: Any) -> Any:
    """The eager (CPU) twin of :func:`softmax_index_function`: it takes the softmax
    ``class_rows`` computed, and forms the logit gradient in the backward.

    The backward writes ``a (c0 - sum_c a_c c0_c - a_y dc_y)`` with one small matrix
    product for the sum and adds ``a_y dc_y`` at each element's own class, where
    ``dc = c1 - c0`` and ``a_y`` is the softmax at the element's class, which the counts
    gathered anyway: one fresh ``(N, C, M)`` buffer instead of the two of building
    ``d loss / d a`` and running torch's softmax backward on it.
    """
    sign = -1.0 if cls.higher_is_better else 1.0

    class SoftmaxIndexEager(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Tensor, r: ClassRows, temperature: float, eps: float,
                    pool: CountPool | None, weights: Tensor | None, average: str,
                    update: bool) -> Tensor:
            a, y = r.s.detach().to(wide_dtype(x.dtype)), r.y  # softmax(x / T), int64 indices
            rows = own_rows(y)
            own = gather_own(a, rows)
            counts = index_counts(a, y, gathered=own)
            support = counts[0] + counts[2]
            n, k = a.shape[:2]
            # the hard predictions of classes without support only (see averages.predicted)
            present = (support > 0) | predicted(r, (support == 0).expand(n, k), None).any(0)
            loss, c1, c0 = _averaged(cls, counts, support, present, pool, weights, average,
                                     eps, sign / temperature, a.dtype, update)
            ctx.save_for_backward(a, y, rows, own, c1, c0)
            ctx.pool, ctx.in_dtype = pool, x.dtype
            return loss

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
            a, y, rows, own, c1, c0 = ctx.saved_tensors
            if ctx.pool is not None:
                grad = ctx.pool.sum_grad(grad)
            k = a.shape[1]
            # The incoming scalar scales the (C, 1) coefficients, not the (N, C, M) result.
            c1, c0 = c1 * grad.to(c1.dtype), c0 * grad.to(c0.dtype)
            dcy = (c1 - c0).reshape(-1).index_select(0, y.reshape(-1)).view(y.shape)
            # a_y dc_y into a_y's own buffer where no later backward reads it (peak memory)
            dcy = dcy.mul_(own) if graph_kept() else own.mul_(dcy)
            dot = torch.matmul(c0.view(1, 1, k), a).add_(dcy)  # sum_c a_c g_c, (N, 1, M)
            # (c0 - dot) a: the broadcast difference is written without reading a, then one
            # multiply; a c0 - a dot reads a twice (measured 25-35 % slower).
            gx = torch.sub(c0.view(1, k, 1), dot).mul_(a)
            del dot
            # a row scatter: scatter_add_(1, y, ...) on (N, C, M) runs 2x slower at large M
            n, m = rows.shape  # explicit sizes: an empty shard (n = 0) has no inferable -1
            gx.view(n, k * m).scatter_add_(1, rows, dcy.view(n, m))
            return (to_input_dtype(gx, ctx.in_dtype), *(None,) * 7)

    SoftmaxIndexEager.__name__ = SoftmaxIndexEager.__qualname__ = f"{cls.__name__}SoftmaxEager"
    return SoftmaxIndexEager


def softmax_index_loss(loss: Any, input: Tensor, r: ClassRows, average: str
                       ) -> Tensor | None:
    """``loss``'s value by :func:`softmax_index_function` (compiled) or
    :func:`softmax_eager_function` (eager, CPU), where they apply (see the module's
    docstring), else ``None``; ``r`` is the batch :func:`class_rows` laid out.

    Class-index rows (``r.y`` integer) come only with the symbolic backward, all
    classes, no ``ignore_index``, weight map, soft labels, ``micro`` or ``samplewise``.
    Compiled, the softmax ``class_rows`` applied to ``r.s`` is unused and dropped from the
    graph; eager, it is the one the Function counts.
    """
    if (r.y.is_floating_point() or not loss.from_logits or average not in ("macro", "weighted")
            or loss.relaxation not in ("linear", "softmax")):
        return None
    temperature = loss.temperature if loss.relaxation == "softmax" else 1.0
    if not torch.compiler.is_compiling():
        if not host_indices(r.y):
            return None  # eager on a GPU: the general path (its kernels are launch-bound)
        return loss._softmax_eager.apply(input.reshape(r.s.shape), r, temperature, loss.eps,
                                         loss.pool, r.weights, average, updates_state(loss))
    hit = predicted(r, None, element_weights=None).any(0)
    return loss._softmax_function.apply(input.reshape(r.s.shape), r.y, hit, temperature,
                                        loss.eps, loss.pool, r.weights, average,
                                        updates_state(loss))
