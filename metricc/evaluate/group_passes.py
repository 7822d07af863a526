"""Judge a group metric's constraints as a deployed model is judged: over a whole pass.

The group counterpart of :class:`metricc.evaluate.operating.FeasiblePasses`: each validation
pass is scored on its hard counts per group at the decision threshold (one, or one per group),
and the best (or latest) pass whose constraints (``gap(recall) <= 0.05``) all hold is kept with
a deep copy of its state. Users build it as :class:`metricc.BestFeasible` of a group metric.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import MetricError
from ..runtime.options import check_flag, look_up_option
from .operating import KEEPS, PassResult

__all__ = ["GroupPasses"]


class GroupPasses:
    """Passes of a group metric: ``values(preds, target, groups, threshold)`` gives the exact
    metric then each constraint's violation (``> 0``: violated); ``labels`` the constraints'
    texts. ``update(step, scores, target, groups=..., state=None)`` judges one pass."""

    def __init__(self, values: Callable[..., np.ndarray], labels: Sequence[str], higher_is_better: bool, *,
                 threshold: float | Sequence[float] | None = None, keep: str = "best",
                 from_logits: bool = False, confidence: float | None = None) -> None:
        if not labels:
            raise MetricError("BestFeasible needs a metric compiled with constraints, e.g. "
                              "metricc.compile('accuracy subject to gap(recall) <= 0.05')")
        if confidence is not None:
            raise MetricError("confidence= of a group metric's pass is not available: a gap is a "
                              "difference of rates whose exact bound this release does not compute; "
                              "certify per-group rates with best_threshold(..., groups=, "
                              "constraints=[...], confidence=c) instead")
        self.values, self.labels, self.higher_is_better = values, tuple(labels), higher_is_better
        self.threshold = 0.5 if threshold is None else threshold
        self.keep = look_up_option("keep", keep, KEEPS)
        self.from_logits = check_flag("from_logits", from_logits)
        self.history: list[PassResult] = []
        self.best: PassResult | None = None
        self.best_state: Any = None

    def update(self, step: int, scores: Any, target: Any, state: Any = None, *, groups: Any = None
               ) -> PassResult:
        """Judge one whole pass; keep a deep copy of ``state`` when the pass is kept."""
        if groups is None:
            raise MetricError("update() of a group metric's BestFeasible needs groups=[...]")
        v = self.values(scores, target, groups, self.threshold, self.from_logits)
        value = float(v[0])
        rates = {label: float(x) for label, x in zip(self.labels, v[1:], strict=True)}
        feasible = all(x <= 1e-12 for x in rates.values()) and not math.isnan(value)
        result = PassResult(int(step), value, rates, feasible)
        self.history.append(result)
        if feasible and (self.best is None or self.keep == "latest" or
                         (value > self.best.value if self.higher_is_better else value < self.best.value)):
            self.best, self.best_state = result, copy.deepcopy(state)
        return result

    @property
    def found(self) -> bool:
        """Whether some pass met every constraint."""
        return self.best is not None

    def result(self) -> PassResult:
        """The kept pass, or a MetricError saying how close the passes came (the smallest
        violation each constraint reached: ``rates`` hold violations, > 0 violated)."""
        if self.best is not None:
            return self.best
        if not self.history:
            raise MetricError("BestFeasible has judged no pass yet: call update() after each validation pass")
        closest = "; ".join(f"{label}: smallest violation {min(h.rates[label] for h in self.history):.4g}"
                            for label in self.labels)
        raise MetricError(f"no pass met every constraint ({closest}); train longer, or relax a bound")
