"""metricc: compile confusion-matrix metrics into verified PyTorch losses.

>>> import metricc
>>> m = metricc.compile("2*TP / (2*TP + FP + FN)")
>>> m.gradient["FP"]
-2*TP/(FN + FP + 2*TP)**2
"""

from typing import TYPE_CHECKING, Any

from . import boosting
from .boosting import BoostObjective
from .decisions import best_threshold
from .errors import (
    MetricError,
    MetricSyntaxError,
    MetricWarning,
    MissingParameterError,
    UnknownNameError,
    VerificationError,
)
from .evaluate.threshold import ThresholdChoice
from .library import METRICS, NamedMetric
from .metric import CountsMetric, Metric, compile

if TYPE_CHECKING:
    from .runtime.warm_start import WarmStart

__all__ = [
    "METRICS",
    "BoostObjective",
    "CountsMetric",
    "Metric",
    "MetricError",
    "MetricSyntaxError",
    "MetricWarning",
    "MissingParameterError",
    "NamedMetric",
    "ThresholdChoice",
    "UnknownNameError",
    "VerificationError",
    "WarmStart",
    "best_threshold",
    "boosting",
    "compile",
]
__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    """``WarmStart`` loaded on first use: importing metricc loads no torch (``metricc grad``)."""
    if name == "WarmStart":
        from .runtime.warm_start import WarmStart
        return WarmStart
    raise AttributeError(f"module 'metricc' has no attribute {name!r}")
