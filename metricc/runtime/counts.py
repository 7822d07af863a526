"""Soft confusion counts and the dtype policy of the loss (what is summed and formed in which type)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

#: Elements per step where a loss sums by an index it builds (the soft curve's bins, the
#: groups' bins): a chunk's int64/float64 temporaries stay in cache, where whole-batch ones
#: cost more in page faults (a fresh 8 MB per 10^6 elements) than in arithmetic, and 16
#: steps per 10^6 elements cost little in Python.
CHUNK = 1 << 16


def zero_one(y: Tensor, count: float) -> bool:
    """Whether labels already checked to lie in [0, 1] are all 0 or 1, given ``count``: how many
    of them are 1, or how many are nonzero (whichever the caller has at hand).

    For 0/1 labels their sum equals either count exactly (a float32 sum of 0/1 values is exact
    below 2^24 elements; float64 above); a soft label moves the sum off both, above the first,
    below the second. One pass over ``y``, where ``((y == 0) | (y == 1)).all()`` made four. A
    soft label so close to 0 or 1 that the sum's rounding hides it is counted as 0 or 1: an
    error below that rounding.
    """
    if not y.is_floating_point():
        return True
    return float(y.sum(dtype=torch.float32 if y.numel() < 2**24 else torch.float64)) == count


def _sum_dtype(t: Tensor) -> torch.dtype:
    # float32 sums use pairwise (cascade) summation, good to ~1e-8 relative even
    # at 10^8 elements, and cost a fraction of a float64 sum (which first copies
    # the tensor to float64); half and bfloat16 are summed in float32.
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def soft_counts(a: Tensor, y: Tensor, w: Tensor | None, soft_label: bool = False
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``TP, FP, FN, TN`` of each row of ``a`` against ``y``, as float64.

    Rows are ``(R, M)``: one row per dim-0 index; or ``(N, R, M)``: row ``r``
    pools ``[:, r, :]`` (so classes need no transposed copy).
    ``TP = sum(w y a)``, ``FN = sum(w y) - TP``, ``FP = sum(w a) - TP``,
    ``TN = sum(w) - sum(w y) - FP``: three reductions instead of four products,
    each summed pairwise in float32 (or wider), then combined in float64.

    >>> a = torch.tensor([[0.9, 0.2, 0.6]]); y = torch.tensor([[1.0, 0.0, 0.0]])
    >>> [round(float(c), 4) for c in soft_counts(a, y, None)]
    [0.9, 0.8, 0.1, 1.2]
    """
    return masked_counts(a, y, w, overwrite=False, soft_label=soft_label)


