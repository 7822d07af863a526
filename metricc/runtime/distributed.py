"""Counts summed over the ranks of a process group, and over past batches (``CountPool``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import MetricError

if torch.distributed.is_available():
    import torch.distributed as dist
else:  # some builds ship without torch.distributed; sync_dist then acts on one process
    dist = None  # type: ignore[assignment]  # every use checks is_available() first


def _world_size(process_group: Any) -> int:
    """Ranks in ``process_group``; 1 when torch.distributed is absent or not initialised."""
    if dist is None or not dist.is_initialized():
        return 1
    return dist.get_world_size(process_group)


def sync_counts(counts: Tensor, process_group: Any = None, *,
                differentiable: bool = False, check_shapes: bool = True) -> Tensor:
    """Sum ``counts`` over the ranks of ``process_group`` (the default group for ``None``).

    ``differentiable=True`` uses the autograd-aware all-reduce, whose backward
    sums the incoming gradients over the ranks; otherwise the result is a
    detached sum. Outside an initialised process group this is the identity.
    ``check_shapes`` first compares the shapes of all ranks (:func:`same_shape_on_every_rank`);
    a backward, whose shapes are the forward's, skips it.

    >>> sync_counts(torch.ones(1, 4)).tolist()
    [[1.0, 1.0, 1.0, 1.0]]
    """
    world = _world_size(process_group)
    if world == 1:
        return counts
    if check_shapes and not torch.compiler.is_compiling():
        same_shape_on_every_rank(counts, process_group, world)
    if differentiable:
        return _AllReduceSum.apply(counts, process_group)
    return _all_reduce_sum(counts.detach(), process_group)


#: Length of the shape signature ranks exchange: the number of dims, then up to 7 sizes.
_SIGNATURE = 8


def same_shape_on_every_rank(t: Tensor, process_group: Any, world: int) -> None:
    """Raise the same MetricError on every rank when ``t``'s shape differs between ranks.

    An all-reduce of unequal sizes aborts the process inside gloo (SIGABRT) and hangs NCCL,
    so the ranks first exchange a small signature (one all_gather of 8 integers and one
    host sync); every rank then sees every shape and refuses together, before the reduce.
    """
    shape = tuple(t.shape)[:_SIGNATURE - 1]
    sig = torch.tensor([t.dim(), *shape, *(-1,) * (_SIGNATURE - 1 - len(shape))],
                       dtype=torch.int64, device=t.device)
    gathered = [torch.empty_like(sig) for _ in range(world)]
    dist.all_gather(gathered, sig, group=process_group)
    shapes = [tuple(int(v) for v in g[1:1 + int(g[0])].tolist()) for g in gathered]
    if len(set(shapes)) > 1:
        listed = ", ".join(f"rank {r}: {s}" for r, s in enumerate(shapes))
        raise MetricError(f"summing counts over ranks needs one shape on every rank, got {listed}; "
                          "give every rank the same number of classes (and of rows), for "
                          "example with num_classes or classes=")


def _all_reduce_sum(t: Tensor, process_group: Any) -> Tensor:
    """``t`` summed over ranks, exchanged in float64 whatever ``t``'s dtype: ranks whose
    inputs differ in dtype (float32 on one, float64 on another) form sums and gradients of
    different dtypes, and an all-reduce of unequal dtypes aborts the process inside gloo
    (SIGABRT). The counts are float64 already; a float32 curve or gradient costs a cast of
    its few numbers."""
    total = t.to(torch.float64, memory_format=torch.contiguous_format, copy=True)
    dist.all_reduce(total, group=process_group)
    return total.to(t.dtype)


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


def updates_state(module: torch.nn.Module) -> bool:
    """True when a forward of ``module`` is a training step, the one kind of call that may
    update a loss's state (the ``memory_decay`` memory, a constrained loss's multipliers):
    ``module`` in training mode with gradients enabled. Under ``torch.no_grad()`` or
    ``torch.inference_mode()`` (validation, also of a model whose loss stays in training
    mode because it is no submodule) the state is read and left alone. Decide it before an
    autograd Function's forward, which always runs with gradients disabled."""
    return module.training and torch.is_grad_enabled()


