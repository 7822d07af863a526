"""Deprecated path: :class:`StatefulMetric` lives in :mod:`metricc.evaluate.stateful` since 0.2.

Kept for one release so that imports and pickles written by 0.1 still load.
"""

import warnings

from .evaluate.stateful import ABSENT_CLASSES, StatefulMetric

warnings.warn("metricc.stateful is deprecated and will be removed in 0.3; import StatefulMetric from "
              "metricc.evaluate.stateful (or use Metric.metric())", DeprecationWarning, stacklevel=2)

__all__ = ["ABSENT_CLASSES", "StatefulMetric"]
