"""The constrained loss module: one metric optimised subject to bounds on others; torch only.

``maximise g subject to h_k >= b_k`` (or ``<=``) is trained as the augmented
Lagrangian (Powell-Hestenes-Rockafellar form) of the relaxed counts ``C``::

    L(C, lam) = (1 - g(C)) + sum_k psi(v_k(C), lam_k)
    v_k = b_k - h_k(C)   for >=,   h_k(C) - b_k   for <=   (v_k > 0: violated)
    psi(v, lam) = lam v + rho/2 v^2    if lam + rho v >= 0
                  -lam^2 / (2 rho)     otherwise            (psi = lam v when rho = 0)

The optimiser minimises ``L`` over the model; the module itself takes one step
of projected gradient ascent on the multipliers after each training forward,
``lam_k <- clip(lam_k + eta v_k, 0, max_multiplier)``, with ``v_k`` from the hard
(thresholded) counts by default: the proxy-Lagrangian of Cotter et al., whose
constraint is the one the model is judged by. ``docs/constraints.md`` says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..errors import MetricError
from .constraint_defaults import CONSTRAINED_DEFAULTS, StallWatch, watch_stall
from .constraint_state import ConstraintState
from .counts import (
    as_count_rows,
    count_sums,
    derive_counts,
    masked_counts,
    on_host,
    soft_counts,
    to_input_dtype,
    wide_dtype,
)
from .distributed import CountPool, recomputing, updates_state
from .loss import MetricLoss
from .loss_base import check_rows
from .modes import BINARY, class_rows, validate_inputs
from .options import check_number, look_up_option
from .relax import Relaxation
from .sigmoids import stable_sigmoid
from .symbolic import host_gradient, host_row, host_values

MULTIPLIER_RATES = ("hard", "relaxed")


class ConstraintSpec(NamedTuple):
    """One constraint for :class:`ConstrainedLoss`: ``kernels``' metric ``op`` ``bound``.

    ``kernels`` is a compiled ``MetricLoss`` subclass (only its two generated
    kernels are used); ``op`` is ``">="`` or ``"<="``; ``label`` names it in logs.
    """

    label: str
    kernels: type[MetricLoss]
    op: str
    bound: float

    def __reduce__(self) -> tuple[Any, ...]:
        # A generated kernels class lives in no importable module: pickle it as the recipe
        # that compiles it again (set by metricc.compile), or by name where it has none.
        recipe = getattr(self.kernels, "_class_recipe", None)
        if recipe is None:
            return (ConstraintSpec, tuple(self))
        return (_rebuilt_spec, (self.label, *recipe, self.op, self.bound))


def _rebuilt_spec(label: str, rebuild: Any, args: tuple[Any, ...], op: str, bound: float
                  ) -> ConstraintSpec:
    """Unpickle a :class:`ConstraintSpec` whose kernels class is compiled again."""
    return ConstraintSpec(label, rebuild(*args), op, bound)


class _Terms(NamedTuple):
    """Everything the forward needs besides the tensors (one object, so apply() stays short)."""

    objective: type[MetricLoss]
    constraints: tuple[ConstraintSpec, ...]
    penalty: float
    relax: Relaxation
    from_logits: bool
    eps: float


def _sense(op: str) -> float:
    return 1.0 if op == ">=" else -1.0


class _HostFallback(Exception):
    """A kernel's float twin met counts where torch's result is not finite (or has none)."""


def _kernel(cls: type[MetricLoss], counts: tuple[Any, ...], eps: float, coefficients: bool,
            host: bool) -> tuple[Any, ...]:
    """``(value, g1, g0)`` (``(value,)`` without ``coefficients``) of the kernels class
    ``cls``: float64 rows shaped like the counts, or with ``host`` Python floats from the
    kernels' twins (``symbolic.host_twin``), raising :class:`_HostFallback` where those
    would not equal the tensors'."""
    if host:
        twin = cls._host_coefficients if coefficients else cls._host_value
        out = None if twin is None else host_values(twin, counts, eps)
        if out is None:
            raise _HostFallback
        return out
    tp, fp, fn, tn = counts
    rows = (cls.metric_and_coefficients(tp, fp, fn, tn, eps) if coefficients
            else (cls.metric_value(tp, fp, fn, tn, eps),))
    return tuple(as_count_rows(x, counts[0]) for x in rows)


