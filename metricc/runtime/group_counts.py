"""Soft 2 x 2 counts per group (``(G, 4)`` float64 ``TP FP FN TN``) and their symbolic backward.

Torch-only (standalone files paste it before :mod:`metricc.runtime.groups`). Two ways to sum
by hard group id, equal to float64 rounding:

* **bins** (on the CPU in eager mode, 0/1 labels): each sample's bin is ``2 g + y`` (``4 g +
  2 y + h`` with the hard predictions ``h`` of a constrained loss), so one float64
  ``scatter_add`` of the relaxed predictions gives ``TP`` and ``FP`` of every group, and one
  of ones the labels per group (and the hard counts); the backward gathers one ``(2 G,)``
  table by bin. About five passes over the batch beside the relaxation's, where the 2 x 2
  loss makes two or three. (``bincount`` does the same sums but scans its bins twice more
  for their range, and ``torch.equal`` on a float copy of the labels cost two more passes.)
* **sums** (anywhere else: soft labels, CUDA, ``torch.compile``, unchecked ids): ``TP =
  sum(w y a)``, ``PP = sum(w a)``, ``sum(w y)``, ``sum(w)`` per group with ``scatter_add``
  (branch-free, no host sync); ``FP FN TN`` follow. The backward gathers two ``(G,)`` tables.

Either way ``dL/ds = k d w (c0 + y (c1 - c0))``, with ``c1 = dL/dTP - dL/dFN`` and ``c0 =
dL/dFP - dL/dTN`` of the sample's group and ``dA/ds = k d`` from the relaxation's ``pair`` (the
2 x 2 losses' backward): no autograd graph through the sums, where autograd through a ``(N,
4)`` float64 stack of the four products took several times the time.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import MetricError
from .counts import CHUNK, zero_one
from .relax import Relaxation

F64 = torch.float64


def group_counts(a: Tensor, y: Tensor, w: Tensor | None, groups: Tensor, num_groups: int) -> Tensor:
    """``(G, 4)`` float64 counts ``TP FP FN TN`` per group of relaxed predictions ``a``, for group
    ids ``(N,)`` or soft memberships ``(N, G)`` (differentiable by autograd).

    >>> group_counts(torch.tensor([0.9, 0.2, 0.6]), torch.tensor([1.0, 0.0, 1.0]), None,
    ...              torch.tensor([0, 1, 1]), 2).round(decimals=6).tolist()
    [[0.9, 0.0, 0.1, 0.0], [0.6, 0.2, 0.4, 0.8]]
    """
    a, y = a.to(F64), y.to(F64)
    one = torch.ones_like(a) if w is None else w.to(F64)
    pos, neg = one * y, one * (1 - y)
    parts = torch.stack([pos * a, neg * a, pos * (1 - a), neg * (1 - a)], -1)
    if groups.is_floating_point():  # soft membership (N, G)
        return groups.to(F64).transpose(0, 1) @ parts
    return torch.zeros(num_groups, 4, dtype=F64, device=a.device).index_add(0, groups, parts)


def _scatter_sums(out: Tensor, index: Tensor, values: Tensor, groups: Tensor, g: int) -> Tensor:
    """``out.scatter_add_(0, index, values)``; on the CPU its bounds check, which refuses an
    index outside ``out`` (a group id outside ``[0, G)``), raised as a :class:`MetricError`.
    (On CUDA a bad index is a device assert: there the ids are scanned first.)"""
    if torch.compiler.is_compiling() or out.device.type != "cpu":
        return out.scatter_add_(0, index, values)
    try:
        return out.scatter_add_(0, index, values)
    except RuntimeError as e:
        lo, hi = (int(v) for v in torch.aminmax(groups))
        raise MetricError(f"group ids must lie in [0, {g}), got ids from {lo} to {hi}") from e


def _sums(values: Tensor, groups: Tensor, g: int) -> Tensor:
    """``(G,)`` float64 sums by group id (``scatter_add``: on the CPU twice ``index_add``'s speed)."""
    return _scatter_sums(torch.zeros(g, dtype=F64, device=values.device), groups, values, groups, g)


def _from_sums(tp: Tensor, pp: Tensor, pos: Tensor, total: Tensor) -> Tensor:
    fp = pp - tp
    return torch.stack([tp, fp, pos - tp, total - pos - fp], -1)


def _bins(y: Tensor, groups: Tensor) -> Tensor:
    """Each sample's bin ``2 g + y`` (int64), for labels taken as 0 or 1 (:func:`~metricc.runtime.counts.zero_one`)."""
    return y.to(torch.int64, copy=True).add_(groups, alpha=2)  # fresh: the add is in place


class CountPlan:
    """How one batch is summed by group (see the module): its labels, weights, ids and bins.

    ``hard``: the hard predictions of a constrained loss (bool ``(N,)``), whose counts
    :attr:`hard_counts` holds once :meth:`counts` has run; ``binned``: try the bins (the caller
    says the labels are checked to lie in [0, 1] and that host syncs are free: eager, CPU);
    labels found soft fall back to the sums. ``scatter_add``'s own bounds check on the CPU
    refuses a group id outside ``[0, G)`` (a bin outside ``[0, 2 G)``), so on the bins path
    the caller may skip its scan of the ids.
    """

    def __init__(self, y: Tensor, w: Tensor | None, groups: Tensor, g: int, hard: Tensor | None,
                 binned: bool) -> None:
        self.g, self.groups, self.y, self.hard = g, groups, y, hard
        self.w = None if w is None else w.to(F64)
        self.hard_counts: Tensor | None = None
        # label smoothing shows in the first chunk: no bins computed for nothing
        head = y[:CHUNK]
        self.binned = binned and zero_one(head, float(head.to(torch.int64).sum()))
        if not self.binned:
            self._sums_plan()

    def _sums_plan(self) -> None:
        y, g = self.y, self.g
        yw = y.to(F64) if self.w is None else y.to(F64) * self.w
        total = (_sums(torch.ones((), dtype=F64, device=y.device).expand(y.shape[0]), self.groups, g)
                 if self.w is None else _sums(self.w, self.groups, g))
        self.yw, self.pos, self.total = yw, _sums(yw, self.groups, g), total
        if self.hard is not None:
            self.hard_counts = self._summed(self.hard)

    def counts(self, a: Tensor) -> Tensor:
        """``(G, 4)`` float64 counts ``TP FP FN TN`` of predictions ``a`` (any dtype)."""
        if self.binned:
            out = self._binned(a)
            if out is not None:
                return out
            self.binned = False  # soft labels past the first chunk
            self._sums_plan()
        return self._summed(a)

    def _summed(self, a: Tensor) -> Tensor:
        ad = a.to(F64)
        aw = ad if self.w is None else ad * self.w
        return _from_sums(_sums(ad * self.yw, self.groups, self.g), _sums(aw, self.groups, self.g),
                          self.pos, self.total)

    def _binned(self, a: Tensor) -> Tensor | None:
        """The counts by bin, chunk by chunk, or ``None`` if some label is soft."""
        g, w, hard = self.g, self.w, self.hard
        size = 2 * g if hard is None else 4 * g
        pred = torch.zeros(2 * g, dtype=F64)
        lab = torch.zeros(size, dtype=F64)  # how many samples per (group, label[, hard])
        wlab = None if w is None else torch.zeros(size, dtype=F64)
        one = torch.ones((), dtype=F64)
        for start in range(0, a.shape[0], CHUNK):
            part = slice(start, start + CHUNK)
            bins = _bins(self.y[part], self.groups[part])
            lbins = bins if hard is None else torch.add(hard[part], bins, alpha=2)  # 4 g + 2 y + h
            _scatter_sums(lab, lbins, one.expand(bins.shape[0]), self.groups, g)  # checks the ids
            v = a[part].to(F64)
            if w is not None and wlab is not None:
                wlab.scatter_add_(0, lbins, w[part])
                v.mul_(w[part])
            pred.scatter_add_(0, bins, v)
        if not zero_one(self.y, float(lab.view(g, 2, -1)[:, 1].sum())):
            return None
        n = (lab if wlab is None else wlab).view(g, 2, -1)
        if hard is not None:
            self.hard_counts = torch.stack([n[:, 1, 1], n[:, 0, 1], n[:, 1, 0], n[:, 0, 0]], -1)
        n = n.sum(-1)  # [NEG, POS] per group
        tp, fp = pred[1::2], pred[0::2]
        return torch.stack([tp, fp, n[:, 1] - tp, n[:, 0] - fp], -1)

    def adjoint(self, c1: Tensor, c0: Tensor, dtype: torch.dtype) -> Tensor:
        """``w (c0 + y (c1 - c0))`` per sample, from the ``(G,)`` tables ``c1``, ``c0``."""
        if self.binned:
            table = torch.stack([c0, c1], -1).reshape(-1).to(dtype)
            out = torch.empty(self.y.shape[0], dtype=dtype)
            for start in range(0, out.shape[0], CHUNK):
                part = slice(start, start + CHUNK)
                torch.index_select(table, 0, _bins(self.y[part], self.groups[part]), out=out[part])
        else:
            out = torch.addcmul(c0.to(dtype).index_select(0, self.groups), self.y.to(dtype),
                                (c1 - c0).to(dtype).index_select(0, self.groups))
        return out if self.w is None else out.mul_(self.w.to(dtype))


class GroupCounts(torch.autograd.Function):
    """Soft counts ``(G, 4)`` of scores ``s`` relaxed by ``relax``, summed by a
    :class:`CountPlan`, with the symbolic backward of the module's docstring."""

    @staticmethod
    def forward(ctx: Any, s: Tensor, plan: CountPlan, relax: Relaxation, from_logits: bool) -> Tensor:
        a, d, k = relax.value_and_derivative(s, from_logits)
        ctx.plan, ctx.k, ctx.dtype = plan, k, s.dtype
        ctx.save_for_backward(d)
        return plan.counts(a)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        (d,) = ctx.saved_tensors
        c1 = (grad[:, 0] - grad[:, 2]) * ctx.k
        c0 = (grad[:, 1] - grad[:, 3]) * ctx.k
        grad_s = ctx.plan.adjoint(c1, c0, ctx.dtype)
        return (grad_s if d is None else grad_s.mul_(d)), None, None, None
