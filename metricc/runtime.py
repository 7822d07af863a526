"""Relaxations, soft confusion counts and the loss module; needs only torch.

This file is also the body of every standalone loss that ``metricc compile``
writes, so it imports nothing from metricc, sympy or lark. A compiled metric
subclasses :class:`MetricLoss` and fills in its two generated kernels.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

RELAXATIONS = ("anyloss", "linear", "sigmoid")
REDUCTIONS = ("mean", "sum", "none")
BACKWARDS = ("symbolic", "autograd")
MULTIDIM_AVERAGES = ("global", "samplewise")

if torch.distributed.is_available():
    import torch.distributed as dist
else:  # some builds ship without torch.distributed; sync_dist then acts on one process
    dist = None


def relax(s: Tensor, relaxation: str, amplifier: float, slope: float, offset: float,
          from_logits: bool) -> Tensor:
    """The relaxed 0/1 prediction ``a = A(s)`` for scores ``s``.

    ``anyloss``: ``sigmoid(amplifier * (p - 0.5))``; ``linear``: ``p``;
    ``sigmoid``: ``sigmoid(slope * (logit + offset))`` (sigmoidF1), on logits.
    ``p`` is ``sigmoid(s)`` when ``from_logits`` else ``s``.
    """
    if relaxation == "sigmoid":
        return torch.sigmoid(slope * (s + offset))
    p = torch.sigmoid(s) if from_logits else s
    if relaxation == "anyloss":
        return torch.sigmoid(amplifier * (p - 0.5))
    return p


def relax_grad(s: Tensor, relaxation: str, amplifier: float, slope: float, offset: float,
               from_logits: bool) -> Tensor:
    """``dA/ds`` of :func:`relax`.

    Written as ``k * sigmoid(z) * sigmoid(-z)`` rather than ``k * a * (1 - a)``:
    in float32 ``a`` rounds to 1 for ``p`` near 1 once ``k >= 34``, and ``1 - a``
    would silently zero the gradient there.
    """
    if relaxation == "sigmoid":
        z = slope * (s + offset)
        return slope * torch.sigmoid(z) * torch.sigmoid(-z)
    if from_logits:
        p = torch.sigmoid(s)
        dp = p * torch.sigmoid(-s)
    else:
        p = s
        dp = torch.ones_like(s)
    if relaxation == "anyloss":
        z = amplifier * (p - 0.5)
        return amplifier * torch.sigmoid(z) * torch.sigmoid(-z) * dp
    return dp


def soft_counts(a: Tensor, y: Tensor, w: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``TP, FP, FN, TN`` of each row of ``a`` against ``y``, summed in float64.

    ``TP = sum(w y a)``, ``FN = sum(w y) - TP``, ``FP = sum(w a) - TP``,
    ``TN = sum(w) - sum(w y) - FP``: three reductions instead of four products.
    """
    f64 = torch.float64
    if w is None:
        tp = (a * y).sum(-1, dtype=f64)
        pp = a.sum(-1, dtype=f64)
        pos = y.sum(-1, dtype=f64)
        total = torch.full_like(tp, float(a.shape[-1]))
    else:
        wa = w * a
        tp = (wa * y).sum(-1, dtype=f64)
        pp = wa.sum(-1, dtype=f64)
        pos = (w * y).sum(-1, dtype=f64)
        total = w.sum(-1, dtype=f64)
    fp = pp - tp
    fn = pos - tp
    tn = total - pos - fp
    return tp, fp, fn, tn


def _world_size(process_group: Any) -> int:
    """Ranks in ``process_group``; 1 when torch.distributed is absent or not initialised."""
    if dist is None or not dist.is_initialized():
        return 1
    return dist.get_world_size(process_group)


def sync_counts(counts: Tensor, process_group: Any = None, *,
                differentiable: bool = False) -> Tensor:
    """Sum ``counts`` over the ranks of ``process_group`` (the default group for ``None``).

    ``differentiable=True`` uses the autograd-aware all-reduce, whose backward
    sums the incoming gradients over the ranks; otherwise the result is a
    detached sum. Outside an initialised process group this is the identity.

    >>> sync_counts(torch.ones(1, 4)).tolist()
    [[1.0, 1.0, 1.0, 1.0]]
    """
    if _world_size(process_group) == 1:
        return counts
    if differentiable:
        return _AllReduceSum.apply(counts, process_group)
    return _all_reduce_sum(counts.detach(), process_group)


