"""A ``torchmetrics.Metric`` from a compiled formula: :meth:`metricc.Metric.metric`.

The metric a model trains on (``Metric.loss``) and the one it is evaluated and
logged with come from the same formula. The states are the hard-label
confusion counts ``TP, FP, FN, TN`` of each class (integers, summed over
batches and, through torchmetrics' state sync, over ranks), so the value is
exact for the whole epoch and the whole global batch; ``compute()`` applies the
formula's generated value function and the averaging rules. Needs the optional
``torchmetrics`` package (``pip install "metricc[torchmetrics]"``).

>>> import torch, metricc
>>> f1 = metricc.compile("f1").metric()
>>> f1.update(torch.tensor([0.9, 0.2, 0.7]), torch.tensor([1, 0, 0]))
>>> f1.update(torch.tensor([0.1, 0.8]), torch.tensor([1, 1]))
>>> round(float(f1.compute()), 4)   # TP=2, FP=1, FN=1 over both batches
0.6667
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric as _TorchMetric
from torchmetrics.utilities.data import dim_zero_cat

from ..errors import MetricError
from ..runtime.averages import class_average_weights
from ..runtime.modes import Mode, look_up_mode
from ..runtime.options import MULTIDIM_AVERAGES, check_class_options, check_flag, select_classes
from .counts import check_01_preds, multiclass_hard_rows, multilabel_hard_rows
from .matrix import hard_confusion_matrix
from .scale import probabilities

__all__ = ["ABSENT_CLASSES", "MatrixStatefulMetric", "StatefulMetric"]

#: Values of ``absent_classes``: how ``macro`` (and ``weighted``) averages treat a
#: class with no target and no prediction (``TP + FP + FN = 0``).
ABSENT_CLASSES = ("torchmetrics", "skip", "include")
_STATES = ("tp", "fp", "fn", "tn")
_CALL = "update takes (preds, target)"  # for the swapped-arguments hint


class _ShapeCheckedSync(_TorchMetric):
    """Compare the state's shape over the ranks before torchmetrics gathers it: a rank that
    counted another number of classes then gets a MetricError on every rank, where torch's
    "stack expects each tensor to be equal size" came before."""

    is_differentiable = False
    full_state_update = False

    def _sync_dist(self, dist_sync_fn: Any = None, process_group: Any = None) -> None:
        from ..runtime.distributed import same_shape_on_every_rank

        group = process_group or self.process_group
        state = next((getattr(self, a) for a in self._defaults
                      if isinstance(getattr(self, a), Tensor)), None)
        if state is not None:  # list states (samplewise) are concatenated, any length
            same_shape_on_every_rank(state, group, torch.distributed.get_world_size(group))
        if dist_sync_fn is None:
            super()._sync_dist(process_group=process_group)
        else:
            super()._sync_dist(dist_sync_fn, process_group)


class StatefulMetric(_ShapeCheckedSync):
    """A compiled metric on hard labels, accumulated over batches and ranks.

    Built by :meth:`metricc.Metric.metric`, which documents the options.
    ``update(preds, target)`` adds a batch's confusion counts; ``compute()``
    returns the metric (a float64 tensor: a scalar, ``(K,)`` per class for
    ``average="none"``, ``(N,)`` or ``(N, K)`` per sample with
    ``multidim_average="samplewise"``); ``reset()`` empties the counts.
    """

    def __init__(self, value: Callable[..., Tensor], formula: str, higher_is_better: bool,
                 undefined: Sequence[str] = (), *, mode: str | Mode,
                 num_classes: int | None = None,
                 threshold: float = 0.5, from_logits: bool = False, average: str = "macro",
                 multidim_average: str = "global", ignore_index: int | None = None,
                 classes: Any = None, class_weights: Any = None,
                 zero_division: float | None = 0.0, absent_classes: str = "torchmetrics",
                 validate_args: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        err = MetricError
        mode = look_up_mode(mode)
        ignore_index, cl, cw = check_class_options(mode, average, ignore_index, classes,
                                                   class_weights)
        if multidim_average not in MULTIDIM_AVERAGES:
            raise err(f"multidim_average={multidim_average!r} is not one of "
                      f"{', '.join(map(repr, MULTIDIM_AVERAGES))}")
        if absent_classes not in ABSENT_CLASSES:
            raise err(f"absent_classes={absent_classes!r} is not one of "
                      f"{', '.join(map(repr, ABSENT_CLASSES))}")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
                or not 0 <= threshold <= 1:
            raise err(f"threshold must be a number in [0, 1] (a probability; with "
                      f"from_logits=True it applies after the sigmoid), got {threshold!r}")
        if zero_division is not None and (isinstance(zero_division, bool)
                                          or not isinstance(zero_division, (int, float))):
            raise err(f"zero_division must be a number, float('nan') or None (raise), got "
                      f"{zero_division!r}")
        if not isinstance(from_logits, bool):
            raise err(f"from_logits must be True or False, got {from_logits!r}")
        if not mode.class_dim:
            if num_classes not in (None, 1):
                raise err("num_classes is for mode='multiclass' and 'multilabel'; mode='binary' "
                          "has one class")
            num_classes = 1
        else:
            if num_classes is None:
                raise err(f"mode={mode!r} needs num_classes=<C> (the size of the class dimension): "
                          "the counts are kept per class from the first batch on")
            if isinstance(num_classes, bool) or not isinstance(num_classes, int) or \
                    num_classes < mode.min_classes:
                raise err(f"num_classes must be an integer >= {mode.min_classes} "
                          f"for mode={mode!r}, got {num_classes!r}")
        chosen, weights = select_classes(num_classes, cl, cw)
        self.formula = formula.strip()
        # torchmetrics makes higher_is_better a read-only class constant; here it is the
        # formula's, fixed at construction (MetricTracker and checkpoint callbacks read it).
        object.__setattr__(self, "higher_is_better", bool(higher_is_better))
        #: ``(tp, fp, fn, tn, zero_division=) -> values``, the formula on exact counts; a bound
        #: ``Metric.value`` pickles as its formula (``Metric.__reduce__``) and is compiled
        #: again where it lands (Lightning pickles metrics for spawn/DDP).
        self._value = value
        #: The denominators whose zero makes the formula undefined (for zero_division=None).
        self._undefined = tuple(undefined)
        self.mode: Mode = mode
        self.num_classes = num_classes
        self.threshold = float(threshold)
        self.from_logits = check_flag("from_logits", from_logits)
        self.average = average
        self.multidim_average = multidim_average
        self.ignore_index = ignore_index
        self.classes = chosen
        self.class_weights = None if weights is None else tuple(weights)
        self.zero_division = None if zero_division is None else _zero_division(zero_division)
        self.absent_classes = absent_classes
        self.validate_args = check_flag("validate_args", validate_args)
        k = 1 if not mode.class_dim else len(chosen) if chosen is not None else num_classes
        for name in _STATES:
            if multidim_average == "global":
                self.add_state(name, torch.zeros(k, dtype=torch.long), dist_reduce_fx="sum")
            else:
                self.add_state(name, [], dist_reduce_fx="cat")

    @property
    def compiled(self) -> Any:
        """Deprecated (removed in 0.3): the :class:`metricc.Metric` whose ``value`` this
        metric evaluates; it holds the formula's value function, not the facade."""
        warnings.warn("StatefulMetric.compiled is deprecated and will be removed in 0.3; the "
                      "metric keeps its formula (.formula) and value function only",
                      DeprecationWarning, stacklevel=2)
        return self._value.__self__  # type: ignore[attr-defined]

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "_compiled" in state:  # pickled by 0.1, which kept the facade
            compiled = state.pop("_compiled")
            state["_value"], state["_undefined"] = compiled.value, ()
        super().__setstate__(state)
        # the mode pickles as its name (and older pickles hold the string): its object again
        self.__dict__["mode"] = look_up_mode(state["mode"])

    def extra_repr(self) -> str:
        opts = [f"{self.formula!r}", f"mode={self.mode!r}"]
        if self.mode.class_dim:
            opts += [f"num_classes={self.num_classes}", f"average={self.average!r}"]
        opts.append(f"multidim_average={self.multidim_average!r}")
        return ", ".join(opts)

    # --- update ---------------------------------------------------------------------------
    def update(self, preds: Tensor, target: Tensor) -> None:
        """Add the confusion counts of one batch (``preds`` as for :meth:`metricc.Metric.score`)."""
        hard, y, mask = self._format(preds, target)
        n = hard.shape[0]
        hard, y, mask = (x.reshape(n, x.shape[1], -1) for x in (hard, y, mask))
        if self.classes is not None and self.mode.class_dim:
            idx = torch.tensor(self.classes, device=hard.device)
            hard, y = hard.index_select(1, idx), y.index_select(1, idx)
            mask = mask if mask.shape[1] == 1 else mask.index_select(1, idx)
        yp = y & mask
        hp = hard & mask
        tp = (hp & yp).sum(-1)
        fp = hp.sum(-1) - tp
        fn = yp.sum(-1) - tp
        tn = mask.expand_as(hard).sum(-1) - tp - fp - fn
        for name, c in zip(_STATES, (tp, fp, fn, tn), strict=True):
            if self.multidim_average == "global":
                setattr(self, name, getattr(self, name) + c.sum(0))
            else:
                getattr(self, name).append(c)

    def _format(self, preds: Any, target: Any) -> tuple[Tensor, Tensor, Tensor]:
        """``(hard, y, mask)``: 0/1 predictions and labels ``(N, K, *)``, kept elements."""
        err = MetricError
        if not isinstance(preds, Tensor) or not isinstance(target, Tensor):
            raise err(f"preds and target must be tensors, got {type(preds).__name__} and "
                      f"{type(target).__name__}")
        if preds.device != target.device:
            raise err(f"preds are on {preds.device} but target on {target.device}; move both "
                      "to one device")
        if preds.numel() == 0:
            raise err(f"preds is empty (shape {tuple(preds.shape)}); skip empty batches")
        if preds.is_complex() or target.is_complex():
            raise err("preds and target must be real tensors")
        if self.validate_args and preds.is_floating_point():
            self._check_scores(preds)
        p = preds
        if not self.mode.exclusive:  # the argmax is the same on logits and probabilities
            check_01_preds(preds)  # integer 3 would count as a positive (3 >= 0.5)
            p = probabilities(p, self.from_logits)  # score's float64 sigmoid: the same decisions
        if not self.mode.class_dim:
            if p.shape != target.shape:
                raise err(f"preds and target must have the same shape, got {tuple(p.shape)} and "
                          f"{tuple(target.shape)}")
            n = p.shape[0] if p.dim() else 1
            return multilabel_hard_rows(p.reshape(n, 1, -1), target.reshape(n, 1, -1), self.threshold,
                               self.ignore_index, self.mode, _CALL)
        if not self.mode.exclusive:
            if p.dim() < 2 or p.shape[1] != self.num_classes:
                raise err(f"mode='multilabel' with num_classes={self.num_classes} needs preds of "
                          f"shape (N, {self.num_classes}, *), got {tuple(p.shape)}")
            return multilabel_hard_rows(p, target, self.threshold, self.ignore_index, self.mode, _CALL)
        return multiclass_hard_rows(p, target, self.ignore_index, self.num_classes)

    def _check_scores(self, preds: Tensor) -> None:
        lo, hi = (float(v) for v in torch.aminmax(preds.detach().to(torch.float64)))
        if math.isnan(lo) or math.isnan(hi):
            raise MetricError("preds contain NaN; the model produced it upstream")
        if self.mode.exclusive or self.from_logits:
            return  # argmax takes any scores; logits may be any finite or infinite number
        if lo < 0 or hi > 1:
            raise MetricError(f"preds have values outside [0, 1] (min {lo:.4g}, max {hi:.4g}) "
                              "but from_logits=False: pass from_logits=True if these are logits")

    # --- compute --------------------------------------------------------------------------
    def compute(self) -> Tensor:
        """The metric over everything seen since the last ``reset()`` (float64)."""
        f64 = torch.float64
        states = [getattr(self, name) for name in _STATES]
        if self.multidim_average == "samplewise":
            # a list of per-batch tensors; one tensor once torchmetrics has synced it
            if isinstance(states[0], list) and not states[0]:
                raise MetricError("compute() found no samples: call update() first")
            counts = [dim_zero_cat(s).to(f64) for s in states]
        else:
            counts = [s.to(f64).unsqueeze(0) for s in states]  # (1, K): one "sample"
        out = self._reduce(*counts)
        return out[0] if self.multidim_average == "global" else out

    def _values(self, tp: Tensor, fp: Tensor, fn: Tensor, tn: Tensor, used: Tensor) -> Tensor:
        """The metric of each matrix; where it is undefined, ``zero_division``."""
        v = self._value(tp, fp, fn, tn, zero_division=float("nan"))
        undefined = torch.isnan(v)
        if self.zero_division is None:
            if bool((undefined & used).any()):
                where = " or ".join(f"{d} = 0" for d in self._undefined) or "0/0"
                raise MetricError(f"the metric is undefined for a counted class ({where}); pass "
                                  "zero_division=<value> to choose what such a class scores")
            return torch.where(used, v, torch.zeros_like(v))
        return torch.where(undefined, torch.full_like(v, self.zero_division), v)

    def _reduce(self, tp: Tensor, fp: Tensor, fn: Tensor, tn: Tensor) -> Tensor:
        """``(S, K)`` counts -> ``(S,)`` averaged values (``(S, K)`` for ``none``)."""
        f64 = torch.float64
        w = None if self.class_weights is None else torch.tensor(self.class_weights, dtype=f64,
                                                                 device=tp.device)
        if not self.mode.class_dim:
            return self._values(tp, fp, fn, tn, torch.ones_like(tp, dtype=torch.bool))[:, 0]
        if self.average == "micro":
            tp1, fp1, fn1, tn1 = ((x if w is None else x * w).sum(-1) for x in (tp, fp, fn, tn))
            return self._values(tp1, fp1, fn1, tn1, torch.ones_like(tp1, dtype=torch.bool))
        if self.average == "none":
            return self._values(tp, fp, fn, tn, torch.ones_like(tp, dtype=torch.bool))
        present = (tp + fp + fn) > 0
        support = tp + fn
        if self.absent_classes == "skip":
            # metricc's rule (docs/modes.md), the one the loss and score() use.
            weights = class_average_weights(present, support, w, self.average)
        else:
            weights = torch.ones_like(tp) if w is None else w.expand_as(tp).clone()
            if self.average == "weighted":
                weights = weights * support
            elif self.absent_classes == "torchmetrics" and self.mode.exclusive:
                weights = weights * present
            total = weights.sum(-1, keepdim=True)
            # An average with no weight at all is 0, as torchmetrics' and sklearn's are.
            weights = torch.where(total > 0, weights / total.clamp_min(1e-300), 0.0)
        used = weights > 0
        values = self._values(tp, fp, fn, tn, used)
        return torch.where(used, weights * values, torch.zeros_like(values)).sum(-1)


