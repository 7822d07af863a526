"""Directions seen by sampling, read one way for every statistic whose ``check()`` samples its
gradient kernel (the curve, the groups): the sign of sampled directional derivatives, and which
of the moves a batch allows would then train the wrong way.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sampled_direction", "sampled_wrong_way"]


def sampled_direction(values: np.ndarray, scale: float) -> str:
    """``increasing``, ``decreasing``, ``constant`` or ``mixed``: the signs of sampled
    directional derivatives (``scale``: the largest gradient seen, for the tolerance)."""
    tol = 1e-9 * max(scale, 1e-300)
    lo, hi = float(values.min(initial=0.0)), float(values.max(initial=0.0))
    if lo >= -tol and hi <= tol:
        return "constant"
    if lo >= -tol:
        return "increasing"
    if hi <= tol:
        return "decreasing"
    return "mixed"


def sampled_wrong_way(moves: dict[str, str], higher_is_better: bool, rises: str, sampled: str
                      ) -> dict[str, str]:
    """``{move: why}`` for each of the sampled ``moves`` (``FN->TP``, ``TN->FP``) whose direction
    goes against training; ``rises`` and ``sampled`` say where a score rises and how it was seen."""
    out = {}
    for move, direction in moves.items():
        up = move == "FN->TP"
        bad = "decreasing" if up == higher_is_better else "increasing"
        if direction == bad:
            who = "positive" if up else "negative"
            out[move] = f"the metric is {bad} as a {who}'s score {rises} ({move}, {sampled})"
    return out