def masked_counts(a: Tensor, y: Tensor, w: Tensor | None, overwrite: bool, soft_label: bool = False
            ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`soft_counts`; with ``overwrite`` it reuses ``a``'s memory for ``w a y``.

    ``y`` may also be ``(N, 1, M)`` integer class indices for ``(N, C, M)`` rows (see
    :func:`index_counts`).

    ``soft_label``: ``TP = sum(w min(a, y)) = (|a| + |y| - |a - y|) / 2``, hence
    ``FP = sum(w (a - y)+)``, ``FN = sum(w (y - a)+)``, ``TN = sum(w (1 - max(a, y)))``
    (Wang & Blaschko 2023): no FP or FN mass at ``a = y``. On 0/1 labels it is
    ``sum(w a y)``. ``a`` is then left as it is (the backward needs it).
    """
    if not y.is_floating_point():
        return index_counts(a, y)
    return derive_counts(*count_sums(a, y, w, overwrite, soft_label).unbind())


def derive_counts(tp: Any, pp: Any, pos: Any, total: Any) -> tuple[Any, Any, Any, Any]:
    """``TP FP FN TN`` from the sums of :func:`count_sums` (tensors or plain numbers)."""
    fp = pp - tp
    return tp, fp, pos - tp, total - pos - fp


def count_sums(a: Tensor, y: Tensor, w: Tensor | None, overwrite: bool,
               soft_label: bool = False) -> Tensor:
    """The sums behind :func:`masked_counts` on 0/1 (or soft) labels: ``(4, R)`` float64 rows
    ``TP``, ``sum(w a)``, ``sum(w y)``, ``sum(w)``, from which ``FP FN TN`` follow."""
    acc = _sum_dtype(a)
    dims = (0, 2) if a.dim() == 3 else -1
    if soft_label:
        overlap = torch.minimum(a, y)
        tp = (overlap if w is None else overlap.mul_(w)).sum(dims, dtype=acc)
        pp = (a if w is None else a * w).sum(dims, dtype=acc)
    else:
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
    return torch.stack((tp, pp, pos, total)).to(torch.float64)


def overlap_share(a: Tensor, y: Tensor, g1: Tensor, g0: Tensor) -> Tensor:
    """``u = d min(a, y) / d a``: 1 where ``a < y``, 0 where ``a > y``; at ties, a subgradient.

    The metric's derivative in ``a`` is ``u g1 + (1 - u) g0`` (``g1``, ``g0``: one
    per row). Where ``a = y`` every ``u`` in ``[0, 1]`` gives a subgradient; the one
    taken is the point of that segment nearest 0 (``u = -g0 / (g1 - g0)``, clipped),
    which is 0 at the optimum ``a = y`` of every metric that rises with TP and falls
    with FP and FN (Tversky with ``alpha != beta`` included).

    >>> overlap_share(torch.tensor([[0.2, 0.5, 0.9]]), torch.tensor([[0.5, 0.5, 0.5]]),
    ...               torch.tensor([1.0]), torch.tensor([-3.0])).tolist()
    [[1.0, 0.75, 0.0]]
    """
    diff = (g1 - g0).unsqueeze(-1)
    safe = torch.where(diff != 0, diff, torch.ones_like(diff))
    tie = torch.where(diff != 0, -g0.unsqueeze(-1) / safe, 0.5).clamp(0.0, 1.0).to(a.dtype)
    # (a < y) + (a == y) tie, not nested torch.where: on the CPU where branches per
    # element, ~3 ns each where a < y is as random as it is here (20x a multiply)
    return torch.addcmul((a < y).to(a.dtype), (a == y).to(a.dtype), tie)


def on_host(t: Tensor) -> bool:
    """True on the CPU in eager mode, where data-dependent kernels (``bincount``,
    ``scatter``) are fast; under ``torch.compile`` or on a GPU, fused elementwise
    forms are faster (and ``bincount`` would sync a GPU)."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def host_indices(y: Tensor) -> bool:
    """Class indices for ``gather``/``bincount``/``scatter``: :func:`compact_indices`'
    int64 ones on the CPU in eager mode (validated). Compact ones traced for a compiled
    graph take the fused forms also when a graph break (``memory_decay``) runs them
    eagerly, as those kernels need int64."""
    return y.dtype == torch.int64 and on_host(y)


def compact_indices(t: Tensor, classes: int) -> Tensor:
    """Class indices as :func:`index_counts` and the loss's backward take them.

    On the CPU in eager mode: int64 (``bincount`` and ``scatter`` index with them).
    Elsewhere the smallest integer type that holds ``-1 .. classes``, with indices
    outside ``[0, classes)`` mapped to ``-1`` or ``classes`` (still no class): the
    backward recompares them with each class, and ``torch.compile`` keeps the smaller
    tensor for it instead of a boolean ``(N, C, M)`` one-hot, whose stores and loads
    its CPU code does one element at a time; it also stores them once for the loops
    that read them instead of reconverting the int64 target in each.

    >>> compact_indices(torch.tensor([0, 2]), 3).dtype  # on the CPU, eager
    torch.int64
    """
    if on_host(t):
        return t.long()
    dtype = torch.int8 if classes < 127 else torch.int16 if classes < 32767 else torch.int32
    small = t.clamp(-1, classes).to(dtype)
    # A no-op view whose lowering needs a real buffer: it makes Inductor store the small
    # indices once instead of recomputing them from the int64 target in every loop that
    # reads them (one per class for the counts): compiled 3-D Dice 6.6 -> 5.5 ms.
    return small.as_strided(small.shape, small.stride())


def indices_in_range(t: Tensor, classes: int) -> bool:
    """Whether ``t`` holds integer class indices, all in ``[0, classes)`` (one pass)."""
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool or t.numel() == 0:
        return False
    lo, hi = torch.aminmax(t)
    return bool(lo >= 0) and bool(hi < classes)


