"""The curve loss: a soft ROC/PR curve, the generated curve kernel, and its symbolic backward.

Torch-only, like the rest of the runtime (standalone files paste it after
:mod:`metricc.runtime.curve`). A compiled curve metric subclasses :class:`CurveLoss` and fills
in the two generated kernels ``curve_value`` and ``curve_and_gradient`` (``(TP, FP, P, N, eps,
tau, tau_gate)``). The forward forms the soft curve ``TP[k], FP[k]`` of the batch
(:class:`~metricc.runtime.curve.SoftCurve`, ``O(n + T)``), optionally summed over ranks and
remembered over batches (:class:`~metricc.runtime.curve.CurvePool`), and runs the kernel; the
backward hands ``-dV/dTP, -dV/dFP`` (for higher-is-better metrics) to the soft curve's own
backward. No autograd runs through the kernel.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..errors import MetricError
from .counts import wide_dtype, zero_one
from .curve import CurvePool, CurveRelaxation, SoftCurve
from .loss_base import StatisticLoss
from .modes import look_up_mode
from .options import CURVE_DEFAULTS, DEFAULT_MODE, check_number, look_up_option
from .weights import validate_weight

#: The relaxations of a curve loss (one today: the soft histogram of :class:`CurveRelaxation`).
CURVE_RELAXATIONS = ("histogram",)
#: The modes a curve reads, in the order its messages list them (the loss's and the stateful
#: metric's).
CURVE_MODES = ("binary", "multilabel", "multiclass")
#: How per-class curves' losses combine: their mean, or weighted by each class's positives.
CURVE_AVERAGES = ("macro", "weighted")


class SmoothMax:
    """The temperatures of the smooth ``best()``: ``tau`` for the log-mean-exp over
    thresholds, ``tau_gate`` for the gate of a bound (``docs/curve.md``; defaults 0.01 and
    0.001 from :data:`~metricc.runtime.options.CURVE_DEFAULTS`, as the analysis's
    ``DEFAULT_TAU``, ``DEFAULT_TAU_GATE``). Immutable.

    >>> SmoothMax()
    SmoothMax(tau=0.01, tau_gate=0.001)
    """

    __slots__ = ("tau", "tau_gate")
    tau: float
    tau_gate: float

    def __init__(self, tau: float = CURVE_DEFAULTS["tau"],
                 tau_gate: float = CURVE_DEFAULTS["tau_gate"]) -> None:
        for name, value in (("tau", tau), ("tau_gate", tau_gate)):
            x = check_number(name, value, positive=True)
            if not 0 < x <= 10:
                raise MetricError(f"{name} must be in (0, 10] (a temperature on the metric's scale; "
                                  f"defaults tau={CURVE_DEFAULTS['tau']}, "
                                  f"tau_gate={CURVE_DEFAULTS['tau_gate']}), got {value!r}")
            object.__setattr__(self, name, x)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("SmoothMax is immutable; build a new one")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SmoothMax) and (self.tau, self.tau_gate) == (other.tau, other.tau_gate)

    def __hash__(self) -> int:
        return hash((self.tau, self.tau_gate))

    def __repr__(self) -> str:
        return f"SmoothMax(tau={self.tau!r}, tau_gate={self.tau_gate!r})"

    def __reduce__(self) -> tuple[type, tuple[float, float]]:
        return SmoothMax, (self.tau, self.tau_gate)


def _curve_function(cls: type[CurveLoss]) -> Any:
    """The ``torch.autograd.Function`` running the generated kernel: its backward is the
    kernel's own gradient, handed to the soft curve's backward."""
    higher = cls.higher_is_better

    class SymbolicCurveMetric(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, tp: Tensor, fp: Tensor, pos: Tensor, neg: Tensor, eps: float,
                    tau: float, tau_gate: float) -> Tensor:
            value, d_tp, d_fp = cls.curve_and_gradient(tp, fp, pos, neg, eps, tau, tau_gate)
            ctx.save_for_backward(d_tp, d_fp)
            return 1 - value if higher else value

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
            d_tp, d_fp = ctx.saved_tensors
            # loss = 1 - V: dL/dTP = -dV/dTP (P and N are constants of the batch)
            g = (-grad if higher else grad).to(d_tp.dtype).unsqueeze(-1)
            return g * d_tp, g * d_fp, None, None, None, None, None

    SymbolicCurveMetric.__name__ = SymbolicCurveMetric.__qualname__ = f"{cls.__name__}Function"
    return SymbolicCurveMetric


class CurveLoss(StatisticLoss):
    """``1 - metric`` (or the metric, lower is better) of a curve formula on the soft curve.

    ``forward(input, target, weight=None)``. ``mode="binary"``: ``input`` and ``target`` of one
    shape (or ``(N, 1, *)`` against ``(N, *)``), one curve of all elements. ``"multilabel"``:
    ``(N, C, *)`` both, one curve per class. ``"multiclass"``: ``(N, C, *)`` scores and ``(N, *)``
    class indices, one one-vs-rest curve per class of the class probabilities (a softmax over
    dim 1 of logits with ``from_logits``). Per-class losses combine by ``average`` (``"macro"``
    mean, ``"weighted"`` by each class's positives); ``reduction="none"`` returns them.
    The relaxation (``"histogram"``, or a :class:`CurveRelaxation`) has ``bins`` (256),
    ``width`` (1), ``space`` (``"probability"``) and ``clip`` (8); ``tau`` and ``tau_gate``
    are :class:`SmoothMax`'s. ``sync_dist`` sums the curve over ranks, ``memory_decay`` adds
    a decayed memory of past batches' curves, used in training mode and updated only in a
    training step (gradients enabled; read, not written, under ``no_grad`` or
    ``inference_mode``; ``docs/distributed.md``).
    """

    pool_class = CurvePool
    pool: CurvePool | None

    @staticmethod
    def curve_value(TP: Tensor, FP: Tensor, P: Tensor, N: Tensor, eps: float, tau: float,
                    tau_gate: float) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def curve_and_gradient(TP: Tensor, FP: Tensor, P: Tensor, N: Tensor, eps: float, tau: float,
                           tau_gate: float) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._function = _curve_function(cls)

    relax: CurveRelaxation

    def __init__(
        self,
        relaxation: str = "histogram",
        *,
        bins: int = CURVE_DEFAULTS["bins"],
        width: float = CURVE_DEFAULTS["width"],
        space: str = CURVE_DEFAULTS["space"],
        clip: float = CURVE_DEFAULTS["clip"],
        tau: float = CURVE_DEFAULTS["tau"],
        tau_gate: float = CURVE_DEFAULTS["tau_gate"],
        from_logits: bool = False,
        mode: str = DEFAULT_MODE,
        average: str = "macro",
        reduction: str = "mean",
        eps: float = 1e-7,
        sync_dist: bool = False,
        process_group: Any = None,
        memory_decay: float | None = None,
        validate_args: bool = True,
    ) -> None:
        super().__init__(from_logits=from_logits, reduction=reduction, eps=eps,
                         validate_args=validate_args, sync_dist=sync_dist,
                         process_group=process_group, memory_decay=memory_decay)
        if isinstance(relaxation, CurveRelaxation):
            grid = {"bins": bins, "width": width, "space": space, "clip": clip}
            if any(grid[k] != CURVE_DEFAULTS[k] for k in grid):
                raise MetricError("give the grid either as a CurveRelaxation or as bins/width/space/"
                                  "clip, not both")
            self.relax = relaxation
            relaxation = "histogram"
        else:
            look_up_option("relaxation", relaxation, CURVE_RELAXATIONS)
            self.relax = CurveRelaxation(bins=bins, width=width, space=space, clip=clip)
        self.relaxation = relaxation
        self.smooth_max = SmoothMax(tau, tau_gate)
        self.mode = look_up_mode(mode, CURVE_MODES)
        self.average = look_up_option("average", average, CURVE_AVERAGES)

    def repr_options(self) -> list[str]:
        """The grid, the smooth maximum, the mode and how the curves combine
        (:meth:`StatisticLoss.extra_repr` adds memory, sync and eps)."""
        return [repr(self.relax), repr(self.smooth_max), f"from_logits={self.from_logits}",
                f"mode={self.mode!r}", f"average={self.average!r}", f"reduction={self.reduction!r}"]

    def _columns(self, input: Tensor, target: Tensor, weight: Tensor | None
                 ) -> tuple[Tensor, Tensor, Tensor | None, bool]:
        """``(scores, labels, weights, from_logits)`` as ``(M,)`` (binary) or ``(N, C, *)``.

        The soft curve reads ``(N, C, *)`` in place, the class (dim 1) as its histogram row:
        no permute to ``(M, C)`` columns, and multiclass labels are a bool comparison with the
        class numbers rather than an int64 one-hot."""
        w = None if weight is None else validate_weight(weight, target, self.validate_args)
        if not self.mode.class_dim:
            # (N, 1, *) against (N, *) (single_channel) holds the same elements
            return input.reshape(-1), target.reshape(-1), None if w is None else w.reshape(-1), self.from_logits
        if input.dim() < 2 or input.shape[1] < 2:
            raise MetricError(f"mode={self.mode!r} needs input of shape (N, C, *) with C >= 2 classes "
                              f"on dim 1, got {tuple(input.shape)}; for one curve use mode='binary'")
        if not self.mode.exclusive:  # multilabel: a curve per class, as given
            return input, target, w, self.from_logits
        c = input.shape[1]
        # one-vs-rest curves rank the class probabilities
        s = torch.softmax(input, 1) if self.from_logits else input
        classes = torch.arange(c, device=target.device).view(c, *(1,) * (input.dim() - 2))
        y = target.unsqueeze(1) == classes
        w = None if w is None else w.unsqueeze(1).expand_as(input)
        return s, y, w, False

    def check_inputs(self, input: Tensor, target: Tensor, validate_args: bool) -> None:
        """The shared checks and hints of every loss, then the curve's own rule: multiclass
        targets are class indices."""
        super().check_inputs(input, target, validate_args)
        if not self.mode.exclusive:
            return
        index_shape = input.shape[:1] + input.shape[2:]
        if target.shape != index_shape or target.is_floating_point() or target.dtype == torch.bool:
            raise MetricError(f"mode='multiclass' needs target of integer class indices of shape "
                              f"{tuple(index_shape)} (the input's without dim 1), got "
                              f"{tuple(target.shape)} {target.dtype}; for one 0/1 label per class "
                              "use mode='multilabel'")

    def forward(self, input: Tensor, target: Tensor, weight: Tensor | None = None) -> Tensor:
        """The loss; ``weight`` per element (broadcastable to ``target``)."""
        target = target.detach() if isinstance(target, Tensor) else target
        self.check_inputs(input, target, self.validate_args)
        s, y, w, logits = self._columns(input, target, weight)
        work = wide_dtype(input.dtype)
        # 0/1 labels take the cheaper hard path, as bool labels; deciding needs the data, so a
        # traced graph (torch.compile) takes the soft path, which gives the same curve for them.
        hard = not y.is_floating_point()
        if not hard and not torch.compiler.is_compiling():
            positive = y != 0
            hard = zero_one(y, float(torch.count_nonzero(positive)))
            y = positive if hard else y
        curve: tuple[Tensor, Tensor, Tensor, Tensor] = SoftCurve.apply(
            s, y, None if w is None else w.to(work), self.relax, logits, hard)
        if self.pool is not None:
            curve = self.pool(curve)
        tp, fp, pos, neg = curve
        losses = self._function.apply(tp, fp, pos, neg, self.eps, self.smooth_max.tau,
                                      self.smooth_max.tau_gate)
        # float32 for half and bfloat16 input, as the 2 x 2 and K x K losses (docs/numerics.md)
        return self._combine(losses, pos).to(work)

    def _combine(self, losses: Tensor, pos: Tensor) -> Tensor:
        """One loss per curve (``(C,)``, or ``()`` in binary mode) combined by ``average``."""
        if losses.dim() == 0 or self.reduction == "none":
            return losses
        if self.average == "weighted":
            share = pos.detach() / pos.detach().sum().clamp_min(math.ulp(1.0))
            mean = (losses * share).sum()
        else:
            mean = losses.mean()
        return mean * losses.shape[0] if self.reduction == "sum" else mean
