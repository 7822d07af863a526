"""Relaxations, soft confusion counts and the loss module; needs only torch.

This file is also the body of every standalone loss that ``metricc compile``
writes, so it imports nothing from metricc, sympy or lark. A compiled metric
subclasses :class:`MetricLoss` and fills in its two generated kernels.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

RELAXATIONS = ("anyloss", "linear", "sigmoid")
REDUCTIONS = ("mean", "sum", "none")
BACKWARDS = ("symbolic", "autograd")
MULTIDIM_AVERAGES = ("global", "samplewise")
MODES = ("binary", "multiclass", "multilabel")
AVERAGES = ("micro", "macro", "weighted", "none")

if torch.distributed.is_available():
    import torch.distributed as dist
else:  # some builds ship without torch.distributed; sync_dist then acts on one process
    dist = None


def stable_sigmoid(z: Tensor) -> Tensor:
    """``sigmoid(z)`` whose *autograd* derivative is exact in every dtype.

    Autograd differentiates ``torch.sigmoid`` as ``a * (1 - a)`` from its output
    ``a``; in float32 ``a`` rounds to 1 for ``z > 17`` and that derivative is 0
    (for AnyLoss, every ``p > 0.73``). Built from ``e = exp(-|z|)`` instead, the
    derivative autograd finds is ``e / (1 + e)**2``, with no cancellation.

    >>> z = torch.tensor([36.5], requires_grad=True)
    >>> stable_sigmoid(z).backward(); z.grad.item() > 0
    True
    """
    u = torch.where(z >= 0, -z, z)  # -|z|, with derivative -1 at 0 (torch's abs has 0)
    e = torch.exp(u)
    return torch.where(z >= 0, 1 / (1 + e), e / (1 + e))


def relax(s: Tensor, relaxation: str, amplifier: float, slope: float, offset: float,
          from_logits: bool, sigmoid: Any = torch.sigmoid) -> Tensor:
    """The relaxed 0/1 prediction ``a = A(s)`` for scores ``s``.

    ``anyloss``: ``sigmoid(amplifier * (p - 0.5))``; ``linear``: ``p``;
    ``sigmoid``: ``sigmoid(slope * (logit + offset))`` (sigmoidF1), on logits.
    ``p`` is ``sigmoid(s)`` when ``from_logits`` else ``s``. Where autograd
    differentiates it, pass ``sigmoid=stable_sigmoid``.
    """
    if relaxation == "sigmoid":
        return sigmoid(slope * (s + offset))
    p = sigmoid(s) if from_logits else s
    if relaxation == "anyloss":
        return sigmoid(amplifier * (p - 0.5))
    return p


def relax_grad(s: Tensor, relaxation: str, amplifier: float, slope: float, offset: float,
               from_logits: bool) -> Tensor:
    """``dA/ds`` of :func:`relax`: the plain reference form, which ``verify`` checks
    symbolically; the loss's backward runs the faster, numerically equal
    :func:`_relax_pair` (tests compare the two).

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


def _sigmoid_pair(z: Tensor) -> tuple[Tensor, Tensor]:
    """``(sigmoid(z), sigmoid(-z))``, each accurate where the other rounds to 1.

    ``z`` is scratch: it is overwritten by ``sigmoid(z)``.
    """
    ac = torch.neg(z).sigmoid_()
    return z.sigmoid_(), ac


