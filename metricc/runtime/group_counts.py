"""Soft 2 x 2 counts per group (``(G, 4)`` float64 ``TP FP FN TN``) and their symbolic backward.

Torch-only (standalone files paste it before :mod:`metricc.runtime.groups`). Two ways to sum
by hard group id, equal to float64 rounding:

* **bins** (on the CPU in eager mode, 0/1 labels, checked ids): each sample's bin is ``2 g +
  y`` (``4 g + 2 y + h`` with the hard predictions ``h`` of a constrained loss), so one
  ``bincount`` of the relaxed predictions gives ``TP`` and ``FP`` of every group, and one
  unweighted ``bincount`` the labels per group (and the hard counts); the backward gathers
  one ``(2 G,)`` table by bin. About four passes over the batch, the 2 x 2 loss's count.
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


def _sums(values: Tensor, groups: Tensor, g: int) -> Tensor:
    """``(G,)`` float64 sums by group id (``scatter_add``: on the CPU twice ``index_add``'s speed)."""
    return torch.zeros(g, dtype=F64, device=values.device).scatter_add_(0, groups, values)


def _from_sums(tp: Tensor, pp: Tensor, pos: Tensor, total: Tensor) -> Tensor:
    fp = pp - tp
    return torch.stack([tp, fp, pos - tp, total - pos - fp], -1)


def _hard_labels(y: Tensor) -> Tensor | None:
    """Labels in [0, 1] (checked by the caller) as int32 0/1, or ``None`` if some is soft."""
    yi = y.to(torch.int32)
    return None if y.is_floating_point() and not torch.equal(yi.to(y.dtype), y) else yi


class CountPlan:
    """How one batch is summed by group (see the module): its labels, weights, ids and bins.

    ``hard``: the hard predictions of a constrained loss (bool ``(N,)``), counted at once
    (:attr:`hard_counts`); ``binned``: use bins where the labels are 0/1 (the caller says the
    ids and the labels, in [0, 1], are checked, and that host syncs are free: eager, CPU).
    """

    def __init__(self, y: Tensor, w: Tensor | None, groups: Tensor, g: int, hard: Tensor | None,
                 binned: bool) -> None:
        self.g, self.groups = g, groups
        self.w = None if w is None else w.to(F64)
        self.hard_counts: Tensor | None = None
        yi = _hard_labels(y) if binned else None
        self.bins: Tensor | None = None
        if yi is not None:
            bins = torch.add(yi, groups.to(torch.int32), alpha=2)  # 2 g + y
            if hard is None:
                n = torch.bincount(bins, self.w, minlength=2 * g).to(F64).view(g, 2)
            else:
                b4 = torch.add(hard.to(torch.int32), bins, alpha=2)  # 4 g + 2 y + h
                n4 = torch.bincount(b4, self.w, minlength=4 * g).to(F64).view(g, 2, 2)
                n = n4.sum(-1)  # [NEG, POS] per group
                self.hard_counts = torch.stack([n4[:, 1, 1], n4[:, 0, 1], n4[:, 1, 0], n4[:, 0, 0]], -1)
            self.bins, self.labels = bins, n
            self.y = yi
            return
        self.y = y
        yw = y.to(F64) if self.w is None else y.to(F64) * self.w
        total = (_sums(torch.ones((), dtype=F64, device=y.device).expand(y.shape[0]), groups, g)
                 if self.w is None else _sums(self.w, groups, g))
        self.yw, self.pos, self.total = yw, _sums(yw, groups, g), total
        if hard is not None:
            self.hard_counts = self.counts(hard)

    def counts(self, a: Tensor) -> Tensor:
        """``(G, 4)`` float64 counts ``TP FP FN TN`` of predictions ``a`` (any dtype)."""
        ad = a.to(F64)
        aw = ad if self.w is None else ad * self.w
        if self.bins is not None:
            s = torch.bincount(self.bins, aw, minlength=2 * self.g).view(self.g, 2)  # [FP, TP]
            tp, fp = s[:, 1], s[:, 0]
            return torch.stack([tp, fp, self.labels[:, 1] - tp, self.labels[:, 0] - fp], -1)
        return _from_sums(_sums(ad * self.yw, self.groups, self.g), _sums(aw, self.groups, self.g),
                          self.pos, self.total)

    def adjoint(self, c1: Tensor, c0: Tensor, dtype: torch.dtype) -> Tensor:
        """``w (c0 + y (c1 - c0))`` per sample, from the ``(G,)`` tables ``c1``, ``c0``."""
        if self.bins is not None:
            out = torch.stack([c0, c1], -1).reshape(-1).to(dtype).index_select(0, self.bins)
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
