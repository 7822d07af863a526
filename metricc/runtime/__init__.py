"""The loss at run time: torch-only modules, which standalone loss files carry too.

====================  ==========================================================
``options``           the string options and their checks (standard library only)
``sigmoids``          the sigmoid with its derivative, accurate where it rounds to 1
``relax_base``        ``Relaxation``: an immutable object holding its checked options
``relax``             relaxations, one registered object each
``counts``            soft confusion counts and the dtype policy
``distributed``       counts summed over ranks and remembered over batches
``hints``             input mix-ups named with their fix (probabilities as logits, ...)
``modes``             the modes as objects (``look_up_mode``), their validate/rows stages
``averages``          the class-presence test and the class and sample averages
``weights``           per-element weight maps (``loss_fn(input, target, weight=w)``)
``logit_grad``        compiled softmax losses on class indices: the logit gradient in the forward
``symbolic``          the symbolic autograd Function, and the kernel's twin on plain numbers
``loss``              ``MetricLoss``
``constraint_state``  the multipliers through casts and checkpoints
``constrained``       ``ConstrainedLoss``: a loss subject to constraints, its multipliers
``matrix``            ``MatrixLoss``: K x K metrics on the soft confusion matrix
``curve``             soft ROC/PR curves on a threshold grid, pooled over ranks and batches
``curve_loss``        ``CurveLoss``: threshold-free metrics on the soft curve
``warm_start``        ``WarmStart``: cross-entropy first, then a blend into any of these losses
====================  ==========================================================

Importing this package loads nothing; each name below is loaded from its
module on first use, so ``metricc.runtime.options`` stays usable without torch
(``metricc grad`` and ``metricc list`` never import it).
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the submodule that defines it.
_EXPORTS = {
    "AVERAGES": "options", "BACKWARDS": "options", "CHOICES": "options", "MODES": "options",
    "MULTIDIM_AVERAGES": "options", "REDUCTIONS": "options", "RELAXATION_NAMES": "options",
    "look_up_option": "options",
    "RELAXATIONS": "relax", "Relaxation": "relax", "relax": "relax", "relax_grad": "relax",
    "Option": "relax", "bound_relaxation": "relax",
    "stable_sigmoid": "sigmoids",
    "soft_counts": "counts",
    "CountPool": "distributed", "sync_counts": "distributed",
    "ClassRows": "modes", "class_rows": "modes", "validate_inputs": "modes",
    "Mode": "modes", "BINARY": "modes", "MULTICLASS": "modes", "MULTILABEL": "modes",
    "look_up_mode": "modes",
    "average_rows": "averages", "class_average_weights": "averages",
    "reduce_samples": "averages",
    "MetricLoss": "loss",
    "ConstrainedLoss": "constrained", "ConstraintSpec": "constrained",
    "MatrixLoss": "matrix", "soft_matrix": "matrix",
    "CurvePool": "curve", "CurveRelaxation": "curve", "soft_curve": "curve", "sync_curve": "curve",
    "CurveLoss": "curve_loss",
    "WarmStart": "warm_start",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'metricc.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