def _relax_pair(s: Tensor, relaxation: str, amplifier: float, slope: float, offset: float,
                from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
    """``(A(s), d, k)`` with ``dA/ds = k * d`` (``d`` is ``None`` where it is 1).

    Shares the work of the two. Eager torch makes one memory pass per operation,
    and at 10^7 elements each fresh buffer costs more than a pass (page faults),
    so the steps run in place on as few buffers as possible, and the constant
    ``k`` is left for the caller to fold into a scalar. ``A(s)`` is a fresh
    tensor the caller may overwrite, except that it is ``s`` itself for the
    linear relaxation of probabilities. Call without grad (in-place steps); the
    autograd path uses :func:`relax`.
    """
    if torch.compiler.is_compiling():
        return _relax_pair_fused(s, relaxation, amplifier, slope, offset, from_logits)
    if relaxation == "sigmoid":
        z = torch.add(s, offset).mul_(slope) if offset else torch.mul(s, slope)
        a, d = _sigmoid_pair(z)
        return a, d.mul_(a), slope
    if not from_logits:
        if relaxation == "linear":
            return s, None, 1.0
        z = torch.sub(s, 0.5).mul_(amplifier)
        a, d = _sigmoid_pair(z)
        return a, d.mul_(a), amplifier
    dp = torch.neg(s).sigmoid_()
    p = torch.sigmoid(s)
    dp = dp.mul_(p)  # dp/ds = sigmoid(s) sigmoid(-s)
    if relaxation == "linear":
        return p, dp, 1.0
    # anyloss: a = sigmoid(z), z = k (p - 1/2); dA/ds = k sigmoid(z) sigmoid(-z) dp/ds.
    a, d = _sigmoid_pair(p.sub_(0.5).mul_(amplifier))
    return a, d.mul_(a).mul_(dp), amplifier


def _sigmoid_parts(m: Tensor) -> tuple[Tensor, Tensor]:
    """``(sigmoid(m), sigmoid(-m))`` for ``m = |z| >= 0`` from one ``exp``.

    With ``e = exp(-m)``: ``sigmoid(m) = 1 / (1 + e)``, ``sigmoid(-m) = e / (1 + e)``,
    so ``sigmoid(z) sigmoid(-z)`` is their product, exact for every ``z`` (no
    ``1 - a`` cancellation, no overflow).
    """
    e = torch.exp(-m)
    r = 1 / (1 + e)
    return r, e * r


def _relax_pair_fused(s: Tensor, relaxation: str, amplifier: float, slope: float,
                      offset: float, from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
    """:func:`_relax_pair` for ``torch.compile``, where one fused loop does it all.

    What counts there is arithmetic, not passes. ``A(s)`` (forward only) is the
    plain sigmoid chain; ``d`` (which the compiler recomputes in the backward
    kernel from ``s``) needs one ``exp`` per sigmoid pair, and only ``|z|``:
    for ``z = k (sigmoid(s) - 1/2)`` that is ``k (sigmoid(|s|) - 1/2)``. Forward
    plus backward cost four ``exp`` per element, as a compiled autograd loss does.
    """
    if relaxation == "sigmoid":
        z = slope * (s + offset)
        r, q = _sigmoid_parts(torch.abs(z))
        return torch.sigmoid(z), r * q, slope
    if not from_logits:
        if relaxation == "linear":
            return s, None, 1.0
        z = amplifier * (s - 0.5)
        r, q = _sigmoid_parts(torch.abs(z))
        return torch.sigmoid(z), r * q, amplifier
    r, q = _sigmoid_parts(torch.abs(s))
    if relaxation == "linear":
        return torch.sigmoid(s), r * q, 1.0
    a = torch.sigmoid(amplifier * (torch.sigmoid(s) - 0.5))
    rz, qz = _sigmoid_parts(amplifier * (r - 0.5))  # |z|, as r = sigmoid(|s|) >= 1/2
    return a, (rz * qz) * (r * q), amplifier


def _sum_dtype(t: Tensor) -> torch.dtype:
    # float32 sums use pairwise (cascade) summation, good to ~1e-8 relative even
    # at 10^8 elements, and cost a fraction of a float64 sum (which first copies
    # the tensor to float64); half and bfloat16 are summed in float32.
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def soft_counts(a: Tensor, y: Tensor, w: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``TP, FP, FN, TN`` of each row of ``a`` against ``y``, as float64.

    Rows are ``(R, M)``: one row per dim-0 index; or ``(N, R, M)``: row ``r``
    pools ``[:, r, :]`` (so classes need no transposed copy).
    ``TP = sum(w y a)``, ``FN = sum(w y) - TP``, ``FP = sum(w a) - TP``,
    ``TN = sum(w) - sum(w y) - FP``: three reductions instead of four products,
    each summed pairwise in float32 (or wider), then combined in float64.
    """
    return _counts(a, y, w, overwrite=False)


def _counts(a: Tensor, y: Tensor, w: Tensor | None, overwrite: bool
            ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`soft_counts`; with ``overwrite`` it reuses ``a``'s memory for ``w a y``.

    ``y`` may also be ``(N, 1, M)`` integer class indices for ``(N, C, M)`` rows (see
    :func:`_index_counts`).
    """
    if not y.is_floating_point():
        return _index_counts(a, y)
    acc = _sum_dtype(a)
    dims = (0, 2) if a.dim() == 3 else -1
    if w is not None:
        a = a.mul_(w) if overwrite else a * w
        overwrite = True
    pp = a.sum(dims, dtype=acc)
    tp = (a.mul_(y) if overwrite else a * y).sum(dims, dtype=acc)
    if w is None:
        pos = y.sum(dims, dtype=acc)
        total = torch.full_like(pos, float(a.shape[-1] * (a.shape[0] if a.dim() == 3 else 1)))
    else:
        pos = (w * y).sum(dims, dtype=acc)
        total = w.sum(dims, dtype=acc)
    tp, pp, pos, total = torch.stack((tp, pp, pos, total)).to(torch.float64).unbind()
    fp = pp - tp
    fn = pos - tp
    tn = total - pos - fp
    return tp, fp, fn, tn


def _index_counts(a: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`soft_counts` of ``(N, C, M)`` rows against class indices ``y`` (``(N, 1, M)``).

    The one-hot labels are never built: ``TP`` of class ``c`` sums ``a`` at the
    elements labelled ``c`` (one gather and a float64 ``bincount`` over ``N M``
    elements instead of a product and a sum over ``N C M``), and the support is a
    ``bincount`` of the labels.
    """
    c = a.shape[1]
    flat = y.reshape(-1)
    pp = a.sum((0, 2), dtype=_sum_dtype(a)).to(torch.float64)
    tp = torch.bincount(flat, weights=a.gather(1, y).reshape(-1).to(torch.float64), minlength=c)
    pos = torch.bincount(flat, minlength=c).to(torch.float64)
    fp = pp - tp
    fn = pos - tp
    tn = float(flat.numel()) - pos - fp
    return tp, fp, fn, tn


def _rows(x: Tensor | float, like: Tensor) -> Tensor:
    """A kernel output as a float64 tensor shaped like ``like``.

    Generated kernels return plain numbers for constant parts (``g1 = 0`` for
    a metric without TP or FN); autograd and ``save_for_backward`` need tensors.
    """
    return torch.zeros_like(like) + x


def _wide(dtype: torch.dtype) -> torch.dtype:
    """``dtype``, or float32 for half and bfloat16: the type losses and gradients are formed in."""
    return torch.promote_types(dtype, torch.float32)


_HALF_MAX = torch.finfo(torch.float16).max


def _to_input_dtype(grad: Tensor, dtype: torch.dtype) -> Tensor:
    """Cast a float32 gradient back to the input's dtype, saturating at float16's 65504.

    Near the singular set the guarded metric's gradient reaches ``~1/eps``; as
    float16 that would be ``inf``, and ``inf`` turns into NaN one layer up.
    """
    if dtype == torch.float16:
        grad = grad.clamp(-_HALF_MAX, _HALF_MAX)
    return grad.to(dtype)


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
        return sync_counts(grad, self.process_group)  # detached: backward is not differentiated


class MetricLoss(torch.nn.Module):
    """``1 - metric`` (or ``metric`` where lower is better) on a relaxed confusion matrix.

    ``forward(input, target)``: ``input`` holds probabilities (or logits with
    ``from_logits=True``). ``mode="binary"``: ``target`` 0/1 (or soft) labels
    of the input's shape ``(N, *)``. ``"multiclass"``: input ``(N, C, *)``
    (softmax applied when ``from_logits``), target ``(N, *)`` integer class
    indices or ``(N, C, *)`` one-hot/soft labels. ``"multilabel"``: input and
    target ``(N, C, *)``, one independent sigmoid per class. ``average`` combines
    the classes (``micro`` pools their counts, ``macro`` averages their losses,
    ``weighted`` by support, ``none`` returns one per class); ``ignore_index``
    drops elements with that target from every count; ``classes`` picks class
    indices and ``class_weights`` (one per class) weighs them.
    With ``multidim_average="global"`` the whole batch forms the confusion
    matrices; with ``"samplewise"`` each sample has its own and ``reduction``
    (``mean``, ``sum``, ``none``) combines the samples. Averages skip classes
    and samples with neither target nor (hard) prediction, falling back to all
    when none remain: see ``docs/modes.md``.
    ``backward="symbolic"`` runs the backward pass from the metric's symbolic
    partials in one elementwise pass per row; ``"autograd"`` differentiates the
    forward. Softmax and sigmoid are left to autograd either way.
    ``eps`` guards every denominator, root and log (``docs/numerics.md``);
    ``validate_args`` checks the data for NaN/inf, out-of-range values and class
    indices (one min/max pass; skipped while ``torch.compile`` traces). Half and
    bfloat16 inputs give a float32 loss; counts are summed in float64.
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
        mode: str = "binary",
        average: str = "macro",
        ignore_index: int | None = None,
        classes: Sequence[int] | None = None,
        class_weights: Sequence[float] | None = None,
        validate_args: bool = True,
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
        self.validate_args = bool(validate_args)
        self.pool = _count_pool(self, sync_dist, process_group, memory_decay)
        self.mode = mode
        self.average = average
        self.ignore_index, self.classes, self.class_weights = check_class_options(
            err, mode, average, ignore_index, classes, class_weights)
        if mode == "multiclass" and relaxation == "sigmoid":
            raise err("relaxation='sigmoid' acts on independent logits, but multiclass losses "
                      "act on softmax probabilities: use relaxation='anyloss' or 'linear', "
                      "or mode='multilabel' for independent sigmoids")

    def extra_repr(self) -> str:
        return (f"relaxation={self.relaxation!r}, amplifier={self.amplifier}, "
                f"from_logits={self.from_logits}, backward={self.backward_mode!r}, "
                f"mode={self.mode!r}, average={self.average!r}, "
                f"multidim_average={self.multidim_average!r}, reduction={self.reduction!r}")

    def reset_memory(self) -> None:
        """Forget the counts of past batches (``memory_decay``); a no-op without memory."""
        if self.pool is not None:
            self.pool.reset()

    def _relax_args(self, from_logits: bool | None = None) -> tuple[str, float, float, float, bool]:
        fl = self.from_logits if from_logits is None else from_logits
        return self.relaxation, self.amplifier, self.slope, self.offset, fl

    def row_losses(self, s: Tensor, y: Tensor, w: Tensor | None = None, *,
                   from_logits: bool | None = None) -> Tensor:
        """Loss of each row of ``(R, M)`` scores against ``(R, M)`` labels, shape ``(R,)``.

        ``(N, R, M)`` inputs give one loss per row ``r``, pooling ``[:, r, :]``.

        ``from_logits`` overrides the module's setting (multiclass rows hold
        softmax probabilities even when the input held logits).
        """
        return self._losses_and_support(s, y, w, from_logits)[0]

    def _losses_and_support(self, s: Tensor, y: Tensor, w: Tensor | None,
                            from_logits: bool | None) -> tuple[Tensor, Tensor]:
        """:meth:`row_losses` and each row's support ``sum(w y)`` (``TP + FN`` of this
        batch, before any pooling; float64, detached), which the averages need."""
        args = self._relax_args(from_logits)
        if self.backward_mode == "symbolic":
            return self._function.apply(s, y, w, *args, self.eps, self.pool)
        # Same dtype path as the symbolic backward: float32 at least.
        work = _wide(s.dtype)
        sw = s.to(work)
        if s.dtype == torch.float16 and sw.requires_grad:
            sw.register_hook(lambda g: g.clamp(-_HALF_MAX, _HALF_MAX))
        a = relax(sw, *args, sigmoid=stable_sigmoid)
        counts = soft_counts(a, y.to(work), None if w is None else w.to(work))
        support = (counts[0] + counts[2]).detach()
        if self.pool is not None:
            counts = self.pool(counts, differentiable=True)
        value = _rows(self.metric_value(*counts, self.eps), counts[0])
        loss = 1 - value if self.higher_is_better else value
        return loss.to(work), support

    def _validate(self, input: Tensor, target: Tensor) -> None:
        """Refuse inputs the loss would silently mis-train on, naming the fix.

        Type, device, emptiness and (binary) shape checks are free and always
        run; :func:`class_rows` checks the other modes' shapes. The checks that
        read the data (NaN/inf, ranges, class indices) cost one min/max pass
        over each tensor and one device sync; they run when ``validate_args``
        is true and the module is not being traced by ``torch.compile`` (a
        data-dependent ``if`` would break a ``fullgraph=True`` graph).
        """
        err = self.error_class
        if not isinstance(input, Tensor) or not isinstance(target, Tensor):
            raise err(f"input and target must be tensors, got {type(input).__name__} and "
                      f"{type(target).__name__}")
        if not input.is_floating_point():
            hint = (" (class indices belong in target; input holds the scores)"
                    if input.dtype not in (torch.bool, torch.complex64, torch.complex128) else "")
            raise err(f"input must be a floating-point tensor of probabilities or logits, got "
                      f"{input.dtype}{hint}; convert it with input.float()")
        if target.is_complex():
            raise err(f"target must be real, got {target.dtype}")
        if self.mode == "binary" and input.shape != target.shape:
            raise err(f"input and target must have the same shape, got {tuple(input.shape)} and "
                      f"{tuple(target.shape)} (forward takes (input, target), predictions first)")
        if input.device != target.device:
            raise err(f"input is on {input.device} but target on {target.device}; move both to "
                      "one device")
        if input.numel() == 0:
            raise err(f"input is empty (shape {tuple(input.shape)}): a confusion matrix of no "
                      "elements has no metric; skip empty batches (if input.numel(): ...)")
        if not self.validate_args or torch.compiler.is_compiling():
            return
        x, t = input.detach(), target.detach()
        indices = self.mode == "multiclass" and t.shape != x.shape  # (N, *) class indices
        ignore = self.ignore_index
        if ignore is not None and t.dtype != torch.bool:
            # ignored elements may hold anything (255 in segmentation masks)
            t = torch.where(t == ignore, torch.zeros((), dtype=t.dtype, device=t.device), t)
        stats = [*torch.aminmax(x)]
        if t.dtype != torch.bool:
            stats += [*torch.aminmax(t)]
        lo, hi, *trange = torch.stack([v.to(torch.float64) for v in stats]).tolist()
        if math.isnan(lo) or math.isnan(hi):
            raise err("input contains NaN; the model produced it upstream (a diverged step, "
                      "log(0), 0/0): find it with torch.autograd.set_detect_anomaly(True)")
        if math.isinf(lo) or math.isinf(hi):
            raise err(f"input contains {'-inf' if math.isinf(lo) else 'inf'}; scores must be "
                      "finite (clamp logits, or check the model for overflow)")
        if not self.from_logits and (lo < 0 or hi > 1):
            raise err(f"input has values outside [0, 1] (min {lo:.4g}, max {hi:.4g}) but "
                      "from_logits=False: pass from_logits=True if these are logits, or apply "
                      f"torch.{'softmax(input, 1)' if self.mode == 'multiclass' else 'sigmoid'} "
                      "first")
        if not trange:
            return
        tlo, thi = trange
        if math.isnan(tlo) or math.isnan(thi):
            raise err("target contains NaN; labels must be 0/1 (or soft labels in [0, 1])")
        if indices:
            c = x.shape[1]
            if tlo < 0 or thi >= c:
                bad = int(tlo) if tlo < 0 else int(thi)
                raise err(f"target holds class index {bad}, but the input has {c} classes "
                          f"(indices 0 to {c - 1}); set ignore_index={bad} if it marks "
                          "elements to leave out")
        elif tlo < 0 or thi > 1:
            hint = (" For 0/255 masks pass target / 255 (or ignore_index=255 if 255 marks "
                    "elements to leave out)." if thi == 255
                    else " Are input and target swapped? forward takes (input, target)."
                    if tlo < 0 else "")
            raise err(f"target has values outside [0, 1] (min {tlo:.4g}, max {thi:.4g}); "
                      f"{'binary' if self.mode == 'binary' else self.mode} targets are 0/1, "
                      "or soft labels in [0, 1]." + hint)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        err = self.error_class
        self._validate(input, target)
        # One class (binary) makes every average the same; micro is the cheapest.
        average = "micro" if self.mode == "binary" else self.average
        samplewise = self.multidim_average == "samplewise" and input.dim() > 0
        # Micro over the whole batch is one row, its own average: presence is not needed.
        single = average == "micro" and not samplewise
        eager = not torch.compiler.is_compiling()
        r = class_rows(err, input, target, self.mode, self.from_logits, self.ignore_index,
                       self.classes, self.class_weights,
                       labels_checked=self.validate_args and eager,
                       index_labels=(eager and self.backward_mode == "symbolic"
                                     and not samplewise and average != "micro"))
        n, k, m = r.s.shape
        w = None if r.mask is None else r.mask.to(r.s.dtype).expand(n, k, m)
        if average == "micro" and r.weights is not None:
            # Micro pools the classes' counts, so a class weight scales its elements.
            cw = r.weights.to(r.s.dtype).view(1, k, 1)
            w = cw.expand(n, k, m) if w is None else w * cw

        def rows(t: Tensor) -> Tensor:
            if average == "micro":  # one row per sample (or one for the batch)
                return t.reshape(n, k * m) if samplewise else t.reshape(1, -1)
            # one row per (sample, class), or per class: (N, K, M) pools dims 0 and 2,
            # which saves transposed copies of the scores, labels and gradient
            return t.reshape(n * k, m) if samplewise else t

        yr = rows(r.y)
        wr = None if w is None else rows(w)
        losses, support = self._losses_and_support(rows(r.s), yr, wr, r.from_logits)
        if single:
            return losses[0]
        # Each row's support, per (sample, class): rows are classes (pooled over the
        # batch), (sample, class) pairs, or samples (micro).
        if not samplewise:
            support_nk = support.view(1, k).expand(n, k)
        elif average == "micro":
            support_nk = support.view(n, 1).expand(n, k)
        else:
            support_nk = support.view(n, k)
        # A row's hard predictions matter only where it has no support; in eager mode,
        # where a data-dependent branch is free, they are found only for those rows.
        need = (support_nk == 0) if eager else None
        hit = predicted(r, need, element_weights=w if average == "micro" else r.mask)
        if not samplewise:
            hit = hit.any(0)
        elif average == "micro":
            hit = hit.any(1)
        present = (support > 0) | hit.reshape(-1)
        if self.pool is not None:
            support = self.pool.across_ranks(support)
            present = self.pool.across_ranks(present) > 0
        shape = (n if samplewise else 1, -1)
        per, keep = average_rows(losses.view(shape), present.view(shape), support.view(shape),
                                 None if average == "micro" else r.weights,
                                 "macro" if average == "micro" else average)
        if not samplewise:
            return per[0]
        return reduce_samples(per, keep, self.reduction)


class ClassRows(NamedTuple):
    """Scores, labels and masks of a batch laid out as ``(N, K, M)``.

    ``K`` is the number of selected classes (1 in binary mode), ``M`` the
    number of elements per sample and class. ``mask`` (``(N, 1 or K, M)``,
    ``None`` without ``ignore_index``) is False where the target is ignored;
    ``weights`` holds the selected ``class_weights``. The hard prediction that
    decides which classes are present (:func:`predicted`) is taken from
    ``scores`` (detached): ``scores >= threshold`` for binary and multilabel
    (``(N, K, M)``), the argmax over dim 1 of ``(N, C, M)`` (all ``C`` classes,
    of which ``chosen`` are selected; ``None``: all) for multiclass.
    """

    s: Tensor
    y: Tensor
    mask: Tensor | None
    from_logits: bool
    weights: Tensor | None
    scores: Tensor
    threshold: float | None
    chosen: list[int] | None


def predicted(r: ClassRows, need: Tensor | None, element_weights: Tensor | None) -> Tensor:
    """``(N, K)`` bool: class ``k`` is the hard prediction of a counted element of sample ``n``.

    Counted elements are those with a positive ``element_weights`` (``(N, 1 or K, M)``,
    or ``None`` for all). Exact where ``need`` (``(N, K)`` bool) is true; elsewhere
    exact or False. ``need=None`` (under ``torch.compile``) computes every entry without
    data-dependent branches.

    Multiclass presence is the costly part: ``max(1).indices`` on CPU is ~40x slower than
    ``amax(1)``. In eager mode the classes that need it are found one by one: class
    ``j`` is the first maximum at an element iff it equals the maximum there and every
    class before it is below it (a running prefix ``amax``), which is the argmax rule
    (first maximum on ties) without an argmax.
    """
    n, k = r.s.shape[:2]
    ew = None if element_weights is None else element_weights.detach() > 0
    if need is not None and not bool(need.any()):
        return torch.zeros((n, k), dtype=torch.bool, device=r.s.device)
    x = r.scores
    if r.threshold is not None:
        if ew is None:
            return x.amax(-1) >= r.threshold
        return ((x >= r.threshold) & ew).any(-1)
    c = x.shape[1]
    cols = list(range(c)) if r.chosen is None else r.chosen
    if ew is not None and ew.shape[1] == 1:
        ew = ew.expand(n, k, -1)
    if need is None:
        # One pass that marks each element's argmax (first maximum, as documented) in an
        # (N, C + 1) table; elements that are not counted go to the extra column.
        idx = x.max(1).indices  # (N, M)
        if r.mask is not None:
            idx = torch.where(r.mask[:, 0], idx, c)
        table = torch.zeros((n, c + 1), dtype=x.dtype, device=x.device).scatter_(1, idx, 1.0)
        hit = table[:, cols] > 0
        # zero class weights (micro) count nothing; a hit implies an unmasked element
        return hit if ew is None else hit & ew.any(-1)
    wanted = need.any(0).nonzero().flatten().tolist()
    out = torch.zeros((n, k), dtype=torch.bool, device=x.device)
    mx = x.amax(1)
    prefix, done = None, 0  # prefix = max of classes [0, done)
    for col in sorted(wanted, key=lambda i: cols[i]):
        j = cols[col]
        if j > done:
            part = x[:, done:j].amax(1)
            prefix = part if prefix is None else torch.maximum(prefix, part)
            done = j
        hit = x[:, j] == mx
        if prefix is not None:
            hit &= prefix < mx
        if ew is not None:
            hit &= ew[:, col]
        out[:, col] = hit.any(-1)
    return out


def check_class_options(
    err: type[Exception], mode: str, average: str, ignore_index: Any,
    classes: Any, class_weights: Any,
) -> tuple[int | None, tuple[int, ...] | None, tuple[float, ...] | None]:
    """Validate ``mode``, ``average``, ``ignore_index``, ``classes``, ``class_weights``.

    Returns ``(ignore_index, classes, class_weights)`` as plain ints and floats.
    """
    for name, value, allowed in (("mode", mode, MODES), ("average", average, AVERAGES)):
        if value not in allowed:
            raise err(f"{name}={value!r} is not one of {', '.join(map(repr, allowed))}")
    if ignore_index is not None:
        ignore_index = _as_int(err, "ignore_index", ignore_index)
    if mode == "binary" and (classes is not None or class_weights is not None):
        raise err("classes and class_weights pick and weigh the classes of an (N, C, *) input; "
                  "mode='binary' has a single class: use mode='multiclass' or 'multilabel'")
    cl = None
    if classes is not None:
        cl = tuple(_as_int(err, "classes", c) for c in _as_sequence(err, "classes", classes))
        if not cl:
            raise err("classes is empty: list at least one class index, or pass None for all")
        if min(cl) < 0:
            raise err(f"classes must be class indices >= 0, got {list(cl)}")
        if len(set(cl)) != len(cl):
            raise err(f"classes lists a class twice: {list(cl)}")
    cw = None
    if class_weights is not None:
        if average == "none":
            raise err("class_weights weigh the classes in an average; average='none' returns "
                      "each class's loss on its own, so weights do not apply")
        cw = tuple(_as_float(err, x) for x in _as_sequence(err, "class_weights", class_weights))
        if not cw:
            raise err("class_weights is empty: give one weight per class, or pass None")
    return ignore_index, cl, cw


def _as_sequence(err: type[Exception], name: str, value: Any) -> list[Any]:
    if isinstance(value, Tensor):
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise err(f"{name} must be a list of numbers, got {value!r}")
    return list(value)


def _as_int(err: type[Exception], name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise err(f"{name} must hold integers, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise err(f"{name} must hold integers, got {value!r}") from None


def _as_float(err: type[Exception], value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = float("nan")
    if isinstance(value, bool) or not math.isfinite(x) or x < 0:
        raise err(f"class_weights must be finite numbers >= 0, got {value!r}")
    return x


def select_classes(err: type[Exception], num_classes: int, classes: tuple[int, ...] | None,
                   class_weights: tuple[float, ...] | None
                   ) -> tuple[list[int] | None, list[float] | None]:
    """Check ``classes`` and ``class_weights`` against the input's ``num_classes``.

    Returns the selected class indices (``None`` for all) and their weights.
    """
    if classes is not None and max(classes) >= num_classes:
        bad = [c for c in classes if c >= num_classes]
        raise err(f"classes names class {bad[0]}, but the input has {num_classes} classes "
                  f"(indices 0 to {num_classes - 1})")
    chosen = list(classes) if classes is not None else list(range(num_classes))
    if class_weights is None:
        return (None if classes is None else chosen), None
    if len(class_weights) != num_classes:
        raise err(f"class_weights has {len(class_weights)} weights but the input has "
                  f"{num_classes} classes: give one weight per class index (the weights of "
                  "classes left out by classes= are not used)")
    weights = [class_weights[c] for c in chosen]
    if not sum(weights) > 0:
        raise err("class_weights of the selected classes are all 0; at least one must be > 0")
    return (None if classes is None else chosen), weights


def class_rows(err: type[Exception], input: Tensor, target: Tensor, mode: str,
               from_logits: bool, ignore_index: int | None, classes: tuple[int, ...] | None,
               class_weights: tuple[float, ...] | None, labels_checked: bool = False,
               index_labels: bool = False) -> ClassRows:
    """Lay out ``input`` and ``target`` as ``(N, K, M)`` rows for ``mode``.

    ``labels_checked``: class indices are known to lie in ``[0, C)`` (validated),
    so a one-hot ``scatter`` may build the labels. With ``index_labels`` as well,
    multiclass class-index targets (all classes, no ``ignore_index``) come back
    as ``y`` of shape ``(N, 1, M)``, int64, for :func:`_index_counts` (on CUDA
    only where nondeterministic algorithms are allowed: ``bincount`` is one).

    Raises ``err`` when the target's shape (or dtype, for class indices) does
    not fit the mode. Only shapes are checked, so this stays traceable by
    ``torch.compile``; label values are not inspected.
    """
    dtype = input.dtype
    if mode == "binary":
        if input.shape != target.shape:
            raise err(f"input and target must have the same shape, got {tuple(input.shape)} "
                      f"and {tuple(target.shape)}")
        n = input.shape[0] if input.dim() > 0 else 1
        s = input.reshape(n, 1, -1)
        t = target.reshape(n, 1, -1)
        mask = None if ignore_index is None else t != ignore_index
        y = t.to(dtype) if mask is None else torch.where(mask, t.to(dtype), 0.0)
        return ClassRows(s, y, mask, from_logits, None, s.detach(), 0.0 if from_logits else 0.5,
                         None)

    if input.dim() < 2:
        raise err(f"mode={mode!r} needs input of shape (N, C, *) with classes on dim 1, got "
                  f"{tuple(input.shape)}; for one class per element use mode='binary'")
    n, c = input.shape[:2]
    chosen, weights = select_classes(err, c, classes, class_weights)
    w_t = None if weights is None else torch.tensor(weights, dtype=dtype, device=input.device)
    idx = None if chosen is None else torch.tensor(chosen, device=input.device)

    def pick(t: Tensor) -> Tensor:
        return t if idx is None or t.shape[1] == 1 else t.index_select(1, idx)

    if mode == "multilabel":
        if target.shape != input.shape:
            raise err(f"mode='multilabel' needs target of the input's shape {tuple(input.shape)} "
                      f"(one 0/1 label per class), got {tuple(target.shape)}")
        s = input.reshape(n, c, -1)
        t = target.reshape(n, c, -1)
        mask = None if ignore_index is None else t != ignore_index
        y = t.to(dtype) if mask is None else torch.where(mask, t.to(dtype), 0.0)
        return ClassRows(pick(s), pick(y), None if mask is None else pick(mask), from_logits, w_t,
                         pick(s).detach(), 0.0 if from_logits else 0.5, None)

    # multiclass
    if c < 2:
        raise err(f"mode='multiclass' needs at least 2 classes on dim 1, got input of shape "
                  f"{tuple(input.shape)}; for a single class use mode='binary'")
    index_shape = input.shape[:1] + input.shape[2:]
    p = torch.softmax(input, dim=1) if from_logits else input
    s = p.reshape(n, c, -1)
    labels = torch.arange(c, device=input.device).view(1, c, 1)
    if target.shape == input.shape:
        if ignore_index is not None:
            raise err("ignore_index applies to class-index targets of shape (N, *); with "
                      "one-hot targets (N, C, *) pass class indices (target.argmax(1) with "
                      "the ignored elements set to ignore_index) instead")
        y = target.reshape(n, c, -1).to(dtype)
        mask = None
    elif target.shape == index_shape:
        if target.is_floating_point() or target.is_complex():
            raise err(f"class-index targets of shape {tuple(index_shape)} must be an integer "
                      f"tensor, got {target.dtype}; use target.long(), or pass one-hot "
                      f"targets of shape {tuple(input.shape)}")
        t = target.reshape(n, 1, -1)
        if (labels_checked and index_labels and ignore_index is None and chosen is None
                and (input.device.type == "cpu"
                     or not torch.are_deterministic_algorithms_enabled())):
            return ClassRows(s, t.long(), None, False, w_t, input.detach().reshape(n, c, -1),
                             None, None)
        if labels_checked and ignore_index is None and not torch.compiler.is_compiling():
            # one pass instead of a comparison and a conversion (which Inductor fuses)
            y = torch.zeros_like(s).scatter_(1, t if t.dtype == torch.int64 else t.long(), 1.0)
        else:
            y = (t == labels).to(dtype)
        mask = None if ignore_index is None else t != ignore_index
    else:
        raise err(f"mode='multiclass' needs target of shape {tuple(index_shape)} (class "
                  f"indices) or {tuple(input.shape)} (one-hot or soft), got "
                  f"{tuple(target.shape)}")
    # argmax of the logits is the argmax of the softmax: presence is decided on the input
    return ClassRows(pick(s), pick(y), mask, False, w_t, input.detach().reshape(n, c, -1), None,
                     chosen)


def _first_positive(candidates: list[Tensor], dim: int) -> Tensor:
    """Along ``dim``, the first candidate weight vector whose sum is positive (else the last)."""
    out = candidates[-1]
    for cand in reversed(candidates[:-1]):
        out = torch.where(cand.sum(dim, keepdim=True) > 0, cand, out)
    return out


def class_average_weights(present: Tensor, support: Tensor, weights: Tensor | None,
                          average: str) -> Tensor:
    """The weight of each class in each sample's average: the absent-class policy.

    ``present`` (``(S, K)`` bool) marks classes with a target or a (hard)
    prediction in that sample's counts, ``support`` is each class's (weighted)
    number of target elements, ``weights`` the ``class_weights`` (``(K,)``).
    ``macro`` weighs present classes by ``weights`` and ignores absent ones;
    ``weighted`` weighs them by ``weights * support``. Where that leaves
    nothing, it falls back to the present classes, then to every class, so the
    weights of each row are >= 0 and sum to 1 (float64).
    """
    f64 = torch.float64
    base = torch.ones_like(support, dtype=f64)
    if weights is not None:
        base = base * weights.to(device=support.device, dtype=f64)
    candidates = [base * present.to(f64), base]
    if average == "weighted":
        candidates.insert(0, base * support.to(f64))
    v = _first_positive(candidates, -1)
    return v / v.sum(-1, keepdim=True)


def average_rows(values: Tensor, present: Tensor, support: Tensor, weights: Tensor | None,
                 average: str) -> tuple[Tensor, Tensor]:
    """Average ``(S, K)`` per-class values over classes (see :func:`class_average_weights`).

    Returns the per-sample values (``(S,)``, or ``(S, K)`` for ``none``) and
    which of them had anything present.
    """
    if average == "none":
        return values, present
    v = class_average_weights(present, support, weights, average)
    return (v.to(values.dtype) * values).sum(-1), present.any(-1)


def reduce_samples(per: Tensor, keep: Tensor, reduction: str) -> Tensor:
    """``reduction`` over samples (dim 0), skipping samples with nothing present.

    When no sample has anything present, every sample counts.
    """
    if reduction == "none":
        return per
    f64 = torch.float64
    u = _first_positive([keep.to(f64), torch.ones_like(keep, dtype=f64)], 0)
    if reduction == "mean":
        u = u / u.sum(0, keepdim=True)
    return (u.to(per.dtype) * per).sum(0)


def _symbolic_function(cls: type[MetricLoss]) -> Any:
    """A ``torch.autograd.Function`` whose backward uses the metric's symbolic partials."""
    sign = -1.0 if cls.higher_is_better else 1.0

    class SymbolicMetric(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, s: Tensor, y: Tensor, w: Tensor | None, relaxation: str,
                    amplifier: float, slope: float, offset: float, from_logits: bool,
                    eps: float, pool: CountPool | None = None) -> tuple[Tensor, Tensor]:
            # Half and bfloat16 work in float32 (see backward); the gradient returns
            # in the input's dtype.
            in_dtype = s.dtype
            work = _wide(in_dtype)
            if work != in_dtype:
                s = s.to(work)
                y = y.to(work) if y.is_floating_point() else y
                w = None if w is None else w.to(work)
            # dA/ds is computed here, alongside A(s), and saved: the backward is then
            # one fused multiply (two passes in eager torch) with nothing recomputed.
            a, d, k = _relax_pair(s, relaxation, amplifier, slope, offset, from_logits)
            counts = _counts(a, y, w, overwrite=a is not s)
            support = counts[0] + counts[2]  # this batch's TP + FN: for the averages
            ctx.mark_non_differentiable(support)
            if pool is not None:
                # Global (and remembered) counts: g1, g0 below are then the global partials.
                counts = pool(counts)
            value, g1, g0 = (_rows(x, counts[0])
                             for x in cls.metric_and_coefficients(*counts, eps))
            # The per-row coefficients, scaled and in the working dtype here, so that the
            # backward's elementwise pass (which torch.compile fuses with them) does two
            # float multiplies per row instead of a chain in float64.
            coef = (torch.stack((g1, g0)) * (sign * k)).to(work)
            ctx.save_for_backward(y, w, d, coef)
            ctx.in_dtype = in_dtype
            ctx.pool = pool
            loss = 1 - value if cls.higher_is_better else value
            # Half inputs get a float32 loss, as autocast gives torch's own losses:
            # unbounded metrics (odds ratios) pass 65504 at their singular set.
            return loss.to(_wide(s.dtype)), support

        @staticmethod
        def backward(ctx: Any, grad: Tensor, _support_grad: Tensor | None = None
                     ) -> tuple[Tensor | None, ...]:
            y, w, d, coef = ctx.saved_tensors
            if ctx.pool is not None:
                # Every rank's loss depends on this rank's counts through the all-reduce.
                grad = ctx.pool.sum_grad(grad)
            # d loss / d a = sign * (y g1 + (1 - y) g0): two per-row scalars and
            # one elementwise pass, with no autograd graph through the sums. It runs in
            # the forward's working dtype (float32 at least): in half, a coefficient of
            # 1e5 times a dA/ds of 1e-10 would be inf * 0 = NaN instead of 1e-5.
            c1, c0 = (grad.to(coef.dtype) * coef).unsqueeze(-1).unbind()
            if y.is_floating_point():
                grad_s = torch.addcmul(c0, y, c1 - c0)
            else:  # class indices: c0 everywhere, c1 at each element's own class
                n, m = y.shape[0], y.shape[-1]
                grad_s = c0.expand(n, -1, m).contiguous()
                grad_s.scatter_(1, y, c1.reshape(-1)[y])
            if w is not None:
                grad_s = grad_s.mul_(w)
            if d is not None:
                grad_s = grad_s.mul_(d)
            return (_to_input_dtype(grad_s, ctx.in_dtype), *(None,) * 9)

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
