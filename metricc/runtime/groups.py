"""The group loss: soft 2 x 2 counts per group, the generated group kernel, its symbolic backward.

Torch-only, like the rest of the runtime (standalone files paste it after
:mod:`metricc.runtime.constrained`). A compiled group metric subclasses :class:`GroupLoss` and
fills in the two generated kernels ``group_value`` and ``group_and_gradient`` (``(TP, FP, FN,
TN, eps, tau)``, counts of shape ``(G,)``). The forward relaxes the predictions (the 2 x 2
relaxations), sums them into ``G x 4`` counts by group (group ids:
:mod:`metricc.runtime.group_counts`, with its symbolic backward; soft membership ``(N, G)``: one
matrix product, differentiated by autograd), optionally over ranks and past batches
(:class:`~metricc.runtime.distributed.CountPool`), and runs the kernel. Constraints of the
formula (``subject to gap(recall) <= 0.05``) enter as the augmented Lagrangian of
:mod:`metricc.runtime.constrained` (its ``psi``), with one multiplier each, stepped after every
training step at the hard predictions. No autograd runs through the kernel.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from ..errors import MetricError
from .constrained import psi
from .constraint_defaults import CONSTRAINED_DEFAULTS
from .constraint_state import ConstraintState
from .counts import wide_dtype
from .distributed import CountPool, recomputing, updates_state
from .group_counts import CountPlan, GroupCounts, group_counts
from .loss_base import StatisticLoss
from .options import check_number
from .relax import Relaxation, bound_relaxation, check_relaxation_options
from .sigmoids import stable_sigmoid
from .weights import validate_weight

#: The temperature at which the multiplier step reads the reductions: the exact max and min.
EXACT_TAU = 1e-9


def grp_reduce(kind: str, f: Tensor, ok: Tensor, tau: float, eps: float) -> tuple[Tensor, Tensor]:
    """A reduction over the last dim (groups) of ``f`` where ``ok``, and ``dr/df``.

    The smooth maximum is ``tau * logsumexp(f/tau)`` (monotone in every ``f_g``, at most
    ``tau log G`` above the maximum), the minimum its mirror; ``gap`` is their difference,
    ``ratio`` their quotient, ``groupmean`` the mean, ``vsrest`` the smooth maximum of ``|f|``
    (``f`` the differences to the rest). Groups outside ``ok`` have weight 0; none left: 0.

    >>> r, w = grp_reduce("gap", torch.tensor([0.2, 0.5]), torch.tensor([True, True]), 1e-6, 1e-7)
    >>> round(float(r), 6), w.tolist()
    (0.3, [-1.0, 1.0])
    """
    any_ok = ok.any(-1)
    if kind == "groupmean":
        k = ok.to(f.dtype)
        n = k.sum(-1).clamp_min(1.0)
        return torch.where(ok, f, 0.0).sum(-1) / n, k / n
    if kind == "vsrest":
        both = torch.cat([f, -f], -1)
        top, w2 = _smooth(both, torch.cat([ok, ok], -1), tau, any_ok)
        g = f.shape[-1]
        return top, w2[..., :g] - w2[..., g:]
    top, wt = _smooth(f, ok, tau, any_ok)
    low, wl = _smooth(-f, ok, tau, any_ok)
    low = -low
    if kind == "groupmax":
        return top, wt
    if kind == "worst":
        return low, wl
    if kind == "gap":
        return top - low, wt - wl
    if kind == "ratio":
        d = top + eps
        return low / d, wl / d - (low / (d * d)).unsqueeze(-1) * wt
    raise MetricError(f"internal: unknown group reduction {kind!r}")


def _smooth(f: Tensor, ok: Tensor, tau: float, any_ok: Tensor) -> tuple[Tensor, Tensor]:
    """``tau * logsumexp(f/tau)`` over ``ok`` and its softmax weights (0 where nothing is ok)."""
    z = torch.where(ok, f / tau, -math.inf)
    safe = torch.where(any_ok.unsqueeze(-1), z, 0.0)
    value = torch.where(any_ok, tau * torch.logsumexp(safe, -1), 0.0)
    w = torch.where(ok, torch.softmax(safe, -1), 0.0)
    return value, w


class GroupConstraintSpec(NamedTuple):
    """One constraint of a group formula, as checkpoints name it: ``label op bound``."""

    label: str
    op: str
    bound: float


def _group_function(cls: type[GroupLoss]) -> Any:
    """The ``torch.autograd.Function`` running the generated kernel on the ``(G, 4)`` counts;
    its backward is the kernel's own gradient (the Lagrangian's, with constraints)."""
    higher = cls.higher_is_better

    class SymbolicGroupMetric(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, counts: Tensor, lam: Tensor, eps: float, tau: float,
                    penalty: float) -> Tensor:
            tp, fp, fn, tn = counts.unbind(-1)
            value, *grads = cls.group_and_gradient(tp, fp, fn, tn, eps, tau)
            d = torch.stack(grads, -1)  # (J, G, 4)
            loss = 1 - value[0] if higher else value[0]
            dl = -d[0] if higher else d[0]
            if lam.numel():
                p, dp = psi(value[1:], lam.to(value.dtype), penalty)
                loss = loss + p.sum()
                dl = dl + (dp[:, None, None] * d[1:]).sum(0)
            ctx.save_for_backward(dl)
            return loss

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
            (dl,) = ctx.saved_tensors
            return grad.to(dl.dtype) * dl, None, None, None, None

    SymbolicGroupMetric.__name__ = SymbolicGroupMetric.__qualname__ = f"{cls.__name__}Function"
    return SymbolicGroupMetric


def check_groups(groups: Any, n: int, num_groups: int | None, validate: bool) -> int:
    """Refuse group ids or membership the loss would mis-train on; the number of groups."""
    err = MetricError
    if not isinstance(groups, Tensor):
        raise err(f"groups must be a tensor of group ids (N,) or memberships (N, G), got "
                  f"{type(groups).__name__}; pass groups=torch.as_tensor(...)")
    if groups.dtype == torch.bool or groups.is_complex():
        raise err(f"groups must hold integer group ids or float memberships, got {groups.dtype}")
    soft = groups.is_floating_point()
    want = (n, groups.shape[-1]) if soft else (n,)
    if tuple(groups.shape) != want or (soft and groups.dim() != 2):
        raise err(f"groups must be ids of shape ({n},) (one per prediction) or memberships of shape "
                  f"({n}, G), got {tuple(groups.shape)} {groups.dtype}")
    g = groups.shape[1] if soft else num_groups
    if soft and num_groups is not None and g != num_groups:
        raise err(f"num_groups={num_groups} but the memberships have {g} columns")
    if torch.compiler.is_compiling():
        if g is None:
            raise err("under torch.compile pass num_groups= to the loss (group ids are data)")
        return int(g)
    if validate and groups.numel():
        if soft:
            if not bool(torch.isfinite(groups).all()) or bool((groups < 0).any()):
                raise err("group memberships must be finite and >= 0")
            if not bool(torch.allclose(groups.sum(1), torch.ones((), dtype=groups.dtype), atol=1e-4)):
                raise err("each row of soft group memberships must sum to 1 (a probability of "
                          "belonging to each group); normalise them, e.g. m / m.sum(1, keepdim=True)")
        else:
            lo, hi = (int(v) for v in torch.aminmax(groups))
            if lo < 0 or (num_groups is not None and hi >= num_groups):
                raise err(f"group ids must lie in [0, {num_groups if num_groups is not None else 'G'}), "
                          f"got ids from {lo} to {hi}" + ("" if num_groups is not None else
                                                            "; ids must be >= 0"))
    if g is None:
        g = int(groups.max()) + 1 if groups.numel() else 1
    return int(g)


class GroupLoss(StatisticLoss, ConstraintState):
    """``1 - metric`` (or the metric, lower is better) of a group formula on soft counts per group.

    ``forward(input, target, groups, weight=None)``: ``input`` scores ``(N,)`` (probabilities,
    or logits with ``from_logits``), 0/1 ``target`` ``(N,)``, ``groups`` integer ids ``(N,)``
    or soft memberships ``(N, G)`` whose rows sum to 1, ``weight`` per sample. ``num_groups``
    fixes ``G`` (needed under ``torch.compile``, and to keep a group absent from a batch);
    otherwise ids give ``max + 1``. The relaxation (``"anyloss"`` with ``amplifier``, as
    constrained 2 x 2 losses, or ``"linear"``: the probability) turns scores into soft
    predictions; ``tau`` is the temperature of the smooth maximum and minimum over groups.
    Constraints of the formula train as an augmented Lagrangian (``multiplier_lr``,
    ``penalty``, ``max_multiplier``: the 2 x 2 constrained losses' defaults), stepped at the
    hard predictions (probability >= 0.5) after each training step. ``sync_dist`` sums the
    ``G x 4`` counts over ranks, ``memory_decay`` pools past batches' (training steps only).
    """

    #: ``(label, op, bound)`` per constraint of the formula, set by the facade.
    constraint_specs: ClassVar[tuple[tuple[str, str, float], ...]] = ()

    @staticmethod
    def group_value(TP: Tensor, FP: Tensor, FN: Tensor, TN: Tensor, eps: float, tau: float) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def group_and_gradient(TP: Tensor, FP: Tensor, FN: Tensor, TN: Tensor, eps: float, tau: float
                           ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._function = _group_function(cls)

    relax: Relaxation

    def __init__(
        self,
        relaxation: str = "anyloss",
        *,
        amplifier: float = CONSTRAINED_DEFAULTS["amplifier"],
        tau: float = 0.01,
        num_groups: int | None = None,
        from_logits: bool = False,
        eps: float = 1e-7,
        multiplier_lr: float = CONSTRAINED_DEFAULTS["multiplier_lr"],
        penalty: float = CONSTRAINED_DEFAULTS["penalty"],
        max_multiplier: float = CONSTRAINED_DEFAULTS["max_multiplier"],
        sync_dist: bool = False,
        process_group: Any = None,
        memory_decay: float | None = None,
        validate_args: bool = True,
    ) -> None:
        # the options, pool and repr every statistic's loss shares; the multipliers' casts and
        # checkpoints from ConstraintState (next in the MRO)
        super().__init__(from_logits=from_logits, reduction="mean", eps=eps, validate_args=validate_args,
                         sync_dist=sync_dist, process_group=process_group, memory_decay=memory_decay)
        if relaxation not in ("anyloss", "linear"):
            raise MetricError(f"relaxation={relaxation!r} is not one a group loss takes: 'anyloss' "
                              "(sigmoid(amplifier (p - 1/2)), the default) or 'linear' (p)")
        self.relax = bound_relaxation(relaxation, self.from_logits,
                                      check_relaxation_options({"amplifier": amplifier}))
        self.relaxation = relaxation
        self.tau = check_number("tau", tau, positive=True)
        if num_groups is not None and (isinstance(num_groups, bool) or not isinstance(num_groups, int)
                                       or num_groups < 1):
            raise MetricError(f"num_groups must be a positive int (or None), got {num_groups!r}")
        self.num_groups = num_groups
        self.multiplier_lr, self.penalty, self.max_multiplier = (check_number(k, v) for k, v in (
            ("multiplier_lr", multiplier_lr), ("penalty", penalty), ("max_multiplier", max_multiplier)))
        # the hard counts of the multiplier step, pooled as the relaxed ones
        self.hard_pool = None if self.pool is None else CountPool(sync_dist, process_group, memory_decay)
        self.constraints = tuple(GroupConstraintSpec(*c) for c in self.constraint_specs)
        self.labels = tuple(c.label for c in self.constraints)
        k = len(self.constraints)
        self.register_buffer("multipliers", torch.zeros(k, dtype=torch.float64))
        self.register_buffer("constraint_values", torch.full((k,), math.nan, dtype=torch.float64),
                             persistent=False)

    def repr_options(self) -> list[str]:
        parts = [f"relaxation={self.relaxation!r}", *(f"{k}={getattr(self.relax, k)!r}" for k in self.relax.options),
                 f"tau={self.tau!r}", f"num_groups={self.num_groups!r}", f"from_logits={self.from_logits}"]
        if self.constraints:
            parts += [f"constraints={list(self.labels)}", f"multiplier_lr={self.multiplier_lr}",
                      f"penalty={self.penalty}", f"max_multiplier={self.max_multiplier}"]
        return parts

    def forward(self, input: Tensor, target: Tensor, groups: Tensor | None = None,
                weight: Tensor | None = None) -> Tensor:
        """The loss (the Lagrangian with constraints); ``weight`` per sample."""
        if groups is None:
            raise MetricError("a group loss needs each sample's group: loss(input, target, groups) with "
                              "ids (N,) or memberships (N, G)")
        target = target.detach() if isinstance(target, Tensor) else target
        self.check_inputs(input, target, self.validate_args)
        if input.dim() > 2 or (input.dim() == 2 and input.shape[1] != 1):
            raise MetricError(f"a group loss takes one score per sample, input (N,) or (N, 1), got "
                              f"{tuple(input.shape)}; groups are given per sample")
        s, y = input.reshape(-1), target.reshape(-1)
        # bins need checked labels and a free host sync (eager, CPU); else scatter_add sums.
        # On the CPU with num_groups given, scatter_add's bounds check refuses an id outside
        # [0, G) (CountPlan raises the MetricError), so the ids need no scan of their own.
        binned = self.validate_args and s.device.type == "cpu" and not torch.compiler.is_compiling()
        scan = self.validate_args and not (binned and self.num_groups is not None and
                                           isinstance(groups, Tensor) and not groups.is_floating_point())
        g = check_groups(groups, s.shape[0], self.num_groups, scan)
        if groups.device != s.device:
            raise MetricError(f"groups are on {groups.device} but input on {s.device}; move both to one device")
        groups = groups.detach()
        w = None
        if weight is not None:  # one per sample, checked as every loss checks its weights
            w = validate_weight(weight, y, self.validate_args).expand_as(y)
        work = wide_dtype(input.dtype)
        update = updates_state(self)
        hard = (s.detach() >= (0.0 if self.from_logits else 0.5)) if self.constraints else None
        if groups.is_floating_point():  # soft membership: autograd through the (N, 4) products
            a = self.relax.value(s.to(work), self.from_logits, sigmoid=stable_sigmoid)
            counts = group_counts(a, y, w, groups, g)
            hard_counts = None if hard is None else group_counts(hard, y, w, groups, g)
        else:
            plan = CountPlan(y, w, groups, g, hard, binned)
            counts = GroupCounts.apply(s.to(work), plan, self.relax, self.from_logits)
            hard_counts = plan.hard_counts
        if self.pool is not None:
            counts = torch.stack(self.pool(tuple(counts.unbind(-1)), differentiable=True,
                                           update=update), -1)
        # Activation checkpointing runs this forward again inside the backward: that
        # recomputation must see the multipliers the step saw, and not step again (after a
        # first run under no_grad, use_reentrant=True's, the recomputation is the step).
        again = (not torch.compiler.is_compiling() and recomputing() and self.stepped_from is not None)
        lam = self.stepped_from if again else self.multipliers.detach().clone()
        assert lam is not None
        loss = self._function.apply(counts, lam, self.eps, self.tau, self.penalty)
        if hard_counts is not None and not again:  # a constrained loss
            self._step(hard_counts, update)
            if not torch.compiler.is_compiling():
                self.stepped_from = lam if update else None
        return loss.to(work)

    def _step(self, counts: Tensor, update: bool) -> None:
        """Record the constraints' values at the counts of the hard predictions (probability
        >= 0.5); in a training step, one projected ascent step ``lam <- clip(lam + multiplier_lr
        * v, 0, max_multiplier)``."""
        with torch.no_grad():
            if self.hard_pool is not None:
                counts = torch.stack(self.hard_pool(tuple(counts.unbind(-1)), update=update), -1)
            tp, fp, fn, tn = counts.unbind(-1)
            v = type(self).group_value(tp, fp, fn, tn, 0.0, EXACT_TAU)[1:]
            self.constraint_values.copy_(v)
            if update:
                step = torch.where(torch.isfinite(v), self.multiplier_lr * v, 0.0)
                self.multipliers.copy_((self.multipliers + step).clamp(0.0, self.max_multiplier))
