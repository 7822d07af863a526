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

    def extra_repr(self) -> str:
        return (f"relaxation={self.relaxation!r}, amplifier={self.amplifier}, "
                f"from_logits={self.from_logits}, backward={self.backward_mode!r}, "
                f"multidim_average={self.multidim_average!r}, reduction={self.reduction!r}")

    def _relax_args(self) -> tuple[str, float, float, float, bool]:
        return self.relaxation, self.amplifier, self.slope, self.offset, self.from_logits

    def row_losses(self, s: Tensor, y: Tensor, w: Tensor | None = None) -> Tensor:
        """Loss of each row of ``(R, M)`` scores against ``(R, M)`` labels, shape ``(R,)``."""
        if self.backward_mode == "symbolic":
            return self._function.apply(s, y, w, *self._relax_args(), self.eps)
        a = relax(s, *self._relax_args())
        value = self.metric_value(*soft_counts(a, y, w), self.eps)
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
                    eps: float) -> Tensor:
            a = relax(s, relaxation, amplifier, slope, offset, from_logits)
            value, g1, g0 = cls.metric_and_coefficients(*soft_counts(a, y, w), eps)
            ctx.save_for_backward(s, y, w, g1, g0)
            ctx.relax_args = (relaxation, amplifier, slope, offset, from_logits)
            loss = 1 - value if cls.higher_is_better else value
            return loss.to(s.dtype)

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
            s, y, w, g1, g0 = ctx.saved_tensors
            # d loss / d a = sign * (y g1 + (1 - y) g0): two per-row scalars and
            # one elementwise pass, with no autograd graph through the sums.
            scale = grad.to(g1.dtype) * sign
            c1 = (scale * g1).to(s.dtype).unsqueeze(-1)
            c0 = (scale * g0).to(s.dtype).unsqueeze(-1)
            coef = c0 + y * (c1 - c0)
            if w is not None:
                coef = coef * w
            grad_s = coef * relax_grad(s, *ctx.relax_args)
            return (grad_s, None, None, None, None, None, None, None, None)

    SymbolicMetric.__name__ = SymbolicMetric.__qualname__ = f"{cls.__name__}Function"
    return SymbolicMetric
