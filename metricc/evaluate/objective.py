"""A 2x2 metric as the decision stage reads it: data, not the facade.

:meth:`metricc.Metric.decision_objective` builds a :class:`CountsObjective`;
:func:`metricc.evaluate.threshold.choose_threshold`, :mod:`metricc.evaluate.confidence` and
:class:`metricc.evaluate.operating.FeasiblePasses` read it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

__all__ = ["CountsBound", "CountsObjective"]


class CountsBound(NamedTuple):
    """A constraint as data: ``value(TP, FP, FN, TN) op bound``, ``op`` being ``">="`` or ``"<="``.

    ``value`` is the exact value at counts (``zero_division=`` as :meth:`metricc.Metric.value`),
    ``expr`` its SymPy form over the counts (``confidence=`` asks whether it is a rate).
    :meth:`metricc.Metric.decision_objective` builds them from a metric's constraints.
    """

    text: str
    value: Callable[..., Any]
    expr: Any
    op: str
    bound: float

    @property
    def sense(self) -> int:
        """``+1`` for ``>=``, ``-1`` for ``<=``."""
        return 1 if self.op == ">=" else -1

    def met(self, values: Any) -> np.ndarray:
        """Where ``values`` meet the bound (``nan`` never does)."""
        # a relative tolerance: 0.9 computed from counts through a formula may round below 0.9
        with np.errstate(invalid="ignore"):
            return np.asarray(self.sense * (np.asarray(values, dtype=np.float64) - self.bound)
                              >= -1e-12 * max(1.0, abs(self.bound)))


class CountsObjective(NamedTuple):
    """What the decision-threshold stage needs of a 2x2 metric, as data.

    ``label`` names it in messages, ``value`` is its exact value at counts, and
    ``constraints`` are the :class:`CountsBound` every chosen threshold must meet.
    :meth:`metricc.Metric.decision_objective` builds one.

    >>> import metricc
    >>> o = metricc.compile("precision subject to recall >= 0.5").decision_objective()
    >>> o.label, o.higher_is_better, [c.text for c in o.constraints]
    ('precision subject to recall >= 0.5', True, ['recall >= 0.5'])
    """

    label: str
    value: Callable[..., Any]
    higher_is_better: bool
    constraints: tuple[CountsBound, ...] = ()
