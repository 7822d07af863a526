"""The part of ``check()`` that a first ``Metric.loss()`` needs: the two moves' verdicts.

The wrong-way warning of ``loss()`` reads only ``depends_on_predictions`` and
``wrong_way()``, which depend on the directions along the moves a batch allows
(``FN -> TP``, ``TN -> FP``). :func:`check_moves` decides those alone, with the same
proofs and sampling as :func:`metricc.analysis.counts_check.check`, and skips what
nothing in a loss reads (where the metric is undefined, its range, the monotonicity in
each count): a quarter to a third of the CPU time of a first ``loss()``'s analysis
(``docs/performance.md``, section 4).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .counts_check import Monotonicity, MoveVerdicts, move_directions, proved_or_sampled
from .size import tame

__all__ = ["MovesReport", "check_moves"]


@dataclass(frozen=True)
class MovesReport(MoveVerdicts):
    """What the loss's warning reads of a :class:`~metricc.analysis.counts_check.CheckReport`."""

    moves: dict[str, Monotonicity]
    higher_is_better: bool | None = None
    #: As in ``CheckReport``: some proofs ran out of time and those verdicts are sampled.
    budget_spent: bool = False


def check_moves(expr: sympy.Expr, gradient: dict[str, sympy.Expr], *,
                higher_is_better: bool | None = None) -> MovesReport:
    """The verdicts along the two moves of ``expr``, whose partials are ``gradient``.

    >>> import sympy
    >>> from metricc.analysis.counts import partials
    >>> f1 = sympy.sympify("2*TP/(2*TP + FP + FN)")
    >>> check_moves(f1, partials(f1)).moves["TN->FP"]
    Monotonicity(count='TN->FP', direction='decreasing', method='symbolic')
    """
    moves, exhausted = proved_or_sampled(move_directions, gradient, inline=tame(expr))
    return MovesReport(moves, higher_is_better, exhausted)
