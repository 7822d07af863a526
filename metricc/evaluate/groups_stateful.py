"""A ``torchmetrics.Metric`` for a group formula: the ``G x 4`` hard counts, summed.

Built from data, not from the facade: ``GroupStatefulMetric(expr, label, ...)`` takes the
resolved group formula (``GroupMetric.expr``, parameters substituted) and the name it reports;
the facade's ``GroupMetric.metric(...)`` passes them on. The state is one ``(G, 4)`` float64
tensor of the counts ``TP FP FN TN`` of every group at the hard decisions (``score >=
threshold``), summed over batches and ranks (``dist_reduce_fx="sum"``), so the value is exact for
the whole epoch and the whole global batch; ``compute()`` is
:func:`metricc.evaluate.groups.evaluate_groups` of those counts: what ``GroupMetric.score``
gives on all the data at once.

``num_groups`` fixes ``G`` and preallocates the state. Without it the state grows to the largest
group id seen; before torchmetrics sums the ranks' states, each rank pads its own to the largest
``G`` of any rank (one all-reduce of one integer), so ranks that saw different groups still sum
correctly. A group without any sample takes no part (as fairlearn, which knows only the groups in
its data).

>>> import torch
>>> from metricc.language.parse import parse
>>> m = GroupStatefulMetric(parse("gap(recall)").expr, "gap(recall)")
>>> m.update(torch.tensor([0.9, 0.2]), torch.tensor([1, 1]), torch.tensor([0, 1]))
>>> m.update(torch.tensor([0.7, 0.8]), torch.tensor([1, 1]), torch.tensor([1, 1]))
>>> float(m.compute())   # recall 1 in group 0, 2/3 in group 1
0.33333333333333337
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy
import torch
from torch import Tensor
from torchmetrics import Metric as _TorchMetric

from ..errors import MetricError, MetricWarning
from ..runtime.groups import group_counts
from .groups import evaluate_groups
from .scale import check_threshold, probabilities

__all__ = ["GroupStatefulMetric"]


def _check_num_groups(num_groups: Any) -> int | None:
    if num_groups is None:
        return None
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
        raise MetricError(f"num_groups must be a positive int (the number of groups) or None, got "
                          f"{num_groups!r}")
    return num_groups


def _thresholds(threshold: Any, from_logits: bool, num_groups: int | None) -> Tensor:
    """One threshold ``()`` or one per group ``(G,)`` (which needs ``num_groups``), float64."""
    if isinstance(threshold, (Sequence, np.ndarray, Tensor)) and not isinstance(threshold, str):
        values = [check_threshold(float(v), from_logits) for v in np.asarray(threshold, dtype=object).ravel()]
        if num_groups is None or len(values) != num_groups:
            raise MetricError(f"one threshold per group needs num_groups= and one threshold for each group; "
                              f"got {len(values)} thresholds and num_groups={num_groups!r}")
        return torch.tensor(values, dtype=torch.float64)
    return torch.tensor(check_threshold(threshold, from_logits), dtype=torch.float64)


class GroupStatefulMetric(_TorchMetric):
    """A group formula accumulated over batches and ranks; ``compute()`` gives its exact value.

    ``expr``: a resolved group formula; ``label``: its name in messages. ``update(preds, target,
    groups)``: scores ``(N,)`` (probabilities, or logits with ``from_logits``), 0/1 ``target``
    ``(N,)`` and integer group ids ``(N,)`` (``0 .. G-1``; map labels such as strings to ids once,
    the same on every rank) or soft memberships ``(N, G)`` whose rows sum to 1. ``threshold``: a
    probability, or one per group (with ``num_groups``). ``zero_division``: the value of a rate
    undefined in a group (fairlearn's is 0); without it such a group is an error naming it.
    ``num_groups``: fix ``G`` (the state is preallocated; ids must lie below it); without it the
    state grows with the largest id seen (ranks are padded to one ``G`` before their sum).
    ``compute()`` returns a float64 scalar tensor; ``reset()`` empties the counts.
    """

    is_differentiable = False
    full_state_update = False
    higher_is_better: bool | None = None

    counts: Tensor

    def __init__(self, expr: sympy.Expr, label: str, num_groups: int | None = None,
                 threshold: float | Sequence[float] = 0.5, from_logits: bool = False,
                 zero_division: float | None = None, *, higher_is_better: bool | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_groups = _check_num_groups(num_groups)
        if not isinstance(from_logits, bool):
            raise MetricError(f"from_logits must be True or False, got {from_logits!r}")
        if zero_division is not None and (isinstance(zero_division, bool)
                                          or not isinstance(zero_division, (int, float))):
            raise MetricError(f"zero_division must be a number, float('nan') or None (raise), got "
                              f"{zero_division!r}")
        self.expr, self.label, self.from_logits = expr, label, from_logits
        self.zero_division = None if zero_division is None else float(zero_division)
        # torchmetrics makes higher_is_better a read-only class constant; here it is the formula's
        object.__setattr__(self, "higher_is_better", higher_is_better)
        self.thresholds = _thresholds(threshold, from_logits, self.num_groups)
        # the formula checked now (parameters without values), not at the end of an epoch
        evaluate_groups([expr], np.ones((2, 4)), 0.0)
        self.add_state("counts", default=torch.zeros(self.num_groups or 0, 4, dtype=torch.float64),
                       dist_reduce_fx="sum")

    def _format(self, preds: Tensor, target: Tensor, groups: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
        """``(decisions, labels, groups, G)``, checked."""
        if not all(isinstance(t, Tensor) for t in (preds, target, groups)):
            raise MetricError("update(preds, target, groups) takes tensors: scores (N,), 0/1 labels (N,) "
                              "and group ids (N,) or memberships (N, G)")
        s, y, g = preds.detach().reshape(-1), target.detach().reshape(-1), groups.detach()
        n = s.shape[0]
        if not s.is_floating_point() or y.shape[0] != n:
            raise MetricError(f"preds must be floating-point scores with one 0/1 target each; got preds "
                              f"{tuple(preds.shape)} {preds.dtype} and target {tuple(target.shape)}")
        if not bool(torch.isfinite(s).all()):
            raise MetricError("preds hold NaN or infinite values")
        if bool(((y != 0) & (y != 1)).any()):
            raise MetricError("target must hold 0 and 1 (1 = positive)")
        p = probabilities(s, self.from_logits)
        if not self.from_logits and bool(((p < 0) | (p > 1)).any()):
            raise MetricError("preds must be probabilities in [0, 1], or logits with from_logits=True")
        if g.dtype == torch.bool or g.is_complex():
            raise MetricError(f"groups must hold integer group ids or float memberships, got {g.dtype}")
        if g.is_floating_point():
            G = self._memberships(g, n)
        else:
            g = g.reshape(-1)
            if g.shape[0] != n:
                raise MetricError(f"groups must hold one id per prediction ({n}), got shape {tuple(groups.shape)}")
            lo, hi = (int(g.min()), int(g.max())) if n else (0, -1)
            if lo < 0 or (self.num_groups is not None and hi >= self.num_groups):
                limit = self.num_groups if self.num_groups is not None else "G"
                raise MetricError(f"group ids must lie in [0, {limit}), got ids from {lo} to {hi}")
            G = self.num_groups if self.num_groups is not None else hi + 1
        t = self.thresholds.to(p.device)
        if t.dim() and g.is_floating_point():
            raise MetricError("one threshold per group needs group ids (N,), not memberships")
        cut = t[g] if t.dim() else t
        return (p.to(torch.float64) >= cut).to(torch.float64), y.to(torch.float64), g, G

    def _memberships(self, g: Tensor, n: int) -> int:
        if g.dim() != 2 or g.shape[0] != n:
            raise MetricError(f"soft group memberships must be (N, G) with N = {n}, got {tuple(g.shape)}")
        if self.num_groups is not None and g.shape[1] != self.num_groups:
            raise MetricError(f"num_groups={self.num_groups} but the memberships have {g.shape[1]} columns")
        if not bool(torch.isfinite(g).all()) or bool((g < 0).any()) or not bool(
                torch.allclose(g.sum(1).to(torch.float64), torch.ones((), dtype=torch.float64), atol=1e-6)):
            raise MetricError("soft group memberships (N, G) must be finite, >= 0 and sum to 1 per row")
        return int(g.shape[1])

    def update(self, preds: Tensor, target: Tensor, groups: Tensor) -> None:
        """Add a batch's counts per group."""
        d, y, g, G = self._format(preds, target, groups)
        batch = group_counts(d, y, None, g, G).to(self.counts.device)
        self.counts = self._padded(self.counts, max(G, self.counts.shape[0]))
        self.counts[:G] += batch

    @staticmethod
    def _padded(counts: Tensor, G: int) -> Tensor:
        extra = G - counts.shape[0]
        return counts if extra <= 0 else torch.cat([counts, counts.new_zeros(extra, 4)])

    def _reduce_states(self, incoming_state: dict[str, Any]) -> None:
        """Sum another state into this one (``forward()``'s batch state, ``merge_state``), both
        padded to the larger ``G`` first."""
        other = incoming_state.get("counts")
        if isinstance(other, Tensor) and other.shape[0] != self.counts.shape[0]:
            G = max(other.shape[0], self.counts.shape[0])
            incoming_state = {**incoming_state, "counts": self._padded(other, G)}
            self.counts = self._padded(self.counts, G)
        super()._reduce_states(incoming_state)

    def _sync_dist(self, dist_sync_fn: Any = None, process_group: Any = None) -> None:
        """Pad every rank's counts to the largest ``G`` of any rank, then sum (torchmetrics)."""
        if self.num_groups is None:
            import torch.distributed as dist

            size = torch.tensor([self.counts.shape[0]], dtype=torch.int64, device=self.counts.device)
            dist.all_reduce(size, op=dist.ReduceOp.MAX, group=process_group or self.process_group)
            self.counts = self._padded(self.counts, int(size.item()))
        if dist_sync_fn is None:
            super()._sync_dist(process_group=process_group)
        else:
            super()._sync_dist(dist_sync_fn, process_group)

    def compute(self) -> Tensor:
        """The formula's exact value at the counts of every batch (and rank) so far."""
        counts = self.counts.detach().cpu().to(torch.float64).numpy()
        present = np.flatnonzero(counts.sum(1) > 0)  # a group without samples takes no part
        if present.size == 0:
            raise MetricError(f"compute() of {self.label!r} before any update() with samples: no counts")
        value = float(evaluate_groups([self.expr], counts[present], self.zero_division,
                                      labels=present.tolist())[0])
        if not math.isfinite(value):
            warnings.warn(f"{self.label!r} is undefined at these counts (NaN: a ratio whose largest group "
                          "value is 0, or an overall rate with no samples)", MetricWarning, stacklevel=2)
        return torch.tensor(value, dtype=torch.float64)
