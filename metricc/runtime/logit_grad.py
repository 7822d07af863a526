"""The compiled multiclass loss on logits: the whole logit gradient formed in the forward.

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
serves the batch-wide ``macro`` and ``weighted`` averages. In eager mode on the CPU
torch's own softmax backward is faster (the eager path is tuned around it), so
:func:`softmax_index_loss` applies only while ``torch.compile`` traces.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .counts import _counts, _rows, _to_input_dtype, _wide, index_hits
from .distributed import CountPool
from .modes import ClassRows, class_average_weights, predicted


def softmax_index_function(cls: Any) -> Any:
    """A ``torch.autograd.Function`` for ``cls`` (a ``MetricLoss`` subclass) from
    ``(N, C, M)`` logits and ``(N, 1, M)`` class indices to the averaged loss."""
    sign = -1.0 if cls.higher_is_better else 1.0

    class SoftmaxIndexMetric(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Tensor, y: Tensor, hit: Tensor, temperature: float,
                    eps: float, pool: CountPool | None, weights: Tensor | None,
                    average: str) -> Tensor:
            # ``hit`` (C,) bool: the class is some element's hard prediction (presence).
            in_dtype = x.dtype
            x = x.to(_wide(in_dtype))
            a = torch.softmax(x if temperature == 1 else x / temperature, 1)
            counts = _counts(a, y, None, overwrite=False)  # the loss's own index counts
            support = counts[0] + counts[2]
            present = (support > 0) | hit
            if pool is not None:
                # Global (and remembered) counts give the coefficients; every rank
                # averages the same classes with the same weights (as MetricLoss does).
                counts = pool(counts)
                support = pool.across_ranks(support)
                present = pool.across_ranks(present) > 0
            value, g1, g0 = (_rows(v, counts[0])
                             for v in cls.metric_and_coefficients(*counts, eps))
            losses = (1 - value if cls.higher_is_better else value).to(a.dtype)
            v = class_average_weights(present, support, weights, average)
            # d loss / d a = g: v_c sign g1_c at an element's own class c, v_c sign g0_c at
            # the others; then the softmax's vector-Jacobian product a (g - sum_c a_c g_c).
            # The sum is written as sum_c a_c c0_c + sum_c [y = c] a_c (c1_c - c0_c), not from
            # g itself: Inductor would store g, (N, C, M), for its two uses; this way it
            # stores two (N, 1, M) sums instead (measured: ~15 % of the 3-D case's time).
            coef = torch.stack((g1, g0)) * (v * (sign / temperature))
            c1, c0 = coef.to(a.dtype).unsqueeze(-1).unbind()
            own = index_hits(y, a.shape[1])
            dot = ((a * c0).sum(1, keepdim=True)
                   + torch.where(own, a * (c1 - c0), 0.0).sum(1, keepdim=True))
            ctx.save_for_backward(a * (torch.where(own, c1, c0) - dot))
            ctx.pool, ctx.in_dtype = pool, in_dtype
            return (v.to(a.dtype) * losses).sum()

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
            (gx,) = ctx.saved_tensors
            if ctx.pool is not None:
                # Every rank's loss depends on this rank's counts through the all-reduce.
                grad = ctx.pool.sum_grad(grad)
            return (_to_input_dtype(gx * grad.to(gx.dtype), ctx.in_dtype), *(None,) * 7)

    SoftmaxIndexMetric.__name__ = SoftmaxIndexMetric.__qualname__ = f"{cls.__name__}Softmax"
    return SoftmaxIndexMetric


def softmax_index_loss(loss: Any, input: Tensor, r: ClassRows, average: str
                       ) -> Tensor | None:
    """``loss``'s value by :func:`softmax_index_function`, where it applies (see the
    module's docstring), else ``None``; ``r`` is the batch :func:`class_rows` laid out.

    Class-index rows (``r.y`` integer) come only with the symbolic backward, all
    classes, no ``ignore_index``, weight map, soft labels, ``micro`` or ``samplewise``.
    The softmax ``class_rows`` applied to ``r.s`` is then unused, and dropped from the
    compiled graph.
    """
    if (not torch.compiler.is_compiling() or r.y.is_floating_point() or not loss.from_logits
            or average not in ("macro", "weighted")
            or loss.relaxation not in ("linear", "softmax")):
        return None
    temperature = loss.temperature if loss.relaxation == "softmax" else 1.0
    hit = predicted(r, None, element_weights=None).any(0)
    return loss._softmax_function.apply(input.reshape(r.s.shape), r.y, hit, temperature,
                                        loss.eps, loss.pool, r.weights, average)
