"""Decision thresholds for group metrics: one for all groups, or one per group, with a stated
confidence that every group's constraints hold on new data."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import MetricError
from .confidence import certified_thresholds, check_confidence
from .objective import CountsBound
from .scale import check_threshold, probabilities

__all__ = ["GroupThresholdChoice", "choose_group_thresholds", "decide"]


def decide(scores: np.ndarray, codes: np.ndarray, threshold: float | Sequence[float],
           from_logits: bool) -> np.ndarray:
    """0/1 decisions: ``score >= threshold`` (a probability; logits through the sigmoid), with
    one threshold per group where ``threshold`` is a sequence (soft memberships take one)."""
    import torch

    p = probabilities(torch.from_numpy(np.asarray(scores, dtype=np.float64)), from_logits).numpy()
    if not from_logits and ((p < 0) | (p > 1)).any():  # (0/1 decisions lie inside)
        raise MetricError("preds must be probabilities in [0, 1], or logits with from_logits=True")
    if isinstance(threshold, (int, float)) or threshold is None:
        return (p >= check_threshold(threshold, from_logits)).astype(np.float64)
    t = np.asarray([check_threshold(float(v), from_logits) for v in threshold], dtype=np.float64)
    if codes.ndim != 1:
        raise MetricError("one threshold per group needs hard group labels (N,), not memberships")
    if t.ndim != 1 or t.shape[0] != int(codes.max(initial=-1)) + 1:
        raise MetricError(f"threshold must be one number or one per group ({int(codes.max(initial=-1)) + 1}), "
                          f"got shape {t.shape}")
    return (p >= t[codes]).astype(np.float64)


class GroupThresholdChoice(NamedTuple):
    """What ``GroupMetric.best_threshold`` returns: ``threshold`` (one probability, or one per
    group in the order of ``groups``, the sorted group labels), the metric's ``value`` there,
    and with ``confidence=`` the stated ``confidence`` and each group's one-sided bounds of its
    constraints (``bounds[group][constraint]``)."""

    threshold: float | list[float]
    value: float
    groups: list[Any]
    confidence: float | None = None
    bounds: dict[Any, dict[str, float]] | None = None


def _table(scores: np.ndarray, y: np.ndarray, codes: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray]:
    """``(thresholds (T,), counts (T, G, 4))`` of ``scores >= t`` per group at every candidate
    ``t`` (highest first; the first above every score), one sort and cumulative sums."""
    order = np.argsort(-scores, kind="stable")
    ss, ys, cs = scores[order], y[order], codes[order]
    last = np.flatnonzero(np.r_[ss[1:] != ss[:-1], True])
    onehot = np.zeros((ss.size, g))
    onehot[np.arange(ss.size), cs] = 1.0
    tp = np.vstack([np.zeros(g), np.cumsum(onehot * ys[:, None], 0)[last]])
    pp = np.vstack([np.zeros(g), np.cumsum(onehot, 0)[last]])
    pos, size = (onehot * y[order][:, None]).sum(0), onehot.sum(0)
    fp, fn = pp - tp, pos - tp
    tn = (size - pos) - fp
    top = np.nextafter(ss[0], np.inf)
    return np.r_[top, ss[last]], np.stack([tp, fp, fn, tn], -1)


def _feasible(constraints: Sequence[CountsBound], counts: np.ndarray, confidence: float | None,
              level: float, label: Any) -> tuple[np.ndarray, Any]:
    """Where one group's counts ``(T, 4)`` meet every constraint (certified at ``level`` with a
    confidence), and the bounds function; a MetricError naming the group when none is."""
    if not constraints:
        return np.ones(counts.shape[0], dtype=bool), None
    named = dict(zip(("TP", "FP", "FN", "TN"), counts.T, strict=True))
    if confidence is None:
        import torch

        mask = np.ones(counts.shape[0], dtype=bool)
        for c in constraints:
            values = c.value(*(torch.from_numpy(np.ascontiguousarray(a)) for a in counts.T),
                             zero_division=float("nan")).numpy()
            mask &= c.met(values)
        return mask, None
    try:
        return certified_thresholds(constraints, named, level)
    except MetricError as e:
        raise MetricError(f"group {label!r}: {e}") from None


def choose_group_thresholds(value: Callable[[np.ndarray], np.ndarray], higher_is_better: bool, label: str,
                            scores: Any, target: Any, groups: Any, *, per_group: bool,
                            constraints: Sequence[CountsBound], confidence: float | None,
                            from_logits: bool) -> GroupThresholdChoice:
    """Thresholds optimising a group metric (``value``: counts ``(..., G, 4)`` -> values ``(...)``)
    for ``scores >= t`` such that every group meets ``constraints``.

    One threshold for all groups, or with ``per_group`` one per group (coordinate ascent over the
    groups from the best common threshold: a local optimum, exact for one group). With
    ``confidence=c`` each group's constraints are certified by exact Clopper-Pearson bounds at
    ``1 - (1 - c)/G`` (Bonferroni over the groups), so that every group's constraints hold on new
    data with probability at least ``c``; a group too small to certify is named, with the number
    of samples it would need.
    """
    from .groups import group_ids
    from .threshold import as_array

    s = np.asarray(probabilities(_tensor(as_array(scores, "scores").reshape(-1)), from_logits), np.float64)
    y = as_array(target, "target").reshape(-1).astype(np.float64)
    if s.shape != y.shape or not np.isin(y, (0, 1)).all() or not np.isfinite(s).all():
        raise MetricError("best_threshold needs finite scores and 0/1 targets of one length")
    if confidence is not None and not constraints:
        raise MetricError("confidence= applies to constraints, and there are none: pass "
                          "constraints=['recall >= 0.8'] (each holds in every group on new data)")
    codes, labels = group_ids(groups, s.shape[0])
    if codes.ndim != 1:
        raise MetricError("best_threshold needs hard group labels (N,), not soft memberships")
    g = len(labels)
    level = None if confidence is None else 1.0 - (1.0 - check_confidence(confidence)) / g
    thresholds, table = _table(s, y, codes, g)
    common: int | None = None
    try:
        masks = [_feasible(constraints, table[:, k], confidence, level or 0.0, labels[k]) for k in range(g)]
        values = np.where(np.logical_and.reduce([m for m, _ in masks]), value(table), np.nan)
        common = _best(values, higher_is_better, label)
    except MetricError:
        if not per_group:
            raise
    if not per_group:
        assert common is not None
        bounds = None if confidence is None else {labels[k]: masks[k][1](common) for k in range(g)}
        return GroupThresholdChoice(float(thresholds[common]), float(values[common]), labels, confidence,
                                    bounds)
    own = [_table(s[codes == k], y[codes == k], np.zeros(int((codes == k).sum()), dtype=np.int64), 1)
           for k in range(g)]
    masks = [_feasible(constraints, c[:, 0], confidence, level or 0.0, labels[k]) for k, (_, c) in enumerate(own)]
    if common is not None:  # start from the best common threshold: the same decisions per group
        # (a group none of whose scores reaches it predicts nothing: its own top threshold)
        pick = [max(int(np.sum(t >= thresholds[common])) - 1, 0) for t, _ in own]
    else:  # else from each group's lowest feasible threshold
        pick = [int(np.flatnonzero(m)[-1]) if m.any() else _none(labels[k]) for k, (m, _) in enumerate(masks)]
    current = np.stack([own[k][1][pick[k], 0] for k in range(g)])
    best = float(value(current))
    for _ in range(20):  # sweeps of coordinate ascent; each never makes the value worse
        moved = False
        for k in range(g):
            trial = np.repeat(current[None], own[k][1].shape[0], 0)
            trial[:, k] = own[k][1][:, 0]
            values = np.where(masks[k][0], value(trial), np.nan)
            i = _best(values, higher_is_better, label)
            if (values[i] > best + 1e-12) if higher_is_better else (values[i] < best - 1e-12):
                pick[k], current, best, moved = i, trial[i], float(values[i]), True
        if not moved:
            break
    chosen = [float(own[k][0][pick[k]]) for k in range(g)]
    bounds = None if confidence is None else {labels[k]: masks[k][1](pick[k]) for k in range(g)}
    return GroupThresholdChoice(chosen, best, labels, confidence, bounds)


def _tensor(a: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


def _none(label: Any) -> int:
    raise MetricError(f"group {label!r}: no threshold meets the constraints on these scores")


def _best(values: np.ndarray, higher_is_better: bool, label: str) -> int:
    """The best defined entry (the lowest threshold among ties), or a MetricError."""
    defined = np.flatnonzero(np.isfinite(values))
    if defined.size == 0:
        raise MetricError(f"no threshold meets every group's constraints with {label!r} defined")
    v = values[defined]
    top = v.max() if higher_is_better else v.min()
    return int(defined[np.flatnonzero(np.abs(v - top) <= 1e-12 * max(1.0, abs(top)))[-1]])
