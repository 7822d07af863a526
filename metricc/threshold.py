"""Deprecated path: :func:`best_threshold` is :func:`metricc.best_threshold` since 0.2.

Kept for one release so that imports written for 0.1 still work; ``metricc.best_threshold``
is the public name, and the decision stage on data is :mod:`metricc.evaluate.threshold`.
"""

import warnings

from .decisions import best_threshold
from .evaluate.threshold import ThresholdChoice, ThresholdCounts, threshold_counts

warnings.warn("metricc.threshold is deprecated and will be removed in 0.3; use metricc.best_threshold",
              DeprecationWarning, stacklevel=2)

__all__ = ["ThresholdChoice", "ThresholdCounts", "best_threshold", "threshold_counts"]
