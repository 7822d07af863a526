"""Judge constraints as a deployed model is judged: 0/1 rates over a whole pass.

A constrained loss estimates its constraints per batch, on relaxed counts; the
trained model is used at a fixed threshold, on all the data it meets. So, as
TensorFlow Constrained Optimization does, :class:`BestFeasible` scores each
evaluation pass (a validation epoch) on its hard counts at the decision
threshold, keeps the best objective among the passes that meet every
constraint (or, with ``keep="latest"``, the most recent such pass), and keeps
that pass's state (a deep copy of what you hand it). Users build it from a metric,
as :class:`metricc.decisions.BestFeasible`; :class:`FeasiblePasses` is that judge on
data (a :class:`~metricc.evaluate.objective.CountsObjective`).

>>> import metricc
>>> from metricc.decisions import BestFeasible
>>> keep = BestFeasible(metricc.compile("precision subject to recall >= 0.5"))
>>> keep.update(0, [0.9, 0.2, 0.7, 0.1], [1, 1, 0, 0]).feasible      # recall 1/2, precision 1/2
True
>>> keep.update(1, [0.9, 0.6, 0.3, 0.1], [1, 1, 0, 0], state={"w": 1}).value   # precision 1
1.0
>>> keep.best.step, keep.best_state
(1, {'w': 1})
>>> latest = BestFeasible(metricc.compile("precision subject to recall >= 0.5"), keep="latest")
>>> latest.update(0, [0.9, 0.6, 0.3, 0.1], [1, 1, 0, 0], state={"w": 1}).value
1.0
>>> latest.update(1, [0.9, 0.2, 0.7, 0.1], [1, 1, 0, 0], state={"w": 2}).value  # feasible, worse
0.5
>>> latest.best.step, latest.best_state
(1, {'w': 2})
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import MetricError
from ..runtime.options import check_flag, look_up_option
from .confidence import bounds_at, certify, check_confidence, rate_constraint
from .objective import CountsObjective
from .scale import check_threshold, out_of_range_error
from .threshold import threshold_counts

__all__ = ["KEEPS", "FeasiblePasses", "PassResult"]

#: Which feasible pass :class:`FeasiblePasses` keeps: the best objective, or the most recent.
KEEPS = ("best", "latest")


@dataclass(frozen=True)
class PassResult:
    """One pass: the objective and each constraint's value over the whole pass at the threshold.

    ``bounds`` holds each constraint's one-sided bound (with ``confidence``; else empty);
    ``feasible`` says whether every constraint is met (by its bound, with ``confidence``).
    """

    step: int
    value: float
    rates: dict[str, float]
    feasible: bool
    bounds: dict[str, float] = field(default_factory=dict)
    counts: tuple[int, int, int, int] = (0, 0, 0, 0)


class FeasiblePasses:
    """A pass that meets every constraint: the best by the objective, or the latest.

    ``objective``: a metric with constraints, as data
    (:meth:`metricc.Metric.decision_objective`). ``threshold``: the decision threshold,
    by the rule of :mod:`metricc.evaluate.scale`: with ``from_logits=True`` the scores are
    logits and the threshold a probability compared with ``sigmoid(logit)`` (0.5 by
    default, logit 0); without it the scores are compared as given, and at the default
    0.5 scores outside ``[0, 1]`` are refused (pass ``from_logits=True`` for logits, or
    an explicit threshold on the scores' own scale).
    ``keep``: ``"best"`` keeps the feasible pass with the best objective (ties: the
    earlier); ``"latest"`` keeps the most recent feasible pass, whatever its objective
    (judging training passes, it holds up on new data better than the most precise one:
    docs/constraints.md). ``best``, ``best_state`` and :meth:`result` are the kept pass
    under that rule.
    ``confidence=c`` asks each constraint (a rate) to hold on new data with
    probability ``c``: Clopper-Pearson bounds as in :func:`metricc.best_threshold`;
    picking the best of many passes on the same data is a search too, so the
    ``s``-th pass is tested at ``(1 - c) / (s (s + 1))`` (these sum to ``1 - c`` over
    any number of passes), or at ``(1 - c) / passes`` when the number of passes is
    given in advance (Bonferroni; more passes are then refused). The tests are the same
    for both ``keep`` rules: together they bound the chance that any certified pass
    fails, whichever is kept.
    """

    def __init__(self, objective: CountsObjective, *, threshold: float | None = None,
                 confidence: float | None = None, passes: int | None = None,
                 zero_division: float | None = None, keep: str = "best",
                 from_logits: bool = False) -> None:
        self.objective = objective
        self.constraints = objective.constraints
        if not self.constraints:
            raise MetricError("BestFeasible needs a metric compiled with constraints, e.g. "
                              "metricc.compile('precision subject to recall >= 0.9')")
        self.from_logits = check_flag("from_logits", from_logits)
        self.explicit_threshold = threshold is not None
        if self.explicit_threshold and (isinstance(threshold, bool)
                                        or not isinstance(threshold, (int, float))
                                        or not math.isfinite(threshold)):
            raise MetricError(f"threshold must be a finite number, got {threshold!r}")
        threshold = check_threshold(threshold, self.from_logits)
        if passes is not None and (isinstance(passes, bool) or not isinstance(passes, int)
                                   or passes < 1):
            raise MetricError(f"passes must be a positive integer (how many passes will be "
                              f"judged) or None, got {passes!r}")
        self.threshold, self.passes, self.zero_division = float(threshold), passes, zero_division
        self.keep = look_up_option("keep", keep, KEEPS)
        self.confidence = None if confidence is None else check_confidence(confidence)
        self._specs = ([rate_constraint(c) for c in self.constraints]
                       if self.confidence is not None else [])
        self.history: list[PassResult] = []
        self.best: PassResult | None = None
        self.best_state: Any = None

    def _alpha(self) -> float:
        assert self.confidence is not None
        s = len(self.history) + 1
        if self.passes is None:
            return (1.0 - self.confidence) / (s * (s + 1))
        if s > self.passes:
            raise MetricError(f"BestFeasible was told passes={self.passes}; pass {s} would break "
                              "the confidence level: give a larger passes= (or passes=None)")
        return (1.0 - self.confidence) / self.passes

    def update(self, step: int, scores: Any, target: Any, state: Any = None) -> PassResult:
        """Judge one whole pass (every score and 0/1 target of it); keep a deep copy of
        ``state`` (e.g. ``model.state_dict()``) when the pass is kept: feasible, and the best
        so far (``keep="best"``) or simply the latest (``keep="latest"``, which copies the
        state of every feasible pass)."""
        c = threshold_counts(scores, target, self.from_logits)
        if not self.explicit_threshold and not self.from_logits \
                and (c.thresholds[-1] < 0 or c.thresholds[1] > 1):
            raise out_of_range_error(float(c.thresholds[-1]), float(c.thresholds[1]), "scores")
        # the counts of ``score >= threshold``: the lowest candidate at or above it
        i = max(int(np.count_nonzero(c.thresholds >= self.threshold)) - 1, 0)
        tp, fp, fn, tn = (int(a[i]) for a in (c.tp, c.fp, c.fn, c.tn))
        value = float(self.objective.value(tp, fp, fn, tn, zero_division=math.nan))
        if math.isnan(value) and self.zero_division is not None:
            value = float(self.zero_division)
        rates = {con.text: float(con.value(tp, fp, fn, tn, zero_division=math.nan))
                 for con in self.constraints}
        bounds: dict[str, float] = {}
        if self.confidence is None:
            feasible = all(bool(con.met(rates[con.text])) for con in self.constraints)
        else:
            one = {k: np.array([float(v)]) for k, v in zip(("TP", "FP", "FN", "TN"),
                                                          (tp, fp, fn, tn), strict=True)}
            mask, levels = certify(self._specs, one, self._alpha())
            feasible = bool(mask[0])
            bounds = {text: (b if s.counts(one)[1][0] > 0 else math.nan)  # nan: no elements
                      for s, (text, b) in zip(self._specs, bounds_at(self._specs, one, levels, 0).items(),
                                              strict=True)}
        result = PassResult(int(step), value, rates, feasible and not math.isnan(value), bounds,
                            (tp, fp, fn, tn))
        self.history.append(result)
        if result.feasible and (self.best is None or self.keep == "latest"
                                or self._better(value, self.best.value)):
            self.best, self.best_state = result, copy.deepcopy(state)
        return result

    def _better(self, value: float, than: float) -> bool:
        return value > than if self.objective.higher_is_better else value < than  # ties: the earlier

    @property
    def found(self) -> bool:
        """Whether some pass met every constraint."""
        return self.best is not None

    def result(self) -> PassResult:
        """The kept feasible pass (best or latest, by ``keep``), or a :class:`MetricError`
        saying that no pass was feasible and how close the passes came."""
        if self.best is not None:
            return self.best
        if not self.history:
            raise MetricError("BestFeasible has judged no pass yet: call update() after each "
                              "validation pass")
        closest = {con.text: max((con.sense * h.rates[con.text] for h in self.history
                                  if not math.isnan(h.rates[con.text])), default=math.nan)
                   for con in self.constraints}
        got = "; ".join(f"{con.text}: {'highest' if con.sense > 0 else 'lowest'} "
                        f"{con.sense * closest[con.text]:.4g}" for con in self.constraints)
        rule = "" if self.confidence is None else f" with confidence {self.confidence:g}"
        raise MetricError(f"no pass of {len(self.history)} met every constraint{rule} at "
                          f"threshold {self.threshold:g} ({got}); train longer, relax a bound, "
                          "or re-pick the threshold with best_threshold()")
