"""What a decision threshold means: one rule for ``score``, ``metric``, ``best_threshold``
and ``BestFeasible``.

A hard prediction is ``probability >= threshold``. With ``from_logits=True`` the scores
are logits and their probability is ``sigmoid(logit)`` (computed in float64, the same
way everywhere, so that a threshold returned by ``best_threshold`` reproduces its value
exactly through the others): the threshold is then a probability in ``[0, 1]``, and the
default 0.5 is logit 0. Without ``from_logits`` the scores are compared as given: the
default 0.5 needs probabilities (scores outside ``[0, 1]`` are refused, as the loss
refuses them), and an explicit threshold may be on the scores' own scale (``score``,
``best_threshold`` and ``BestFeasible`` take margins or other raw scores so).
Multiclass predictions are the argmax over classes: no threshold applies.

>>> check_threshold(None, True)
0.5
>>> check_threshold(2.0, True)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
metricc.errors.MetricError: threshold=2.0 with from_logits=True: ...
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..errors import MetricError

if TYPE_CHECKING:
    from torch import Tensor

    from ..runtime.modes import Mode

__all__ = ["DEFAULT_THRESHOLD", "check_threshold", "out_of_range_error", "probabilities",
           "refuse_multiclass_threshold"]

#: The default decision threshold: probability 0.5, i.e. logit 0.
DEFAULT_THRESHOLD = 0.5


def check_threshold(threshold: Any, from_logits: bool) -> float:
    """``threshold`` as a float (``None``: :data:`DEFAULT_THRESHOLD`), or a MetricError.

    NaN is refused (every comparison with it is False: a silent all-negative decision);
    with ``from_logits`` the threshold is a probability, so it must lie in ``[0, 1]``.
    """
    if threshold is None:
        return DEFAULT_THRESHOLD
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
            or math.isnan(threshold):
        raise MetricError(f"threshold must be a number (not NaN), got {threshold!r}")
    if from_logits and not 0 <= threshold <= 1:
        try:
            p = f"{1 / (1 + math.exp(-threshold)):.17g}"
        except OverflowError:
            p = "0"
        raise MetricError(
            f"threshold={threshold!r} with from_logits=True: the threshold is a probability, "
            "compared with sigmoid(logit), so it lies in [0, 1] (0.5 is logit 0). To cut the "
            f"logits at {threshold!r}, pass threshold=sigmoid({threshold!r}) = {p}; "
            "best_threshold(..., from_logits=True) returns probabilities")
    return float(threshold)


def probabilities(scores: Tensor, from_logits: bool) -> Tensor:
    """What a threshold is compared with: ``sigmoid(scores)`` in float64 (float32 on
    devices without float64) for floating logits, else ``scores`` as they are."""
    import torch

    if not from_logits or not scores.is_floating_point():
        return scores
    wide = torch.float32 if scores.device.type == "mps" else torch.float64
    return torch.sigmoid(scores.detach().to(wide))


def out_of_range_error(lo: float, hi: float, name: str = "preds") -> MetricError:
    """Scores outside ``[0, 1]`` at the default threshold without ``from_logits``."""
    return MetricError(f"{name} has values outside [0, 1] (min {lo:.4g}, max {hi:.4g}) but "
                       "from_logits=False: pass from_logits=True if these are logits (the "
                       "decision is then sigmoid(logit) >= threshold, 0.5 by default), apply "
                       "torch.sigmoid first, or give an explicit threshold on their own scale")


def refuse_multiclass_threshold(mode: Mode, threshold: Any) -> None:
    """A threshold given with ``mode="multiclass"``, where the prediction is the argmax."""
    if mode.exclusive and threshold is not None:
        raise MetricError(f"threshold={threshold!r} does not apply to mode='multiclass': the "
                          "predicted class is the argmax over classes; leave threshold out, or "
                          "use mode='multilabel' to threshold each class on its own")
