"""Decision thresholds for group metrics: one for all groups, or one per group, with a stated
confidence that every group's constraints hold on new data."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import MetricError
from .scale import check_threshold, probabilities

__all__ = ["decide"]


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
