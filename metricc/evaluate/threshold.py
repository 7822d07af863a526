"""The decision threshold that optimises a compiled metric on held-out scores.

A model trained with any loss is used as ``score >= threshold``. For F1 and the
other ratios of linear counts, the Bayes-optimal classifier is a thresholded
class probability (Koyejo et al., NeurIPS 2014), so re-picking the threshold on
validation data is the standard companion of cross-entropy training, and what
scikit-learn's ``TunedThresholdClassifierCV`` does on a grid of candidates.
:func:`choose_threshold` does it exactly: every distinct score is a candidate,
the confusion counts at all of them come from one sort and four cumulative
sums, and the metric is evaluated on all of them in one vectorised call.

>>> import metricc
>>> f1 = metricc.compile("f1")
>>> choice = f1.best_threshold([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
>>> choice.threshold, choice.value
(0.35, 0.8)
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import MetricError, MetricWarning
from .objective import CountsBound, CountsObjective

__all__ = ["ThresholdChoice", "ThresholdCounts", "as_array", "choose_threshold",
           "outside_stacklevel", "threshold_counts"]


class ThresholdCounts(NamedTuple):
    """The hard confusion counts at every candidate threshold, highest threshold first.

    ``thresholds[0]`` lies just above the highest score (no positive
    prediction); ``thresholds[i]`` for ``i >= 1`` is the ``i``-th highest
    distinct score, and predicts positive every score ``>= thresholds[i]``.
    The counts are float64 arrays of the same length.
    """

    thresholds: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    fn: np.ndarray
    tn: np.ndarray


class _Choice(NamedTuple):
    threshold: float
    value: float


class ThresholdChoice(_Choice):
    """What :func:`best_threshold` returns: predict positive where ``score >= threshold``.

    The pair ``(threshold, value)``. With ``confidence=``, also ``confidence`` and ``bounds``
    (each constraint's one-sided Clopper-Pearson bound at the threshold, at the level it was
    tested at), kept outside the tuple so that ``threshold, value = choice`` still works;
    they are ``None`` and ``{}`` otherwise. Equality compares the pair only.
    """

    confidence: float | None = None
    _bounds: tuple[tuple[str, float], ...] = ()

    def __new__(cls, threshold: float, value: float, confidence: float | None = None,
                bounds: Mapping[str, float] | None = None) -> ThresholdChoice:
        self = super().__new__(cls, threshold, value)
        if confidence is not None:
            self.confidence, self._bounds = confidence, tuple((bounds or {}).items())
        return self

    @property
    def bounds(self) -> dict[str, float]:
        """``{constraint text: bound reached}`` (empty without ``confidence=``)."""
        return dict(self._bounds)

    def __repr__(self) -> str:
        pair = super().__repr__()
        if self.confidence is None:
            return pair
        return f"{pair[:-1]}, confidence={self.confidence!r}, bounds={self.bounds!r})"


def as_array(x: Any, what: str) -> np.ndarray:
    """``x`` (a tensor, array or list of numbers) as a numpy array, or a MetricError naming ``what``."""
    import torch  # on use: ``import metricc`` loads this module, and ``metricc grad`` no torch

    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        x = (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise MetricError(f"{what} must be an array, tensor or list of numbers: {e}") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise MetricError(f"{what} must hold numbers, got dtype {arr.dtype}")
    return arr


def threshold_counts(scores: Any, target: Any, from_logits: bool = False) -> ThresholdCounts:
    """The confusion counts of ``scores >= t`` against 0/1 ``target`` at every candidate ``t``.

    ``scores`` and ``target`` are tensors, arrays or lists of one shape (any
    shape; flattened). One sort and cumulative sums: ``O(n log n)``. With
    ``from_logits`` the scores are logits and the candidates are their probabilities
    (:func:`metricc.evaluate.scale.probabilities`, on the tensor's own device).

    >>> c = threshold_counts([0.2, 0.9, 0.2, 0.6], [0, 1, 1, 0])
    >>> c.thresholds.tolist()[1:], c.tp.tolist(), c.fp.tolist()
    ([0.9, 0.6, 0.2], [0.0, 1.0, 1.0, 2.0], [0.0, 0.0, 1.0, 2.0])
    """
    from ..runtime.options import check_flag

    if check_flag("from_logits", from_logits):
        scores = _logit_probabilities(scores)
    s = as_array(scores, "scores")
    t = as_array(target, "target")
    if s.shape != t.shape:
        raise MetricError(f"scores and target must have the same shape, got {s.shape} and "
                          f"{t.shape}")
    if s.size == 0:
        raise MetricError("best_threshold() needs at least one score")
    if not np.isfinite(s).all():
        bad = int((~np.isfinite(s)).sum())
        raise MetricError(f"scores hold {bad} NaN or infinite value{'s' * (bad > 1)}; "
                          "a threshold cannot be chosen on them (check the model's outputs)")
    if not ((t == 0) | (t == 1)).all():
        found = np.unique(t[(t != 0) & (t != 1)])[:5].tolist()
        raise MetricError(f"target must hold only 0 and 1 (binary), found {found}; for a "
                          "multiclass problem pick one class's scores and a 0/1 target for it")
    s = s.reshape(-1)
    y = t.reshape(-1).astype(np.float64)
    # Floating scores keep their dtype so that the returned thresholds compare against
    # them exactly; integer and bool scores become float64.
    if not np.issubdtype(s.dtype, np.floating):
        s = s.astype(np.float64)
    order = np.argsort(-s, kind="stable")
    ss, ys = s[order], y[order]
    # The last position of each run of equal scores: a threshold keeps a tie together.
    last = np.flatnonzero(np.r_[ss[1:] != ss[:-1], True])
    pos_total, n = float(y.sum()), float(y.size)
    tp = np.r_[0.0, np.cumsum(ys)[last]]
    pp = np.r_[0.0, last + 1.0]
    fp = pp - tp
    fn = pos_total - tp
    tn = (n - pos_total) - fp
    top = np.nextafter(ss[0], np.array(np.inf, dtype=ss.dtype))
    thresholds = np.r_[np.array([top], dtype=ss.dtype), ss[last]].astype(np.float64)
    return ThresholdCounts(thresholds, tp, fp, fn, tn)


def _logit_probabilities(scores: Any) -> Any:
    """Floating logits as the probabilities a threshold is compared with (the tensor's own
    device and the same float64 sigmoid as ``score``); anything else as it is."""
    import torch

    from .scale import probabilities

    if not isinstance(scores, torch.Tensor):
        arr = as_array(scores, "scores")
        if not np.issubdtype(arr.dtype, np.floating):
            return arr
        scores = torch.from_numpy(np.ascontiguousarray(arr))
    return probabilities(scores, True)


def choose_threshold(objective: CountsObjective, scores: Any, target: Any, *,
                     zero_division: float | None = None,
                     confidence: float | None = None,
                     from_logits: bool = False) -> ThresholdChoice:
    """The threshold ``t`` that optimises ``objective`` for ``scores >= t`` against ``target``.

    The decision stage of :func:`metricc.best_threshold` (which documents the rules: the
    candidates, ties, ``zero_division``, constraints and ``confidence``), on data: the
    objective's value function and its :class:`CountsBound` constraints.

    >>> import metricc
    >>> o = metricc.compile("precision").decision_objective(["recall >= 0.75"])
    >>> choose_threshold(o, [0.9, 0.8, 0.7, 0.6, 0.2], [1, 1, 0, 1, 0])
    ThresholdChoice(threshold=0.6, value=0.75)
    """
    if zero_division is not None and (isinstance(zero_division, bool)
                                      or not isinstance(zero_division, (int, float))):
        raise MetricError(f"zero_division must be a number, got {zero_division!r}")
    c = threshold_counts(scores, target, from_logits)
    _warn_single_class(c)
    import torch

    values = objective.value(*(torch.from_numpy(a) for a in (c.tp, c.fp, c.fn, c.tn)),
                          zero_division=float("nan")).numpy()
    if zero_division is not None:
        values = np.where(np.isnan(values), float(zero_division), values)
    feasible, bounds = _feasible(objective.constraints, c, confidence)
    defined = np.flatnonzero(~np.isnan(values) & feasible)
    if defined.size == 0 and feasible.any():
        raise MetricError(
            f"the metric {objective.label!r} is undefined at every threshold "
            "on these scores (e.g. recall with no positive target); pass zero_division=<value>")
    v = values[defined]
    best = v.max() if objective.higher_is_better else v.min()
    tol = 1e-12 * max(1.0, abs(best))
    # Candidates run from the highest threshold down: the last tied one is the lowest.
    i = defined[np.flatnonzero(np.abs(v - best) <= tol)[-1]]
    if bounds is None or confidence is None:  # bounds come with a confidence
        return ThresholdChoice(float(c.thresholds[i]), float(values[i]))
    return ThresholdChoice(float(c.thresholds[i]), float(values[i]), float(confidence), bounds(i))


def outside_stacklevel() -> int:
    """The ``stacklevel`` at which a warning raised by the caller points at the first frame
    outside metricc, however many facade frames (methods, keyword checks) lie between."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "metricc":
        frame, level = frame.f_back, level + 1
    return level


def _warn_single_class(c: ThresholdCounts) -> None:
    """A target of one class leaves nothing to separate: every threshold's counts are
    exact, but the choice says nothing about new data with both classes."""
    positives, negatives = c.tp[0] + c.fn[0], c.fp[0] + c.tn[0]
    if positives and negatives:
        return
    which = "positive (1)" if positives else "negative (0)"
    warnings.warn(f"best_threshold: every one of the {int(positives + negatives)} targets is "
                  f"{which}, so no threshold separates the classes and the one returned fits "
                  "this one class only; choose it on held-out data holding both classes",
                  MetricWarning, stacklevel=outside_stacklevel())


def _feasible(own: Sequence[CountsBound], c: ThresholdCounts, confidence: float | None = None
              ) -> tuple[np.ndarray, Callable[[int], dict[str, float]] | None]:
    """Which candidate thresholds meet every constraint of ``own`` (all when none), and with
    ``confidence`` the function giving the bounds at a threshold.

    Raises :class:`MetricError` when none does.
    """
    if confidence is not None:
        from .confidence import certified_thresholds

        counts = {"TP": c.tp, "FP": c.fp, "FN": c.fn, "TN": c.tn}
        return certified_thresholds(own, counts, confidence)
    ok = np.ones(c.thresholds.shape, dtype=bool)
    if not own:
        return ok, None
    import torch

    tensors = [torch.from_numpy(a) for a in (c.tp, c.fp, c.fn, c.tn)]
    reached = []
    for con in own:
        h = con.value(*tensors, zero_division=float("nan")).numpy()
        ok &= con.met(h)
        finite = h[np.isfinite(h)]
        best = (finite.max() if con.sense > 0 else finite.min()) if finite.size else float("nan")
        reached.append(f"{con.text}: {'highest' if con.sense > 0 else 'lowest'} "
                       f"{best:.4g}")
    if not ok.any():
        raise MetricError("no threshold meets every constraint on these data ("
                          + "; ".join(reached) + "); relax a bound, or use more validation data")
    return ok, None