def _all_reduce_sum(t: Tensor, process_group: Any) -> Tensor:
    total = t.clone(memory_format=torch.contiguous_format)
    dist.all_reduce(total, group=process_group)
    return total


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks whose backward sums the incoming gradients over ranks.

    The same as ``torch.distributed.nn.functional.all_reduce`` (deprecated in
    torch 2.13; its replacement in ``_functional_collectives`` has no autograd).
    Every rank's loss depends on every rank's counts, so the gradient reaching
    this rank's counts is the sum of all ranks' upstream gradients.
    """

    @staticmethod
    def forward(ctx: Any, t: Tensor, process_group: Any) -> Tensor:
        ctx.process_group = process_group
        return _all_reduce_sum(t, process_group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return _all_reduce_sum(grad, ctx.process_group), None


class CountPool(torch.nn.Module):
    """Pools a loss's soft counts over the ranks of a process group and over past batches.

    With ``c_t`` the ``(R, 4)`` counts of batch ``t`` on this rank, the metric is
    evaluated at ``C_t = sum_ranks c_t + decay * M_{t-1}`` and the memory becomes
    ``M_t = C_t.detach()``. So ``C_t`` holds this batch's counts (through which
    gradients flow) plus ``sum_{k<t} decay^(t-k) * (global counts of batch k)``,
    detached. The memory is used and updated only in training mode; ``reset()``
    (``MetricLoss.reset_memory()``) empties it.

    >>> pool = CountPool(sync_dist=False, process_group=None, memory_decay=1.0)
    >>> counts = tuple(torch.tensor([v], dtype=torch.float64) for v in (1.0, 2.0, 3.0, 4.0))
    >>> _ = pool(counts)
    >>> [float(t) for t in pool(counts)]  # this batch plus the remembered one
    [2.0, 4.0, 6.0, 8.0]
    """

    memory: Tensor | None

    def __init__(self, sync_dist: bool, process_group: Any, memory_decay: float | None,
                 error_class: type[Exception] = ValueError) -> None:
        super().__init__()
        self.sync_dist = sync_dist
        self.process_group = process_group
        self.memory_decay = memory_decay
        self.error_class = error_class
        # Not persistent: the memory is per-epoch training state, and keeping it out of
        # state_dict lets checkpoints load into losses with and without memory alike.
        self.register_buffer("memory", None, persistent=False)

    def extra_repr(self) -> str:
        return f"sync_dist={self.sync_dist}, memory_decay={self.memory_decay}"

    def reset(self) -> None:
        """Forget all past batches."""
        self.memory = None

    def forward(self, counts: tuple[Tensor, ...], differentiable: bool = False
                ) -> tuple[Tensor, ...]:
        """The pooled ``(TP, FP, FN, TN)``, each of shape ``(R,)`` like the input's."""
        c = torch.stack(counts, -1)
        if self.sync_dist:
            c = sync_counts(c, self.process_group, differentiable=differentiable)
        if self.memory_decay is not None and self.training:
            if self.memory is None or self.memory.dtype != c.dtype:
                # float64 like the counts, also after module.half(): large sums lose
                # precision (and overflow at 65504) in half precision.
                old = self.memory
                self.memory = torch.zeros_like(c) if old is None else old.to(c.dtype)
            if self.memory.shape != c.shape:
                raise self.error_class(
                    f"the loss's memory holds counts of shape {tuple(self.memory.shape)} but this "
                    f"batch gives {tuple(c.shape)}; call reset_memory() when the rows change"
                )
            c = c + self.memory_decay * self.memory
            # In place, so torch.compile sees a buffer mutation rather than a new attribute.
            self.memory.copy_(c.detach())
        return c.unbind(-1)

    def sum_grad(self, grad: Tensor) -> Tensor:
        """Adjoint of the forward all-reduce: the sum of every rank's incoming gradient."""
        if not self.sync_dist:
            return grad
        return sync_counts(grad, self.process_group)  # detached: backward is not differentiated