def _zero_division(value: Any) -> float:
    """A number, or NaN on purpose (``float('nan')``); never a string or a bool."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MetricError(f"zero_division must be a number, float('nan') or None, got {value!r}")
    return float(value)


class MatrixStatefulMetric(_ShapeCheckedSync):
    """A K x K metric on hard labels, accumulated over batches and ranks.

    Built by :meth:`metricc.matrix_metric.MatrixMetric.metric`. Its one state is
    the ``(K, K)`` hard confusion matrix (rows true, columns predicted), summed over
    ``update()`` calls and over ranks (``dist_reduce_fx="sum"``); ``compute()``
    evaluates ``value`` (the metric's exact value of a matrix) on it.
    """

    confmat: Tensor  # a torchmetrics state, made by add_state in __init__

    def __init__(self, value: Any, formula: str, higher_is_better: bool, num_classes: int, *,
                 ignore_index: int | None = None, zero_division: float | None = 0.0,
                 validate_args: bool = True, classes_from: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: Where ``num_classes`` came from, when not from the user (``hard_labels``' messages).
        self.classes_from = classes_from
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise MetricError(f"num_classes must be an integer >= 2, got {num_classes!r}")
        if ignore_index is not None and (isinstance(ignore_index, bool)
                                         or not isinstance(ignore_index, int)):
            raise MetricError(f"ignore_index must be an integer, got {ignore_index!r}")
        #: ``(K, K) matrix, zero_division -> float``: pickles with its metric (Metric.__reduce__).
        self._value = value
        self.formula = formula
        object.__setattr__(self, "higher_is_better", higher_is_better)
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.zero_division = None if zero_division is None else _zero_division(zero_division)
        self.validate_args = check_flag("validate_args", validate_args)
        self.add_state("confmat", torch.zeros(num_classes, num_classes, dtype=torch.long),
                       dist_reduce_fx="sum")

    def extra_repr(self) -> str:
        return f"{self.formula!r}, num_classes={self.num_classes}"

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Add one batch: ``(N, K, *)`` scores (argmax) or ``(N, *)`` labels, ``(N, *)`` targets."""
        if not isinstance(preds, Tensor) or not isinstance(target, Tensor):
            raise MetricError(f"preds and target must be tensors, got {type(preds).__name__} and "
                              f"{type(target).__name__}")
        if self.validate_args and preds.is_floating_point() and bool(torch.isnan(preds).any()):
            raise MetricError("preds contain NaN; the model produced it upstream")
        m = hard_confusion_matrix(preds, target, self.num_classes, self.ignore_index,
                                  getattr(self, "classes_from", None))  # None: older pickles
        self.confmat = self.confmat + m.to(self.confmat.device).long()

    def compute(self) -> Tensor:
        """The metric of the matrix summed since the last ``reset()`` (a float64 scalar)."""
        value = self._value(self.confmat.to(torch.float64), zero_division=self.zero_division)
        return torch.tensor(value, dtype=torch.float64)

