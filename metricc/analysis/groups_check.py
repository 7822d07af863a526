"""``check()`` of a group metric: where it is undefined and which way it trains.

Takes data (the resolved expressions and the generated gradient kernel), not the facade;
:meth:`metricc.groups_metric.GroupMetric.check` calls :func:`check`.

A batch moves group ``g``'s counts in two ways: a positive's score rising moves mass from
``FN_g`` to ``TP_g``, a negative's from ``TN_g`` to ``FP_g``. The directional derivatives
``dV/dTP_g - dV/dFN_g`` and ``dV/dFP_g - dV/dTN_g`` are *sampled* through the generated kernel
(whose gradient ``verify()`` proves equal to SymPy's) at random counts of three groups. A gap
between groups is ``mixed`` by nature: raising the best group's rate widens it, raising the
worst's narrows it; so only a move that goes the wrong way in every sample is reported as one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from ..language.groups import Gap, VsRest
from .groups import group_forms
from .sampled import sampled_direction, sampled_wrong_way

__all__ = ["GroupCheckReport", "check", "sample_group_counts"]


def sample_group_counts(samples: int, groups: int = 3, seed: int = 7) -> np.ndarray:
    """``(samples, groups, 4)`` log-uniform counts in ``[0.1, 1000]`` (fixed seed)."""
    rng = np.random.default_rng(seed)
    return 10 ** rng.uniform(-1, 3, size=(samples, groups, 4))


@dataclass(frozen=True)
class GroupCheckReport:
    """What :meth:`metricc.groups_metric.GroupMetric.check` found: ``moves`` is the direction of
    the metric along each move a batch allows in any one group (``increasing``, ``decreasing``,
    ``constant`` or ``mixed``, sampled at ``samples`` points of three groups); ``undefined``
    lists where a local formula (that group is then left out) or the outer expression is."""

    expr: sympy.Expr
    undefined: tuple[tuple[str, sympy.Expr], ...]
    moves: dict[str, str]
    samples: int
    higher_is_better: bool
    constraints: tuple[str, ...] = ()
    #: ``{disparity: sign}``: the sign of ``dV/d gap(...)`` (or ``vsrest``) where it is a number.
    disparities: dict[str, int] = field(default_factory=dict)

    @property
    def depends_on_predictions(self) -> bool:
        """False when neither move changes the metric: its loss would have zero gradient."""
        return any(d != "constant" for d in self.moves.values())

    def wrong_way(self) -> dict[str, str]:
        """``{move: why}`` for each move along which the metric always goes against training, and
        each disparity (a gap) the loss would widen."""
        out = sampled_wrong_way(self.moves, self.higher_is_better, "rises in any group",
                                f"sampled at {self.samples} points")
        for node, sign in self.disparities.items():
            if (sign > 0) == self.higher_is_better:
                rises = "rises" if sign > 0 else "falls"
                out[node] = f"the metric {rises} as the disparity {node} widens, so the loss would widen it"
        return out

    def __str__(self) -> str:
        lines = [f"metric: {self.expr}"]
        lines += [f"subject to: {c}" for c in self.constraints]
        if self.undefined:
            lines.append("undefined where (before eps):")
            lines.extend(f"  {e} = 0  ({where})" for where, e in self.undefined)
        else:
            lines.append("undefined where: nowhere")
        for move, d in self.moves.items():
            what = "a positive's score rises in a group" if move == "FN->TP" else \
                "a negative's score rises in a group"
            lines.append(f"{move}: {d} as {what} (sampled at {self.samples} points of 3 groups)")
        direction = "higher is better" if self.higher_is_better else "lower is better"
        lines.append(f"as a loss ({direction}): " + ("TRAINS THE WRONG WAY" if self.wrong_way()
                                                     else "no feasible move trains the wrong way"))
        return "\n".join(lines)


def check(expr: sympy.Expr, gradient: Callable[..., Any], undefined: list[tuple[str, sympy.Expr]],
          higher_is_better: bool, tau: float, constraints: tuple[str, ...] = (),
          samples: int = 120) -> GroupCheckReport:
    """The report; ``gradient`` is the generated ``group_and_gradient`` kernel (torch)."""
    import torch

    counts = torch.as_tensor(sample_group_counts(samples), dtype=torch.float64)
    up, side = [], []
    for row in counts:
        _, d_tp, d_fp, d_fn, d_tn = gradient(*row.unbind(-1), 1e-12, tau)
        up.append((d_tp[0] - d_fn[0]).numpy())
        side.append((d_fp[0] - d_tn[0]).numpy())
    scale = max(float(np.abs(np.concatenate(up + side)).max()), 1e-12)
    moves = {"FN->TP": sampled_direction(np.concatenate(up), scale),
             "TN->FP": sampled_direction(np.concatenate(side), scale)}
    forms = group_forms((expr,))
    disparities = {str(node): 1 if d > 0 else -1
                   for node, d in zip(forms.nodes, forms.reduction_partials[0], strict=True)
                   if isinstance(node, (Gap, VsRest)) and d.is_number and d != 0}
    return GroupCheckReport(expr, tuple(undefined), moves, samples, higher_is_better, constraints,
                            disparities)