class MetricLoss(torch.nn.Module):
    """``1 - metric`` (or ``metric`` where lower is better) on a relaxed confusion matrix.

    ``forward(input, target)``: ``input`` holds probabilities (or logits with
    ``from_logits=True``), ``target`` 0/1 (or soft) labels of the same shape
    ``(N, *)``. With ``multidim_average="global"`` the whole batch forms one
    confusion matrix and the loss is a scalar; with ``"samplewise"`` each sample
    has its own and ``reduction`` (``mean``, ``sum``, ``none``) combines them.
    ``backward="symbolic"`` runs the backward pass from the metric's symbolic
    partials in one elementwise pass; ``"autograd"`` differentiates the forward.
    """

    formula: ClassVar[str] = ""
    #: The generated source of the two kernels, for reading.
    source: ClassVar[str] = ""
    higher_is_better: ClassVar[bool] = True
    error_class: ClassVar[type[Exception]] = ValueError
    _function: ClassVar[Any] = None

    @staticmethod
    def metric_value(TP: Tensor, FP: Tensor, FN: Tensor, TN: Tensor, eps: float) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def metric_and_coefficients(
        TP: Tensor, FP: Tensor, FN: Tensor, TN: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._function = _symbolic_function(cls)

    def __init__(
        self,
        relaxation: str = "anyloss",
        *,
        amplifier: float = 73.0,
        slope: float = 1.0,
        offset: float = 0.0,
        from_logits: bool = False,
        backward: str = "symbolic",
        multidim_average: str = "global",
        reduction: str = "mean",
        eps: float = 1e-7,
        sync_dist: bool = False,
        process_group: Any = None,
        memory_decay: float | None = None,
    ) -> None:
        super().__init__()
        err = self.error_class
        for name, value, allowed in (
            ("relaxation", relaxation, RELAXATIONS),
            ("backward", backward, BACKWARDS),
            ("multidim_average", multidim_average, MULTIDIM_AVERAGES),
            ("reduction", reduction, REDUCTIONS),
        ):
            if value not in allowed:
                raise err(f"{name}={value!r} is not one of {', '.join(map(repr, allowed))}")
        if relaxation == "sigmoid" and not from_logits:
            raise err("relaxation='sigmoid' acts on logits: pass from_logits=True, "
                      "or use relaxation='anyloss' on probabilities")
        for name, value in (("amplifier", amplifier), ("slope", slope), ("eps", eps)):
            if not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
                raise err(f"{name} must be a finite number >= 0, got {value!r}")
        self.relaxation = relaxation
        self.amplifier = float(amplifier)
        self.slope = float(slope)
        self.offset = float(offset)
        self.from_logits = bool(from_logits)
        self.backward_mode = backward
        self.multidim_average = multidim_average
        self.reduction = reduction
        self.eps = float(eps)
        self.pool = _count_pool(self, sync_dist, process_group, memory_decay)

    def extra_repr(self) -> str:
        return (f"relaxation={self.relaxation!r}, amplifier={self.amplifier}, "
                f"from_logits={self.from_logits}, backward={self.backward_mode!r}, "
                f"multidim_average={self.multidim_average!r}, reduction={self.reduction!r}")

    def reset_memory(self) -> None:
        """Forget the counts of past batches (``memory_decay``); a no-op without memory."""
        if self.pool is not None:
            self.pool.reset()

    def _relax_args(self) -> tuple[str, float, float, float, bool]:
        return self.relaxation, self.amplifier, self.slope, self.offset, self.from_logits

    def row_losses(self, s: Tensor, y: Tensor, w: Tensor | None = None) -> Tensor:
        """Loss of each row of ``(R, M)`` scores against ``(R, M)`` labels, shape ``(R,)``."""
        if self.backward_mode == "symbolic":
            return self._function.apply(s, y, w, *self._relax_args(), self.eps, self.pool)
        a = relax(s, *self._relax_args())
        counts = soft_counts(a, y, w)
        if self.pool is not None:
            counts = self.pool(counts, differentiable=True)
        value = self.metric_value(*counts, self.eps)
        loss = 1 - value if self.higher_is_better else value
        return loss.to(s.dtype)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        if input.shape != target.shape:
            raise self.error_class(
                f"input and target must have the same shape, got {tuple(input.shape)} and "
                f"{tuple(target.shape)}"
            )
        if not input.is_floating_point():
            raise self.error_class(f"input must be a floating-point tensor, got {input.dtype}")
        target = target.to(input.dtype)
        if self.multidim_average == "global" or input.dim() == 0:
            losses = self.row_losses(input.reshape(1, -1), target.reshape(1, -1))
            return losses[0] if self.reduction != "none" else losses.reshape(())
        n = input.shape[0]
        losses = self.row_losses(input.reshape(n, -1), target.reshape(n, -1))
        if self.reduction == "mean":
            return losses.mean()
        if self.reduction == "sum":
            return losses.sum()
        return losses


def _symbolic_function(cls: type[MetricLoss]) -> Any:
    """A ``torch.autograd.Function`` whose backward uses the metric's symbolic partials."""
    sign = -1.0 if cls.higher_is_better else 1.0

    class SymbolicMetric(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, s: Tensor, y: Tensor, w: Tensor | None, relaxation: str,
                    amplifier: float, slope: float, offset: float, from_logits: bool,
                    eps: float, pool: CountPool | None = None) -> Tensor:
            a = relax(s, relaxation, amplifier, slope, offset, from_logits)
            counts = soft_counts(a, y, w)
            if pool is not None:
                # Global (and remembered) counts: g1, g0 below are then the global partials.
                counts = pool(counts)
            value, g1, g0 = cls.metric_and_coefficients(*counts, eps)
            ctx.save_for_backward(s, y, w, g1, g0)
            ctx.pool = pool
            ctx.relax_args = (relaxation, amplifier, slope, offset, from_logits)
            loss = 1 - value if cls.higher_is_better else value
            return loss.to(s.dtype)

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
            s, y, w, g1, g0 = ctx.saved_tensors
            if ctx.pool is not None:
                # Every rank's loss depends on this rank's counts through the all-reduce.
                grad = ctx.pool.sum_grad(grad)
            # d loss / d a = sign * (y g1 + (1 - y) g0): two per-row scalars and
            # one elementwise pass, with no autograd graph through the sums.
            scale = grad.to(g1.dtype) * sign
            c1 = (scale * g1).to(s.dtype).unsqueeze(-1)
            c0 = (scale * g0).to(s.dtype).unsqueeze(-1)
            coef = c0 + y * (c1 - c0)
            if w is not None:
                coef = coef * w
            grad_s = coef * relax_grad(s, *ctx.relax_args)
            return (grad_s, None, None, None, None, None, None, None, None, None)

    SymbolicMetric.__name__ = SymbolicMetric.__qualname__ = f"{cls.__name__}Function"
    return SymbolicMetric


def _count_pool(loss: MetricLoss, sync_dist: bool, process_group: Any,
                memory_decay: float | None) -> CountPool | None:
    """Validate the distributed/memory options; ``None`` when neither is asked for."""
    err = loss.error_class
    if not isinstance(sync_dist, bool):
        raise err(f"sync_dist must be True or False, got {sync_dist!r}")
    if process_group is not None and not sync_dist:
        raise err("process_group is used only with sync_dist=True")
    if memory_decay is not None and (
        isinstance(memory_decay, bool) or not isinstance(memory_decay, (int, float))
        or not 0 <= memory_decay <= 1
    ):
        raise err(f"memory_decay must be a number in [0, 1] (or None), got {memory_decay!r}")
    if not sync_dist and memory_decay is None:
        return None
    if loss.multidim_average == "samplewise":
        raise err("sync_dist and memory_decay pool counts of the same confusion matrix over "
                  "ranks and batches; with multidim_average='samplewise' every sample has its "
                  "own, so use multidim_average='global'")
    decay = None if memory_decay is None else float(memory_decay)
    return CountPool(sync_dist, process_group, decay, err)