def index_hits(y: Tensor, classes: int) -> Tensor:
    """``(N, C, M)`` bool: ``y == c`` for each class ``c``, for :func:`compact_indices`.

    Compared as float32 (exact for every index it holds): ``torch.compile``'s CPU code
    vectorizes a float comparison but converts small-integer masks one element at a time.
    """
    labels = torch.arange(classes, device=y.device, dtype=torch.float32).view(1, classes, 1)
    return y.to(torch.float32) == labels


def own_rows(y: Tensor) -> Tensor:
    """``(N, M)`` positions of each element's own class in its sample's ``(C M,)`` row.

    For :func:`index_counts`' int64 class indices ``y`` (``(N, 1, M)``, in ``[0, C)``):
    ``a.view(N, C M).gather(1, rows)`` is ``a.gather(1, y)``, and a ``scatter`` along
    rows writes where ``scatter(1, y, ...)`` does. On the CPU the row forms run two to
    three times faster when ``M`` is large (measured at ``(2, 4, 64^3)``: gather 0.33 ms
    against 0.97 ms), which pays for building the index.

    >>> own_rows(torch.tensor([[[1, 0]]])).tolist()  # (N, C, M) = (1, 2, 2)
    [[2, 1]]
    """
    n, m = y.shape[0], y.shape[-1]
    return torch.add(torch.arange(m, device=y.device), y.view(n, m), alpha=m)


def gather_own(a: Tensor, rows: Tensor) -> Tensor:
    """``a.gather(1, y)`` (``(N, 1, M)``) by :func:`own_rows`' ``rows``."""
    n, k, m = a.shape
    return a.reshape(n, k * m).gather(1, rows).view(n, 1, m)