def recomputing() -> bool:
    """True while the autograd engine runs a backward pass: a forward called then is
    activation checkpointing's recomputation (``torch.utils.checkpoint``), not a new step,
    so a loss must not update its state (memory, multipliers) in it. Eager only."""
    return torch._C._current_graph_task_id() != -1


def keep_float64(module: torch.nn.Module, names: tuple[str, ...], fn: Any, recurse: bool) -> None:
    """``Module._apply(fn)`` (``.to``, ``.half``, ``.cuda``, ...) on ``module``, moving the
    buffers ``names`` to ``fn``'s device but keeping them float64 (state such as counts
    and multipliers loses precision, or overflows, in half precision)."""
    kept = {n: getattr(module, n) for n in names}
    for n in names:
        setattr(module, n, None)
    try:
        torch.nn.Module._apply(module, fn, recurse)
    finally:
        for n, t in kept.items():
            if t is not None:
                # Where fn sends a float64 tensor on t's device is where t goes.
                device = fn(torch.zeros(0, dtype=torch.float64, device=t.device)).device
                t = t.to(device=device, dtype=torch.float64)
            setattr(module, n, t)


class CountPool(torch.nn.Module):
    """Pools a loss's soft counts over the ranks of a process group and over past batches.

    With ``c_t`` the ``(R, 4)`` counts of batch ``t`` on this rank, the metric is
    evaluated at ``C_t = sum_ranks c_t + decay * M_{t-1}`` and the memory becomes
    ``M_t = C_t.detach()``. So ``C_t`` holds this batch's counts (through which
    gradients flow) plus ``sum_{k<t} decay^(t-k) * (global counts of batch k)``,
    detached. The memory is used only in training mode, and updated only in a training
    step (:func:`updates_state`): under ``torch.no_grad()`` or ``torch.inference_mode()`` it
    is read and left alone. ``reset()`` (``MetricLoss.reset_memory()``) empties it.

    >>> pool = CountPool(sync_dist=False, process_group=None, memory_decay=1.0)
    >>> counts = tuple(torch.tensor([v], dtype=torch.float64) for v in (1.0, 2.0, 3.0, 4.0))
    >>> _ = pool(counts)
    >>> [float(t) for t in pool(counts)]  # this batch plus the remembered one
    [2.0, 4.0, 6.0, 8.0]
    """

    memory: Tensor | None
    memory_before: Tensor | None
    #: Whether the last eager training-mode call updated the memory: a recomputation
    #: (activation checkpointing) after one that only read it (``use_reentrant=True`` runs
    #: the first forward under ``no_grad``) is the step. A class default for old pickles.
    updated_last: bool = True

    def __init__(self, sync_dist: bool, process_group: Any, memory_decay: float | None) -> None:
        super().__init__()
        self.sync_dist = sync_dist
        self.process_group = process_group
        self.memory_decay = memory_decay
        # Not persistent: the memory is per-epoch training state, and keeping it out of
        # state_dict lets checkpoints load into losses with and without memory alike.
        self.register_buffer("memory", None, persistent=False)
        # The memory before the last update: what a recomputation of that step reads.
        self.register_buffer("memory_before", None, persistent=False)

    def extra_repr(self) -> str:
        return f"sync_dist={self.sync_dist}, memory_decay={self.memory_decay}"

    def _apply(self, fn: Any, recurse: bool = True) -> CountPool:
        """``Module._apply`` (``.to``, ``.half``, ``.cuda``, ...) that moves the memory but keeps it float64.

        A module cast would round the remembered counts: after ``.half()`` a sum
        of 200k elements is ``29888.`` or ``inf``, and the loss sticks or turns NaN.
        """
        keep_float64(self, ("memory", "memory_before"), fn, recurse)
        return self

    def reset(self) -> None:
        """Forget all past batches."""
        self.memory = None
        self.memory_before = None

    def prepare(self, shape: tuple[int, ...], device: torch.device) -> None:
        """Allocate the (float64) memory of counts of ``shape`` now, where the loss calls the
        pool inside an autograd Function: torch.compile traces that Function as a subgraph,
        which cannot make a new buffer (``InternalTorchDynamoError``), only fill one."""
        if self.memory_decay is not None and self.memory is None and updates_state(self):
            self.memory = torch.zeros(shape, dtype=torch.float64, device=device)
            self.memory_before = torch.zeros_like(self.memory)

    def forward(self, counts: tuple[Tensor, ...], differentiable: bool = False,
                update: bool | None = None) -> tuple[Tensor, ...]:
        """The pooled ``(TP, FP, FN, TN)``, each of shape ``(R,)`` like the input's.

        ``update``: whether this call is a training step that adds the batch to the memory;
        ``None`` decides by :func:`updates_state` here (an autograd Function, whose forward
        runs without gradients, passes what its caller decided)."""
        c = torch.stack(counts, -1)
        if self.sync_dist:
            c = sync_counts(c, self.process_group, differentiable=differentiable)
        if self.memory_decay is None or not self.training:
            return c.unbind(-1)
        if update is None:
            update = updates_state(self)
        if not torch.compiler.is_compiling():
            # Eager only: torch.compile traces no recomputation, and guards on grad mode.
            if recomputing() and self.updated_last:
                # Activation checkpointing runs the forward again inside the backward: it
                # must see the memory the first run saw, and not add this batch twice.
                # (After a first run that only read, under use_reentrant=True, it is the step.)
                return self._plus(c, self.memory_before).unbind(-1)
            self.updated_last = update
        if not update:
            # Validation (no_grad, inference_mode) reads the memory and leaves it alone;
            # a buffer made under inference_mode could not be updated in place later.
            return self._plus(c, self.memory).unbind(-1)
        if not torch.compiler.is_compiling() and self.memory is not None \
                and self.memory.is_inference():
            self.memory = self.memory.clone()  # made under inference mode elsewhere
        if self.memory is None or self.memory.dtype != c.dtype:
            # float64 like the counts, also after module.half(): large sums lose
            # precision (and overflow at 65504) in half precision.
            old = self.memory
            self.memory = torch.zeros_like(c) if old is None else old.to(c.dtype)
            self.memory_before = torch.zeros_like(c)
        if self.memory.shape != c.shape:
            raise MetricError(
                f"the loss's memory holds counts of shape {tuple(self.memory.shape)} but this "
                f"batch gives {tuple(c.shape)}; call reset_memory() when the rows change"
            )
        before = self.memory.detach()
        c = c + self.memory_decay * before
        # In place, so torch.compile sees buffer mutations rather than new attributes.
        if self.memory_before is None or self.memory_before.shape != c.shape:
            self.memory_before = torch.zeros_like(c)
        self.memory_before.copy_(before)
        self.memory.copy_(c.detach())
        return c.unbind(-1)

    def _plus(self, c: Tensor, memory: Tensor | None) -> Tensor:
        """``c`` plus the decayed ``memory`` where it fits, else ``c``."""
        if memory is None or memory.shape != c.shape:
            return c
        return c + self.memory_decay * memory.to(c.dtype)  # type: ignore[operator]

    def across_ranks(self, t: Tensor) -> Tensor:
        """``t`` (detached, float64) summed over ranks under ``sync_dist``, else as it is.

        Used for the class support and presence that decide the average's weights:
        every rank must average the same classes with the same weights, or the ranks
        would optimise different objectives. Past batches' are not remembered.
        """
        t = t.detach().to(torch.float64)
        return sync_counts(t, self.process_group) if self.sync_dist else t

    def sum_grad(self, grad: Tensor) -> Tensor:
        """Adjoint of the forward all-reduce: the sum of every rank's incoming gradient."""
        if not self.sync_dist:
            return grad
        # detached: backward is not differentiated; its shapes are the checked forward's
        return sync_counts(grad, self.process_group, check_shapes=False)


def count_pool(sync_dist: bool, process_group: Any, memory_decay: float | None,
               multidim_average: str, pool_class: type[CountPool] = CountPool) -> CountPool | None:
    """Validate the distributed/memory options; ``None`` when neither is asked for, else a
    ``pool_class`` (:class:`CountPool` or a subclass, such as the curve's)."""
    err = MetricError
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
    if multidim_average == "samplewise":
        raise err("sync_dist and memory_decay pool counts of the same confusion matrix over "
                  "ranks and batches; with multidim_average='samplewise' every sample has its "
                  "own, so use multidim_average='global'")
    decay = None if memory_decay is None else float(memory_decay)
    return pool_class(sync_dist, process_group, decay)
