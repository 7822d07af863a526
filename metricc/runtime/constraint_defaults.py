"""The defaults of a constrained loss, and the warning when a constraint stalls under them.

:data:`CONSTRAINED_DEFAULTS` is the one place the options of
``Metric.loss()`` with constraints come from (the objective's ``amplifier``, the
multiplier step's ``multiplier_lr``, ``penalty``, ``max_multiplier`` and
``multiplier_rates``); ``docs/constrained_defaults.md`` is the search that chose them.
:class:`StallWatch` follows each multiplier step and warns once when a constraint stays
violated while its multiplier keeps growing (``docs/constraints.md``, *The stall warning*).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import Tensor

from ..errors import MetricWarning

#: Chosen on the development sets (docs/constrained_defaults.md): AnyLoss amplifier 10,
#: not the unconstrained 73, whose relaxation saturates when a multiplier pushes hard.
CONSTRAINED_DEFAULTS: dict[str, Any] = {"amplifier": 10.0, "multiplier_lr": 0.2, "penalty": 1.0,
                                        "max_multiplier": 100.0, "multiplier_rates": "hard"}
#: The stall rule: the violation's moving average (decay ``STALL_DECAY``) above
#: ``STALL_LEVEL`` for ``STALL_STEPS`` consecutive steps while the multiplier grew.
STALL_DECAY, STALL_LEVEL, STALL_STEPS = 0.98, 0.02, 400
#: Off the CPU the check reads the device (a synchronisation) only every this many steps.
STALL_CHECK_EVERY = 50


class StallWatch:
    """Per constraint (and row): the smoothed violation, how long it has stayed above the
    level, and the multiplier when that began; warns once (a :class:`MetricWarning`).

    State is float64 tensors held outside the module's buffers, so ``.half()`` and ``.to()``
    never round it; it follows the multipliers' device. Not run under ``torch.compile``.

    >>> import warnings
    >>> w = StallWatch()
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     for i in range(450):
    ...         lam = torch.tensor([0.01 * i], dtype=torch.float64)
    ...         w.update(torch.tensor([0.3], dtype=torch.float64), lam,
    ...                  lambda row, k, steps, start, now: f"{steps} steps: {start:.2f} -> {now:.2f}")
    >>> len(seen), str(seen[0].message)  # the average passed 0.02 at step 4, 400 steps on
    (1, '400 steps: 0.03 -> 4.02')
    """

    def __init__(self) -> None:
        self.state: Tensor | None = None  # (..., 3): moving average, streak, multiplier at start
        self.steps = 0
        self.warned = False

    def update(self, v: Tensor, lam: Tensor, describe: Any) -> None:
        """One multiplier step: ``v`` the violations it used, ``lam`` the multipliers after it;
        ``describe(row, k, steps, start, now)`` is the warning's text (:func:`stall_message`)."""
        if self.warned or torch.compiler.is_compiling():
            return
        v = v.detach().to(torch.float64).reshape(lam.shape)
        lam = lam.detach().to(torch.float64)
        s = self.state
        if s is None or s.shape[:-1] != lam.shape:
            s = torch.zeros((*lam.shape, 3), dtype=torch.float64, device=lam.device)
        s = s.to(lam.device)
        # An undefined constraint (NaN: no positives in the batch) leaves its average alone.
        avg = torch.where(torch.isfinite(v), STALL_DECAY * s[..., 0] + (1 - STALL_DECAY) * v,
                          s[..., 0])
        above = avg > STALL_LEVEL
        streak = torch.where(above, s[..., 1] + 1, 0.0)
        start = torch.where(above & (s[..., 1] == 0), lam, s[..., 2])
        self.state = torch.stack([avg, streak, start], -1)
        self.steps += 1
        if lam.device.type != "cpu" and self.steps % STALL_CHECK_EVERY:
            return
        stalled = (streak >= STALL_STEPS) & (lam > start)
        if bool(stalled.any()):
            self.warned = True
            where = tuple(int(i) for i in stalled.nonzero()[0])
            row, k = (0, where[0]) if len(where) == 1 else where
            warnings.warn(describe(row, k, int(streak[where]), float(start[where]),
                                   float(lam[where])), MetricWarning, stacklevel=4)


def watch_stall(loss: Any, v: Tensor, lam: Tensor) -> None:
    """After a multiplier step of the ``ConstrainedLoss`` ``loss`` (violations ``v``, new
    multipliers ``lam``): update its :class:`StallWatch`, creating it on the first step."""
    if torch.compiler.is_compiling():  # a Python-side watch: fullgraph tracing skips it
        return
    if loss.stall is None:
        loss.stall = StallWatch()
    obj, values = loss.objective, loss.constraint_values.reshape(-1, len(loss.labels))

    def describe(row: int, k: int, steps: int, start: float, now: float) -> str:
        return stall_message(loss.labels[k], float(values[row, k]), loss.multiplier_rates,
                             obj.relaxation, getattr(obj.relax, "amplifier", math.nan),
                             loss.multiplier_lr, steps, start, now)

    loss.stall.update(v, lam, describe)


def stall_message(label: str, value: float, rates: str, relaxation: str, amplifier: float,
                  multiplier_lr: float, steps: int, start: float, now: float) -> str:
    """The warning's text: what stalled for how many ``steps`` (the multiplier going from
    ``start`` to ``now``), and what to change.

    >>> print(stall_message("recall >= 0.8", 0.64, "hard", "anyloss", 73.0, 0.05, 400, 1.2, 6.3))
    ... # doctest: +NORMALIZE_WHITESPACE
    'recall >= 0.8' violated for 400 steps (0/1 value 0.64 at probability 0.5) while its
    multiplier grew from 1.2 to 6.3: the relaxation may be saturated; try amplifier=10 and
    multiplier_lr=0.2, check the bound is reachable with m.check(), judge it on a whole pass
    (metricc.decisions.BestFeasible)
    """
    what = "0/1 value" if rates == "hard" else "relaxed value"
    shown = f"{value:.3g}" if math.isfinite(value) else "undefined"
    change = []
    if relaxation == "anyloss" and amplifier > CONSTRAINED_DEFAULTS["amplifier"]:
        change.append(f"amplifier={CONSTRAINED_DEFAULTS['amplifier']:g}")
    if multiplier_lr < CONSTRAINED_DEFAULTS["multiplier_lr"]:
        change.append(f"multiplier_lr={CONSTRAINED_DEFAULTS['multiplier_lr']:g}")
    # At the defaults already: what met a few more training-set constraints in the search.
    advice = (f"try {' and '.join(change)}" if change else
              "try a smaller amplifier (5) or a larger penalty (5)" if relaxation == "anyloss"
              else "try relaxation='anyloss' with amplifier=10")
    return (f"'{label}' violated for {steps} steps ({what} {shown} at probability 0.5) while its "
            f"multiplier grew from {start:.3g} to {now:.3g}: the relaxation may be saturated; "
            f"{advice}, check the bound is reachable with m.check(), judge it on a whole pass "
            "(metricc.decisions.BestFeasible)")
