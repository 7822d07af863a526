"""``StatisticLoss``: what the runtime loss of every statistic shares.

The 2x2 :class:`~metricc.runtime.loss.MetricLoss`, the K x K
:class:`~metricc.runtime.matrix.MatrixLoss` and the curve's
:class:`~metricc.runtime.curve_loss.CurveLoss` subclass it. It holds, once: the class
attributes a compiled metric fills in (``formula``, ``source``, ``higher_is_better``), the
options every statistic takes and their checks (``from_logits``, ``reduction``, ``eps``,
``validate_args``; ``backward`` and ``multidim_average`` where the statistic has them), the
sync and memory pool (``sync_dist``, ``process_group``, ``memory_decay``,
:mod:`metricc.runtime.distributed`), the input validation entry (:meth:`~StatisticLoss.validate`,
:meth:`~StatisticLoss.check_inputs`), :meth:`~StatisticLoss.reset_memory` and the repr.

Each loss keeps its own ``__init__`` signature (``Metric.loss()`` and standalone files read
it) and passes the shared options on to ``StatisticLoss.__init__``. The attributes are
those the losses held before there was a base, so pickles of older versions still load.
Torch-only, like the rest of the runtime (standalone files paste it before the losses).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import MetricError
from .distributed import CountPool, count_pool
from .modes import BINARY, Mode, look_up_mode, validate_inputs
from .options import check_flag, check_number, look_up_option


def check_rows(s: Any, y: Any, w: Any, dims: tuple[int, ...] = (2, 3)) -> None:
    """The inputs of ``row_losses``: ``(R, M)`` floating-point scores (``(N, R, M)`` where
    ``dims`` has 3), labels and weights (or ``None``) of the same shape."""
    if not all(isinstance(t, Tensor) for t in (s, y, *(() if w is None else (w,)))):
        raise MetricError("row_losses(s, y, w) takes tensors: scores, labels and (optional) "
                          f"weights, got {type(s).__name__}, {type(y).__name__} and "
                          f"{type(w).__name__}")
    shapes = " or ".join(("(R, M)", "(N, R, M)")[:len(dims)])
    if s.dim() not in dims or not s.is_floating_point():
        raise MetricError(
            f"row_losses takes floating-point scores of shape {shapes} (one confusion matrix "
            f"per row r), got {s.dtype} of shape {tuple(s.shape)}; for one batch call the "
            "loss itself (loss(input, target)), or pass s.reshape(1, -1) for one row")
    if y.shape != s.shape or not y.is_floating_point():
        raise MetricError(f"row_losses needs floating-point 0/1 (or soft) labels of the scores' "
                          f"shape {tuple(s.shape)}, got {y.dtype} of shape {tuple(y.shape)}; "
                          "use y.to(s.dtype)")
    if w is not None and (w.shape != s.shape or not w.is_floating_point()):
        raise MetricError(f"row_losses needs floating-point weights of the scores' shape "
                          f"{tuple(s.shape)} (or None), got {w.dtype} of shape "
                          f"{tuple(w.shape)}; use w.expand_as(s).to(s.dtype)")


class StatisticLoss(torch.nn.Module):
    """The base of every statistic's runtime loss: shared options, pool, input checks, repr.

    Not a loss by itself: a subclass forms its statistic from the batch and runs its
    generated kernels in ``forward``. ``pool`` is ``None`` unless ``sync_dist`` or
    ``memory_decay`` asks for one (then a :attr:`pool_class`); ``reset_memory()`` empties it.
    """

    formula: ClassVar[str] = ""
    source: ClassVar[str] = ""  # the generated kernels, for reading
    higher_is_better: ClassVar[bool] = True
    _function: ClassVar[Any] = None  # the autograd Function running the kernels (per class)
    pool_class: ClassVar[type[CountPool]] = CountPool  # sums over ranks, remembers batches
    #: What the shared checks read where a loss lacks the option (K x K: multiclass; curve: no index).
    mode: Mode = BINARY
    ignore_index: int | None = None
    backward_mode: str | None = None  # "symbolic" or "autograd", where the loss offers the choice

    def __init__(self, *, from_logits: bool, reduction: str, eps: float, validate_args: bool,
                 sync_dist: bool, process_group: Any, memory_decay: float | None,
                 multidim_average: str | None = None, backward: str | None = None) -> None:
        super().__init__()
        self.from_logits = check_flag("from_logits", from_logits)
        if backward is not None:
            self.backward_mode = look_up_option("backward", backward)
        if multidim_average is not None:
            self.multidim_average = look_up_option("multidim_average", multidim_average)
        self.reduction = look_up_option("reduction", reduction)
        self.eps = check_number("eps", eps)
        self.validate_args = check_flag("validate_args", validate_args)
        self.pool = count_pool(sync_dist, process_group, memory_decay, multidim_average or "global",
                               self.pool_class)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle; the mode comes back as its name (``Mode`` pickles as its string, and
        older pickles hold the string): its object again."""
        super().__setstate__(state)
        if "mode" in state:
            self.__dict__["mode"] = look_up_mode(state["mode"])

    def check_inputs(self, input: Tensor, target: Tensor, validate_args: bool) -> None:
        """The input checks every statistic shares (types, devices, shapes of the mode, and
        with ``validate_args`` the data: NaN/inf, ranges, class indices, the hints);
        a statistic with rules of its own adds them around this call. Under ``sync_dist`` an
        empty shard passes: it must still join the all-reduce (the other ranks wait for it)."""
        validate_inputs(input, target, self.mode, self.from_logits, self.ignore_index, validate_args,
                        allow_empty=self.pool is not None and self.pool.sync_dist)

    def validate(self, input: Tensor, target: Tensor) -> None:
        """Run every input check now, ``validate_args`` or not, and return ``None``.

        The data checks are skipped while ``torch.compile`` traces the loss; call
        this once eagerly on a real batch to check what a compiled loss will see.
        """
        self.check_inputs(input, target, True)

    def reset_memory(self) -> None:
        """Forget the statistics of past batches (``memory_decay``): every pool this loss holds
        (a constrained group loss pools its hard counts too); a no-op without memory."""
        for pool in [m for m in self.modules() if isinstance(m, CountPool)]:
            pool.reset()

    def repr_options(self) -> list[str]:
        """The statistic's own options in use, first in the repr (``name=value`` each)."""
        return [f"from_logits={self.from_logits}"]

    def extra_repr(self) -> str:
        """The options in use: the statistic's own, then the memory and sync options that
        are set, ``eps``, the backward, and ``validate_args`` when off; a formula (rather than
        a metric's name) first."""
        parts = self.repr_options()
        if self.pool is not None:
            if self.pool.memory_decay is not None:
                parts.append(f"memory_decay={self.pool.memory_decay!r}")
            if self.pool.sync_dist:
                parts.append("sync_dist=True")
        parts.append(f"eps={self.eps!r}")
        if self.backward_mode is not None:
            parts.append(f"backward={self.backward_mode!r}")
        if not self.validate_args:
            parts.append("validate_args=False")
        if not type(self).formula.isidentifier():  # a formula, not a metric's name
            parts.insert(0, f"formula={type(self).formula!r}")
        return ", ".join(parts)
