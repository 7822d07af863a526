"""Stage 5, verify: generated code proved equal to SymPy's derivatives, gradients checked numerically.

The stage takes data (:class:`~metricc.verify.counts.CountsSubject`,
:class:`~metricc.verify.matrix.MatrixSubject`); ``Metric.verify()`` builds it.
``VerificationReport`` and ``symbolic_equal`` stay importable from here, and so, deprecated,
does 0.1's ``verify(metric)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from .counts import Check, VerificationReport, symbolic_equal

__all__ = ["Check", "VerificationReport", "symbolic_equal", "verify"]


def verify(metric: Any, derivatives: Mapping[str, str] | None = None, **options: Any
           ) -> VerificationReport:
    """Deprecated (removed in 0.3): ``metric.verify(derivatives, **options)``."""
    warnings.warn("metricc.verify.verify(metric) is deprecated and will be removed in 0.3; "
                  "call metric.verify()", DeprecationWarning, stacklevel=2)
    return metric.verify(derivatives, **options)