def psi(v: Any, lam: Any, rho: float) -> tuple[Any, Any]:
    """``(psi(v, lam), d psi / d v)`` of the augmented Lagrangian (see the module docstring),
    on tensors or on Python floats."""
    if rho == 0:
        return lam * v, lam
    t = lam + rho * v
    on, off = lam * v + 0.5 * rho * v * v, -lam * lam / (2 * rho)
    if isinstance(t, Tensor):
        return torch.where(t >= 0, on, off), t.clamp(min=0)
    return (on if t >= 0 else off), max(t, 0.0)


def _lagrangian(terms: _Terms, counts: tuple[Any, ...], lam: Any, coefficients: bool,
                host: bool = False) -> tuple[Any, Any, Any]:
    """``(L, c1, c0)`` at pooled counts: the loss per row and (with ``coefficients``)
    ``dL/da = y c1 + (1 - y) c0`` per row. With ``host``, one row on Python floats
    (``counts`` and ``lam`` numbers, see :func:`_kernel`)."""
    obj, eps = terms.objective, terms.eps
    sign = -1.0 if obj.higher_is_better else 1.0
    value, *g = _kernel(obj, counts, eps, coefficients, host)
    c1, c0 = (sign * g[0], sign * g[1]) if coefficients else (None, None)
    loss = 1 - value if obj.higher_is_better else value
    for j, spec in enumerate(terms.constraints):
        sense = _sense(spec.op)
        h, *dh = _kernel(spec.kernels, counts, eps, coefficients, host)
        term, dpsi = psi(sense * (spec.bound - h), lam[j] if host else lam[:, j].to(h.dtype),
                         terms.penalty)
        loss = loss + term
        if coefficients:
            # dv/dh = -sense, so d psi/d a = -sense * dpsi * dh/da.
            c1 = c1 - sense * dpsi * dh[0]
            c0 = c0 - sense * dpsi * dh[1]
    return loss, c1, c0


class _ConstrainedFunction(torch.autograd.Function):
    """The Lagrangian with a backward from the metrics' symbolic partials, as
    ``MetricLoss``'s own: one elementwise pass, the coefficients of the objective
    and of every constraint summed into one pair per row."""

    @staticmethod
    def forward(ctx: Any, s: Tensor, y: Tensor, w: Tensor | None, lam: Tensor, terms: _Terms,
                pool: CountPool | None, update: bool) -> tuple[Tensor, Tensor]:
        in_dtype = s.dtype
        work = wide_dtype(in_dtype)
        if work != in_dtype:
            s, y = s.to(work), y.to(work)
            w = None if w is None else w.to(work)
        a, d, k = terms.relax.value_and_derivative(s, terms.from_logits)
        ctx.in_dtype, ctx.pool, ctx.scale, ctx.host = in_dtype, pool, k, None
        if pool is None and host_row(a, y):  # one row on the CPU: see symbolic.host_twin
            sums = count_sums(a, y, w, overwrite=a is not s)
            counts = derive_counts(*sums.view(-1).tolist())
            try:
                loss, c1, c0 = _lagrangian(terms, counts, lam.view(-1).tolist(), True, host=True)
            except _HostFallback:
                counts = derive_counts(*sums.unbind())
            else:
                ctx.host = (k * c1, k * c0)
                ctx.save_for_backward(y, w, d)
                pooled = torch.tensor([counts], dtype=torch.float64)
                ctx.mark_non_differentiable(pooled)
                return torch.full((1,), loss, dtype=work), pooled
        else:
            counts = masked_counts(a, y, w, overwrite=a is not s)
        if pool is not None:
            counts = pool(counts, update=update)
        loss, c1, c0 = _lagrangian(terms, counts, lam, coefficients=True)
        ctx.save_for_backward(y, w, d, c1, c0)
        pooled = torch.stack(counts, -1)
        ctx.mark_non_differentiable(pooled)
        return loss.to(work), pooled

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _counts_grad: Tensor) -> tuple[Tensor | None, ...]:
        if ctx.host is not None:
            return host_gradient(ctx, grad), None, None, None, None, None, None
        y, w, d, c1, c0 = ctx.saved_tensors
        if ctx.pool is not None:
            grad = ctx.pool.sum_grad(grad)
        scale = grad.to(c1.dtype) * ctx.scale
        a1 = (scale * c1).to(y.dtype).unsqueeze(-1)
        a0 = (scale * c0).to(y.dtype).unsqueeze(-1)
        grad_s = torch.addcmul(a0, y, a1 - a0)
        if w is not None:
            grad_s = grad_s.mul_(w)
        if d is not None:
            grad_s = grad_s.mul_(d)
        return to_input_dtype(grad_s, ctx.in_dtype), None, None, None, None, None, None