def index_counts(a: Tensor, y: Tensor, gathered: Tensor | None = None
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`soft_counts` of ``(N, C, M)`` rows against class indices ``y`` (``(N, 1, M)``).

    The one-hot labels are never built. On the CPU in eager mode (indices validated
    to lie in ``[0, C)``), ``TP`` of class ``c`` sums ``a`` at the elements labelled
    ``c`` (one gather and a float64 scatter-add over ``N M`` elements instead of a
    product and a sum over ``N C M``), and the support is a ``bincount`` of the labels;
    elsewhere ``TP`` and ``FN`` are sums of ``y == c`` products, which ``torch.compile``
    fuses into the pass that sums ``a`` (an index outside ``[0, C)`` counts for no
    class), and the support is ``TP + FN``.
    ``TP`` and ``sum(a)`` are summed separately, so ``FP = sum(a) - TP`` can come out
    a rounding error below 0 where it is 0: ``FP`` and ``TN`` are clamped at 0.

    >>> a = torch.tensor([[[0.5, 0.25], [0.5, 0.75]]])  # (N, C, M) = (1, 2, 2)
    >>> [c.tolist() for c in index_counts(a, torch.tensor([[[0, 1]]]))]
    [[0.5, 0.75], [0.25, 0.5], [0.5, 0.25], [0.75, 0.5]]
    """
    c = a.shape[1]
    flat = y.reshape(-1)
    acc = _sum_dtype(a)
    if host_indices(y):
        pp = a.sum((0, 2), dtype=acc).to(torch.float64)
        # a at each element's class, summed per class: a scatter-add into float64 runs
        # about a third faster than a weighted bincount (which scans for min and max)
        own = gather_own(a, own_rows(y)) if gathered is None else gathered
        tp = torch.zeros(c, dtype=torch.float64, device=a.device).scatter_add_(
            0, flat, own.reshape(-1).to(torch.float64))
        pos = torch.bincount(flat, minlength=c).to(torch.float64)
    else:
        hit = index_hits(y, c)
        # FN = sum(y (1 - a)) is summed in TP's loop: a sum of the labels alone would be
        # a separate loop over them, once per class, in the fused code.
        sums = (a.sum((0, 2), dtype=acc), torch.where(hit, a, 0.0).sum((0, 2), dtype=acc),
                torch.where(hit, 1 - a, 0.0).sum((0, 2), dtype=acc))
        pp, tp, fn = torch.stack(sums).to(torch.float64).unbind()
        pos = tp + fn
    fp = (pp - tp).clamp_min(0)
    fn = pos - tp
    tn = (float(flat.numel()) - pos - fp).clamp_min(0)
    return tp, fp, fn, tn


def graph_kept() -> bool:
    """Whether the running backward keeps the graph (``retain_graph``/``create_graph``),
    so that saved tensors will be read again; True outside a backward, or where this
    torch does not say."""
    keep = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    return True if keep is None else bool(keep())


def count_adjoint(y: Tensor, w: Tensor | None, d: Tensor | None, c1: Tensor, c0: Tensor
                  ) -> Tensor:
    """The backward of the counts: ``(c0 + (c1 - c0) y) w d`` for every element.

    ``c1``, ``c0`` (``(R, 1)``) are each row's ``d loss / d a`` at label 1 and 0; ``y`` holds
    the labels, or class indices (``c1`` at each element's own class); ``w`` the element
    weights and ``d`` = ``dA/ds``, either ``None`` for 1. ``d`` may be overwritten where no
    later backward reads it.
    """
    if y.is_floating_point() and on_host(y) and c0.numel() == 1:
        return row_adjoint(y, w, d, float(c1), float(c0))
    if y.is_floating_point():
        grad_s = torch.mul(y, c1 - c0).add_(c0)
    elif host_indices(y):  # class indices: c1 at each one's class, else c0
        n, m = y.shape[0], y.shape[-1]
        grad_s = c0.expand(n, -1, m).contiguous()
        # index_select, not c1[y]: advanced indexing is several times slower
        own = c1.reshape(-1).index_select(0, y.reshape(-1)).view(n, m)
        grad_s.view(n, c1.shape[0] * m).scatter_(1, own_rows(y), own)
    else:  # the same as one fused pass, without a scatter's scalar stores
        grad_s = torch.where(index_hits(y, c1.shape[0]), c1, c0)
    if w is not None:
        grad_s = grad_s.mul_(w)
    if d is not None:
        grad_s = grad_s.mul_(d)
    return grad_s


def row_adjoint(y: Tensor, w: Tensor | None, d: Tensor | None, c1: float, c0: float
                ) -> Tensor:
    """:func:`count_adjoint` of one row with plain-number coefficients (on the CPU, two
    vectorized passes of what ``addcmul`` with broadcast tensor operands does several
    times slower)."""
    a0, a1 = c0, c1 - c0
    if d is not None and a0 != 0 and abs(a1) < 1e30 * abs(a0):
        # d (1 + y a1 / a0) a0; in place where d is needed by no later
        # backward: a fresh buffer costs page faults on every use.
        grad_s = (torch.addcmul(d, d, y, value=a1 / a0) if graph_kept()
                  else d.addcmul_(d, y, value=a1 / a0)).mul_(a0)
    elif d is not None:
        grad_s = torch.mul(d, a0).addcmul_(d, y, value=a1)
    else:
        grad_s = torch.mul(y, a1).add_(a0)
    return grad_s if w is None else grad_s.mul_(w)


def as_count_rows(x: Tensor | float, like: Tensor) -> Tensor:
    """A kernel output as a float64 tensor shaped like ``like``.

    Generated kernels return plain numbers for constant parts (``g1 = 0`` for
    a metric without TP or FN); autograd and ``save_for_backward`` need tensors.
    """
    if isinstance(x, Tensor) and x.shape == like.shape and x.dtype == like.dtype:
        return x  # the usual case; building a copy costs more than the kernel itself
    return torch.zeros_like(like) + x


def wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """``dtype``, or float32 for half and bfloat16: the type losses and gradients are formed in."""
    return torch.promote_types(dtype, torch.float32)


HALF_MAX = torch.finfo(torch.float16).max


def to_input_dtype(grad: Tensor, dtype: torch.dtype) -> Tensor:
    """Cast a float32 gradient back to the input's dtype, saturating at float16's 65504.

    Near the singular set the guarded metric's gradient reaches ``~1/eps``; as
    float16 that would be ``inf``, and ``inf`` turns into NaN one layer up.
    """
    if dtype == torch.float16:
        grad = grad.clamp(-HALF_MAX, HALF_MAX)
    return grad.to(dtype)
