"""Decisions from a compiled metric: the best threshold, and the best feasible pass.

The facade's entry points to the decision stage (:mod:`metricc.evaluate.threshold`,
:mod:`metricc.evaluate.operating`): each turns the :class:`~metricc.Metric` into data
(:meth:`~metricc.Metric.decision_objective`) and hands that down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import MetricError
from .evaluate.operating import FeasiblePasses
from .evaluate.threshold import ThresholdChoice
from .facade import Metric

__all__ = ["BestFeasible", "best_threshold"]


def _as_metric(metric: Metric | str, what: str) -> Metric:
    """``metric`` itself, or the formula or metric name ``metric`` compiled (``"f1"``)."""
    if isinstance(metric, Metric):
        return metric
    if isinstance(metric, str):
        from .metric import compile  # metric imports the facades, as this module does

        return compile(metric)
    raise MetricError(f"{what} takes a compiled metric (metricc.compile(\"f1\")), a metric name "
                      f"or a formula, got {type(metric).__name__}")


def best_threshold(metric: Metric | str, scores: Any, target: Any, *,
                   zero_division: float | None = None,
                   constraints: Sequence[str] | None = None,
                   confidence: float | None = None,
                   from_logits: bool = False) -> ThresholdChoice:
    """The threshold ``t`` that optimises ``metric`` for ``scores >= t`` against ``target``.

    Maximises the metric (minimises it when ``metric.higher_is_better`` is
    false) over every distinct score and one threshold just above the highest
    score (no positive prediction), evaluated exactly on the hard counts.
    Thresholds where the metric is undefined (``0/0``; precision with no
    positive prediction) are not candidates, unless ``zero_division`` gives
    them a value, as in :meth:`Metric.score`.

    Ties: among thresholds with the best value (equal to 1e-12 relative), the
    lowest wins, i.e. the most positive predictions, as scikit-learn's
    ``TunedThresholdClassifierCV`` picks the first maximiser of its ascending
    grid. The returned threshold is one of the scores themselves, so
    ``metric.score(scores, target, threshold) == value`` exactly.

    Binary only: ``scores`` are probabilities (any shape, same as ``target``),
    ``target`` holds 0 and 1. ``metric`` is a compiled :class:`Metric`, or a name or
    formula, compiled with its defaults (``best_threshold("f1", ...)``). With
    ``from_logits=True`` the scores are logits: the
    candidates are their probabilities ``sigmoid(logit)`` (float64), so the threshold
    returned is a probability, the scale ``metric.score(..., from_logits=True)``,
    ``metric.metric(from_logits=True)`` and ``BestFeasible(..., from_logits=True)``
    compare it with (``docs/constraints.md``, "What a threshold means"); logits beyond
    about +-36 share a float64 probability and cannot be told apart. Without it, the
    threshold is on the scores' own scale (any real scores), for ``score`` and
    ``BestFeasible`` without ``from_logits``.

    Constraints (``["recall >= 0.9"]``, and those of a metric compiled with
    constraints) restrict the candidates to thresholds whose hard predictions
    meet every one (an undefined value, such as precision with no positive
    prediction, does not). When no threshold meets them all, a
    :class:`MetricError` says how far each got. See ``docs/constraints.md``.

    ``confidence=c`` (``0 < c < 1``) keeps only thresholds whose constraints hold
    *on new data from the same distribution* with probability at least ``c``:
    every constraint must be a rate of counts (recall, specificity, FPR,
    precision, ...), certified by an exact one-sided Clopper-Pearson bound,
    with the search over thresholds corrected as in
    :mod:`metricc.evaluate.confidence`. The result carries the bounds reached;
    when no threshold is certified, a :class:`MetricError` says how many
    validation elements a perfect rate would need.

    >>> import metricc
    >>> metricc.compile("fpr").best_threshold([0.2, 0.7, 0.9], [0, 1, 0])
    ThresholdChoice(threshold=0.9000000000000001, value=0.0)
    >>> metricc.compile("precision").best_threshold([0.9, 0.8, 0.7, 0.6, 0.2], [1, 1, 0, 1, 0],
    ...                                             constraints=["recall >= 0.75"])
    ThresholdChoice(threshold=0.6, value=0.75)
    >>> choice = metricc.compile("precision").best_threshold(
    ...     [0.1 * i for i in range(40)], [0] * 10 + [1] * 30, constraints=["recall >= 0.9"],
    ...     confidence=0.9)
    >>> choice.threshold, round(choice.bounds["recall >= 0.9"], 4)
    (1.0, 0.9261)
    """
    return _as_metric(metric, "best_threshold").best_threshold(
        scores, target, zero_division=zero_division, constraints=constraints,
        confidence=confidence, from_logits=from_logits)


class BestFeasible(FeasiblePasses):
    """A validation pass that meets every constraint of ``metric``: the best by the objective
    (``keep="best"``), or the latest (``keep="latest"``).

    ``metric``: a :class:`metricc.Metric` compiled with constraints (or the formula of one,
    ``"precision subject to recall >= 0.5"``); the options are those
    of :class:`metricc.evaluate.operating.FeasiblePasses`, which judges the passes
    (``from_logits=True``: the scores are logits, judged as ``sigmoid(logit) >= threshold``,
    the threshold a probability, 0.5 by default, as in :meth:`metricc.Metric.score`).

    >>> import metricc
    >>> keep = BestFeasible(metricc.compile("precision subject to recall >= 0.5"), keep="latest")
    >>> keep.update(0, [0.9, 0.2, 0.7, 0.1], [1, 1, 0, 0], state={"w": 1}).feasible
    True
    >>> keep.best_state
    {'w': 1}
    """

    def __new__(cls, metric: Metric | str | None = None, **options: Any) -> Any:
        # a statistic that judges passes itself (groups: update() takes groups=) builds its own;
        # pickle and deepcopy call __new__ with no arguments
        if metric is None:
            return super().__new__(cls)
        judge = _as_metric(metric, "BestFeasible").pass_judge(**options)
        return judge if judge is not None else super().__new__(cls)

    def __init__(self, metric: Metric | str, *, threshold: float | None = None,
                 confidence: float | None = None, passes: int | None = None,
                 zero_division: float | None = None, keep: str = "best",
                 from_logits: bool = False) -> None:
        metric = _as_metric(metric, "BestFeasible")
        self.metric = metric
        super().__init__(metric.decision_objective(), threshold=threshold, confidence=confidence,
                         passes=passes, zero_division=zero_division, keep=keep,
                         from_logits=from_logits)
