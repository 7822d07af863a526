"""Deprecated path: :func:`best_threshold` lives in :mod:`metricc.evaluate.threshold` since 0.2.

Kept for one release so that imports written for 0.1 still work; ``metricc.best_threshold``
is the public name.
"""

import warnings

from .evaluate.threshold import ThresholdChoice, ThresholdCounts, best_threshold, threshold_counts

warnings.warn("metricc.threshold is deprecated and will be removed in 0.3; use metricc.best_threshold "
              "or import from metricc.evaluate.threshold", DeprecationWarning, stacklevel=2)

__all__ = ["ThresholdChoice", "ThresholdCounts", "best_threshold", "threshold_counts"]
