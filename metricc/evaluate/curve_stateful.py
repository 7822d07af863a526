"""A ``torchmetrics.Metric`` for a curve formula (AUROC, AP, ``best(...)``): exact or binned.

Built from data, not from the facade: ``CurveStatefulMetric(expr, values, ...)`` takes the
resolved curve formula (``CurveFormula.expr``) and its parameters' values; the facade's
``CurveMetric.metric(...)`` passes them on. Two kinds of state:

* exact (``thresholds=None``): the batches' scores and labels (``dist_reduce_fx="cat"``);
  ``compute()`` forms the exact curve of every column (every distinct score a threshold,
  ties as scikit-learn) and evaluates the formula on it with
  :func:`metricc.evaluate.curve_formula.evaluate_curve`;
* binned (``thresholds=T`` or an increasing grid): integer histograms of the positives' and
  the negatives' scores on the grid, ``O(C T)`` whatever the number of batches, summed over
  batches and ranks (``dist_reduce_fx="sum"``); the curve's points are the counts of
  ``score >= t_k`` (torchmetrics' binned mode) followed by the point where nothing is
  predicted positive.

>>> import torch
>>> from metricc.language.parse import parse
>>> m = CurveStatefulMetric(parse("auroc").expr)
>>> m.update(torch.tensor([0.1, 0.4]), torch.tensor([0, 0]))
>>> m.update(torch.tensor([0.35, 0.8]), torch.tensor([1, 1]))
>>> float(m.compute())
0.75
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import sympy
import torch
from torch import Tensor
from torchmetrics import Metric as _TorchMetric
from torchmetrics.utilities.data import dim_zero_cat

from ..analysis.curve_bounds import check_bounds
from ..errors import MetricError, MetricWarning
from ..runtime.curve_loss import CURVE_MODES
from ..runtime.modes import Mode, look_up_mode
from ..runtime.options import DEFAULT_MODE, class_count, look_up_option
from .curve import binned_counts, exact_curve
from .curve_formula import evaluate_curve

__all__ = ["CURVE_AVERAGES", "CURVE_MODES", "CurveStatefulMetric"]

#: ``micro`` pools every (element, column) pair into one curve; ``none`` gives one per column.
CURVE_AVERAGES = ("macro", "weighted", "micro", "none")


def _grid(thresholds: Any) -> Tensor:
    """The increasing float64 grid of ``thresholds`` (checked as :func:`binned_counts` does)."""
    if isinstance(thresholds, Tensor):
        thresholds = thresholds.detach().cpu().tolist()
    # one probe point gives the same grid, and the same errors, as the exact-curve module
    return torch.from_numpy(binned_counts([0.5], [1], thresholds).thresholds.copy())


def _classes(mode: Mode, num_labels: int | None, num_classes: int | None) -> int:
    n = class_count(num_classes, num_labels)  # num_labels: torchmetrics' name for the same size
    if not mode.class_dim:
        if n is not None:
            raise MetricError("mode='binary' takes neither num_labels nor num_classes; pass "
                              "mode='multilabel' or 'multiclass' for one curve per column")
        return 1
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise MetricError(f"mode={mode!r} needs num_classes (or num_labels), an int >= 2 (one curve "
                          f"per column), got {n!r}")
    return n


class CurveStatefulMetric(_TorchMetric):
    """A curve formula accumulated over batches and ranks; ``compute()`` gives its exact value.

    ``expr``: a resolved curve formula (``parse(text).expr``); ``values``: its parameters
    (``{"min_precision": 0.9}``; a formula's ``defaults`` are not applied here).
    ``thresholds``: ``None`` for the exact curve, an int ``T`` for ``T`` grid points on
    ``[0, 1]`` (scores must then be probabilities) or an increasing sequence.
    ``mode``: ``"binary"`` (``(N,)`` scores, 0/1 target), ``"multilabel"`` (``(N, L)``
    both; ``num_labels=L``) or ``"multiclass"`` (``(N, K)`` scores, ``(N,)`` class
    indices, one-vs-rest; ``num_classes=K``). ``average`` over columns: ``macro``,
    ``weighted`` (by the positives' count), ``micro`` (one pooled curve) or ``none``.
    ``ignore_index``: target value whose elements (multiclass: rows) are left out.
    ``from_logits``: apply a sigmoid (softmax for multiclass) to the scores first.
    ``compute()`` returns a float64 tensor, ``(C,)`` for ``average="none"``; where the
    formula is undefined on the data (AUROC of one class) it warns and gives NaN there.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    # torchmetrics states (add_state): lists of batches in exact mode, one histogram binned
    preds: list[Tensor]
    target: list[Tensor]
    hist: Tensor

    def __init__(self, expr: sympy.Expr, values: Mapping[str, float] | None = None, *,
                 thresholds: Any = None, mode: str | Mode = DEFAULT_MODE, num_labels: int | None = None,
                 num_classes: int | None = None, average: str | None = "macro",
                 ignore_index: int | None = None, from_logits: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mode = look_up_mode(mode, CURVE_MODES)
        self.average = look_up_option("average", "none" if average is None else average, CURVE_AVERAGES)
        self.columns = _classes(self.mode, num_labels, num_classes)
        if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int)):
            raise MetricError(f"ignore_index must be an int or None, got {ignore_index!r}")
        if not isinstance(from_logits, bool):
            raise MetricError(f"from_logits must be True or False, got {from_logits!r}")
        self.expr, self.values = expr, dict(values or {})
        self.ignore_index, self.from_logits = ignore_index, from_logits
        # the formula and its parameters checked now, not at the end of an epoch
        evaluate_curve(expr, np.array([1.0, 0.0]), np.array([1.0, 0.0]), 1.0, 1.0, self.values)
        check_bounds(expr, self.values)
        self.grid = None if thresholds is None else _grid(thresholds)
        # an int grid spans [0, 1]: scores must be probabilities (as binned_counts)
        self.on_probabilities = isinstance(thresholds, (int, np.integer)) and not isinstance(thresholds, bool)
        if self.grid is None:
            self.add_state("preds", default=[], dist_reduce_fx="cat")
            self.add_state("target", default=[], dist_reduce_fx="cat")
        else:
            shape = (2, self.columns, self.grid.numel() + 1)  # positives', negatives' histograms
            self.add_state("hist", default=torch.zeros(shape, dtype=torch.int64), dist_reduce_fx="sum")

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__["mode"] = look_up_mode(state["mode"])  # it pickles as its name

    def _format(self, preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(S, Y, keep)``: ``(n, C)`` scores, 0/1 labels and the elements kept."""
        if not isinstance(preds, Tensor) or not isinstance(target, Tensor):
            raise MetricError("update(preds, target) takes tensors")
        preds, target = preds.detach(), target.detach()
        if not preds.is_floating_point():
            raise MetricError(f"preds must be floating-point scores, got {preds.dtype}")
        labels = self.mode.class_dim and not self.mode.exclusive  # a 0/1 label per column
        want = preds.shape if labels else preds.shape[:1]
        ndim = 2 if self.mode.class_dim else 1
        if preds.dim() != ndim or target.shape != want or (ndim == 2 and preds.shape[1] != self.columns):
            cols = "" if ndim == 1 else f", {self.columns}"
            shape = f"(N{cols})" if labels else "(N,)"
            raise MetricError(f"mode={self.mode!r} takes preds of shape (N{cols}) and target of shape "
                              f"{shape}; got {tuple(preds.shape)} and {tuple(target.shape)}")
        # the scores' own precision (float32 at least): a binned score on a grid point of
        # linspace(0, 1, T) in that dtype counts there, as in torchmetrics
        s = preds.to(torch.promote_types(preds.dtype, torch.float32))
        if not bool(torch.isfinite(s).all()):
            raise MetricError("preds hold NaN or infinite values; no curve can be formed on them")
        t = target.long() if not target.is_floating_point() else target
        keep = t != self.ignore_index if self.ignore_index is not None else torch.ones_like(t, dtype=torch.bool)
        if self.mode.exclusive:
            s = torch.softmax(s, -1) if self.from_logits else s
            if bool(((t[keep] < 0) | (t[keep] >= self.columns) | (t[keep] != t[keep].round())).any()):
                raise MetricError(f"a multiclass target holds class indices 0..{self.columns - 1}"
                                  + (f" (or ignore_index={self.ignore_index})" if self.ignore_index is not None
                                     else ""))
            y = t.unsqueeze(1) == torch.arange(self.columns, device=t.device)
            keep = keep.unsqueeze(1).expand_as(y)
        else:
            s = torch.sigmoid(s) if self.from_logits else s
            if bool(((t[keep] != 0) & (t[keep] != 1)).any()):
                raise MetricError("target must hold 0 and 1 (1 = positive)"
                                  + (f", or ignore_index={self.ignore_index}" if self.ignore_index is not None
                                     else "; pass ignore_index=... to leave out a padding label"))
            y = t == 1
            s, y, keep = (s, y, keep) if s.dim() == 2 else (s[:, None], y[:, None], keep[:, None])
        return s, y, keep

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Add a batch: its scores and labels (exact) or its histograms (binned)."""
        s, y, keep = self._format(preds, target)
        if self.grid is None:
            # ignored elements stay as label -1: the columns' curves drop them at compute()
            self.preds.append(s.to(torch.float64))
            self.target.append(torch.where(keep, y.to(torch.int8), -1))
            return
        if self.on_probabilities:
            grid = torch.linspace(0.0, 1.0, self.grid.numel(), dtype=s.dtype, device=s.device)
        else:  # a given grid is compared in float64, its points as given
            grid, s = self.grid.to(s.device), s.to(torch.float64)
        if self.on_probabilities and bool(((s[keep] < 0) | (s[keep] > 1)).any()):
            raise MetricError("binned scores must be probabilities in [0, 1] for a grid on [0, 1]; pass "
                              "from_logits=True for logits, or your own thresholds")
        # the number of grid points at or below each score: it is counted at exactly those
        slot = torch.searchsorted(grid, s.contiguous(), right=True)
        size = grid.numel() + 1
        index = (slot + torch.arange(self.columns, device=s.device) * size + (~y) * (self.columns * size))[keep]
        counts = torch.bincount(index, minlength=2 * self.columns * size)
        self.hist += counts.view(self.hist.shape).to(self.hist.device)

    def _points(self) -> list[tuple[np.ndarray, np.ndarray, float, float]]:
        """Each curve's ascending points ``(tp, fp)`` ending at ``(0, 0)``, and ``(P, N)``."""
        if self.grid is None:
            s, y = dim_zero_cat(self.preds).cpu().numpy(), dim_zero_cat(self.target).cpu().numpy()
            cols = [(s.ravel(), y.ravel())] if self.average == "micro" else list(zip(s.T, y.T, strict=True))
            out = []
            for col_s, col_y in cols:
                kept = col_y >= 0
                if not kept.any():
                    raise MetricError("no scores to evaluate: every element of a column was ignored")
                c = exact_curve(col_s[kept], col_y[kept])
                out.append((np.r_[c.tp[::-1], 0.0], np.r_[c.fp[::-1], 0.0], c.pos, c.neg))
            return out
        hist = self.hist.to(torch.float64).cpu()
        if self.average == "micro":
            hist = hist.sum(1, keepdim=True)
        above = hist.flip(-1).cumsum(-1).flip(-1)[..., 1:]  # score >= t_k: the slots past k
        zero = np.zeros(1)
        return [(np.r_[tp.numpy(), zero], np.r_[fp.numpy(), zero], float(h[0].sum()), float(h[1].sum()))
                for tp, fp, h in zip(above[0], above[1], hist.transpose(0, 1), strict=True)]

    def compute(self) -> Tensor:
        """The formula on the curve(s) of every batch so far, averaged over columns."""
        empty = isinstance(self.preds, list) and not self.preds if self.grid is None else not bool(self.hist.any())
        if empty:  # (synced cat states arrive as one tensor, not a list)
            raise MetricError("compute() before any update(): no scores to form a curve from")
        points = self._points()
        values = np.array([float(evaluate_curve(self.expr, tp, fp, pos, neg, self.values))
                           for tp, fp, pos, neg in points])
        support = np.array([pos for _, _, pos, _ in points])
        bad = ~np.isfinite(values)
        if bad.any():
            warnings.warn(f"the curve formula is undefined (NaN) on column(s) {np.flatnonzero(bad).tolist()} "
                          "(no positives or no negatives there?)" + ("; the average leaves them out"
                                                                      if self.average in ("macro", "weighted")
                                                                      and len(values) > 1 else ""),
                          MetricWarning, stacklevel=2)
        if self.average in ("none", "micro") or len(values) == 1:
            out = values if self.average == "none" and self.mode.class_dim else values[0]
            return torch.tensor(out, dtype=torch.float64)
        ok = ~bad
        weights = support[ok] if self.average == "weighted" else np.ones(int(ok.sum()))
        if not ok.any() or weights.sum() == 0:
            return torch.tensor(float("nan"), dtype=torch.float64)
        return torch.tensor(float(np.average(values[ok], weights=weights)), dtype=torch.float64)