class ConstrainedLoss(ConstraintState):
    """The Lagrangian of ``objective`` subject to ``constraints``, with its own multipliers.

    ``forward(input, target)`` takes what the objective's loss takes (binary
    mode, one confusion matrix per batch) and returns ``(1 - g) + sum_k psi_k``
    (``g`` itself when lower is better). After each forward in training mode
    with gradients enabled (a training step; not under ``no_grad``,
    ``inference_mode`` or ``eval()``), each multiplier takes one projected
    ascent step ``lam_k <- clip(lam_k + multiplier_lr * v_k, 0, max_multiplier)``.
    ``v_k`` is the violation at the hard predictions (``multiplier_rates="hard"``:
    probability >= 0.5, the decision threshold the model is meant for) or at
    the relaxed counts (``"relaxed"``); a constraint undefined on the batch
    (recall without positives) leaves its multiplier unchanged.

    The counts behind ``g`` and every ``h_k`` are the same, pooled once by the
    objective's ``sync_dist``/``memory_decay``; the hard counts are pooled the
    same way, so every rank takes the same multiplier step. The memory follows the
    multipliers' rule: updated in a training step only, read under ``no_grad``. Under
    activation checkpointing both step once per step (with ``use_reentrant=True`` in the
    recomputation, the first forward running under ``no_grad``).
    ``multipliers`` and ``constraint_values`` (the last values seen, the ones
    the step used) are buffers; ``multipliers`` is in ``state_dict``.
    :meth:`log_dict` gives both by constraint label, for a logger.
    """

    multipliers: Tensor
    constraint_values: Tensor
    #: Warns once when a constraint stalls (None until the first step, and in old pickles).
    stall: StallWatch | None = None

    def __init__(self, objective: MetricLoss, constraints: Sequence[ConstraintSpec], *,
                 multiplier_lr: float = CONSTRAINED_DEFAULTS["multiplier_lr"],
                 penalty: float = CONSTRAINED_DEFAULTS["penalty"],
                 max_multiplier: float = CONSTRAINED_DEFAULTS["max_multiplier"],
                 multiplier_rates: str = CONSTRAINED_DEFAULTS["multiplier_rates"]) -> None:
        super().__init__()
        err = MetricError
        if not constraints:
            raise err("ConstrainedLoss needs at least one constraint")
        if objective.mode.class_dim or objective.multidim_average != "global":
            raise err("constraints apply to one confusion matrix per batch: they need "
                      "mode='binary' and multidim_average='global' (got "
                      f"mode={objective.mode!r}, multidim_average={objective.multidim_average!r})")
        multiplier_lr, penalty, max_multiplier = (check_number(name, value) for name, value in (
            ("multiplier_lr", multiplier_lr), ("penalty", penalty), ("max_multiplier", max_multiplier)))
        look_up_option("multiplier_rates", multiplier_rates, MULTIPLIER_RATES)
        self.objective = objective
        self.constraints = tuple(constraints)
        self.labels = tuple(c.label for c in self.constraints)
        self.multiplier_lr = multiplier_lr
        self.penalty = penalty
        self.max_multiplier = max_multiplier
        self.multiplier_rates = multiplier_rates
        k = len(self.constraints)
        self.register_buffer("multipliers", torch.zeros(k, dtype=torch.float64))
        # The last values, for logging: not state worth a checkpoint.
        self.register_buffer("constraint_values", torch.full((k,), math.nan, dtype=torch.float64),
                             persistent=False)
        pool = objective.pool
        # Hard counts pooled like the relaxed ones: global under sync_dist, remembered
        # under memory_decay, so the multiplier step sees the same data as the gradient.
        self.hard_pool = None if pool is None else CountPool(
            pool.sync_dist, pool.process_group, pool.memory_decay)
        # What activation checkpointing's recomputation of a step uses (see row_losses).
        self.stepped_from = None

    def extra_repr(self) -> str:
        return (f"constraints={list(self.labels)}, multiplier_lr={self.multiplier_lr}, "
                f"penalty={self.penalty}, max_multiplier={self.max_multiplier}, "
                f"multiplier_rates={self.multiplier_rates!r}")

    def reset_memory(self) -> None:
        """Forget the counts of past batches (objective and constraints alike)."""
        self.objective.reset_memory()
        if self.hard_pool is not None:
            self.hard_pool.reset()

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        obj = self.objective
        # An empty shard under sync_dist joins the all-reduce with zero counts, as in MetricLoss.
        validate_inputs(input, target, BINARY, obj.from_logits, obj.ignore_index,
                        obj.validate_args, allow_empty=obj.pool is not None and obj.pool.sync_dist)
        r = class_rows(input, target, BINARY, obj.from_logits, obj.ignore_index, None, None,
                       need_hard=False)
        w = None if r.mask is None else r.mask.to(r.s.dtype).reshape(1, -1)
        return self._row_losses(r.s.reshape(1, -1), r.y.reshape(1, -1), w)[0]

    def _lam(self, rows: int) -> Tensor:
        """The multipliers as ``(rows, K)`` float64; a fresh module adopts ``rows``."""
        lam = self.multipliers
        k = len(self.constraints)
        if lam.numel() != rows * k:
            if bool((lam != 0).any()):
                raise MetricError(
                    f"the multipliers belong to {lam.numel() // k} confusion matrices but this "
                    f"call has {rows}; call reset_multipliers() when the rows change")
            shape = (k,) if rows == 1 else (rows, k)
            self.multipliers = torch.zeros(shape, dtype=torch.float64, device=lam.device)
            self.constraint_values = torch.full_like(self.multipliers, math.nan)
        # a copy: the step below updates the buffer in place, the graph keeps this one
        return self.multipliers.to(torch.float64).reshape(rows, k).clone()

    def row_losses(self, s: Tensor, y: Tensor, w: Tensor | None = None) -> Tensor:
        """The Lagrangian of each row of ``(R, M)`` scores against labels, shape ``(R,)``.

        Each row is its own confusion matrix with its own multipliers (the
        buffer then has shape ``(R, K)``): many models trained side by side.
        ``w``: weights of the scores' shape, or ``None``.
        """
        check_rows(s, y, w, dims=(2,))
        return self._row_losses(s, y, w)

    def _row_losses(self, s: Tensor, y: Tensor, w: Tensor | None) -> Tensor:
        """:meth:`row_losses` of checked rows (the forward's own are)."""
        obj = self.objective
        # Activation checkpointing runs this forward again inside the backward: that
        # recomputation must see the multipliers the step saw, and must not step again.
        # (use_reentrant=True runs the first forward under no_grad, which does not step and
        # clears stepped_from: its recomputation is then the step.)
        again = (not torch.compiler.is_compiling() and recomputing()
                 and self.stepped_from is not None)
        update = updates_state(self)  # a training step: decided before the no_grad parts
        lam = self.stepped_from if again else self._lam(s.shape[0])
        terms = _Terms(type(obj), self.constraints, self.penalty, obj.count_relax,
                       obj.from_logits, obj.eps)
        if obj.backward_mode == "symbolic":
            loss, pooled = _ConstrainedFunction.apply(s, y, w, lam, terms, obj.pool, update)
        else:
            work = wide_dtype(s.dtype)
            a = obj.count_relax.value(s.to(work), obj.from_logits, sigmoid=stable_sigmoid)
            counts = soft_counts(a, y.to(work), None if w is None else w.to(work))
            if obj.pool is not None:
                counts = obj.pool(counts, differentiable=True, update=update)
            loss = _lagrangian(terms, counts, lam, coefficients=False)[0].to(work)
            pooled = torch.stack(counts, -1).detach()
        if again:
            return loss
        with torch.no_grad():
            if self.multiplier_rates == "hard":
                pooled = self._hard_counts(s, y, w, update)
            values = self._constraint_values(pooled)
        assert lam is not None  # not `again`: lam is self._lam(...), a tensor
        self._step(values, lam, update)
        return loss

    def _constraint_values(self, pooled: Tensor) -> Tensor:
        """``(R, K)``: each constraint's metric at the pooled ``(R, 4)`` counts, exact
        (``eps = 0``): a constraint undefined there (recall with no positive) reads NaN
        (or inf) and leaves its multiplier alone."""
        if pooled.shape[0] == 1 and on_host(pooled):
            counts = tuple(pooled.view(-1).tolist())
            try:  # one row on the CPU: the kernels' float twins, as in the forward
                values = [_kernel(c.kernels, counts, 0.0, False, True)[0]
                          for c in self.constraints]
            except _HostFallback:
                pass
            else:
                return torch.tensor([values], dtype=torch.float64)
        return torch.stack([_kernel(c.kernels, tuple(pooled.unbind(-1)), 0.0, False, False)[0]
                            for c in self.constraints], -1)

    def _hard_counts(self, s: Tensor, y: Tensor, w: Tensor | None, update: bool) -> Tensor:
        """The pooled ``(R, 4)`` counts of the hard predictions (remembered in a training
        step, ``update``)."""
        work = wide_dtype(s.dtype)  # called under no_grad (row_losses)
        hard = (s >= (0.0 if self.objective.from_logits else 0.5)).to(work)
        counts = masked_counts(hard, y.to(work), None if w is None else w.to(work),
                               overwrite=True)
        if self.hard_pool is not None:
            counts = self.hard_pool(counts, update=update)
        return torch.stack(counts, -1)

    def _step(self, values: Tensor, lam: Tensor, training_step: bool) -> None:
        """Record the values; in a training step, one projected ascent step on the multipliers."""
        with torch.no_grad():
            shape = self.multipliers.shape
            self.constraint_values.copy_(values.reshape(shape))
            if not training_step:
                if self.training:
                    self.stepped_from = None  # see row_losses: a recomputation now steps
                return
            self.stepped_from = lam
            sense = torch.tensor([_sense(c.op) for c in self.constraints], dtype=torch.float64,
                                 device=lam.device)
            bound = torch.tensor([c.bound for c in self.constraints], dtype=torch.float64,
                                 device=lam.device)
            v = sense * (bound - values.to(torch.float64))
            step = torch.where(torch.isfinite(v), self.multiplier_lr * v, 0.0)
            new = (lam + step).clamp(0.0, self.max_multiplier)
            self.multipliers.copy_(new.reshape(shape).to(self.multipliers.dtype))
        watch_stall(self, v, new)
