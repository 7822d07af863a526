"""Input hints: checks that catch a likely mix-up of the input and name the fix.

Torch only (standalone files carry it); :func:`metricc.runtime.modes.validate_inputs`
calls them.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from ..errors import MetricError, MetricWarning

#: Below this many elements a batch of logits may well all lie in [0, 1] by chance.
_PROBABILITY_HINT_MIN = 64


def _warn_if_probabilities(x: Tensor, mode: str) -> None:
    """Warn when ``from_logits=True`` input looks like probabilities: the loss would apply a
    second sigmoid/softmax and train on a squashed, nearly flat signal."""
    if mode == "multiclass":
        if x.dim() < 2 or not bool(((x.sum(1, dtype=torch.float64) - 1).abs() <= 1e-3).all()):
            return
        why = "every element's class scores lie in [0, 1] and sum to 1"
        fix = "pass from_logits=False (or the logits before softmax)"
    else:
        if x.numel() < _PROBABILITY_HINT_MIN:
            return
        why = f"all {x.numel()} scores lie in [0, 1]"
        fix = "pass from_logits=False if they are probabilities (or the logits before sigmoid)"
    warnings.warn(f"input looks like probabilities, but from_logits=True ({why}); {fix}. "
                  "Silence this with validate_args=False or the warnings module if they "
                  "really are logits.", MetricWarning, stacklevel=6)


def _multilabel_validate(input: Tensor, target: Tensor) -> None:
    """Multilabel targets hold one 0/1 label per class: the input's shape ``(N, C, *)``."""
    if input.dim() >= 2 and target.shape == input.shape[:1] + input.shape[2:]:
        raise MetricError(
            f"mode='multilabel' needs target of the input's shape {tuple(input.shape)} (one 0/1 "
            f"label per class), got {tuple(target.shape)}, the shape of class indices: use "
            "mode='multiclass' for one class per element, or one-hot encode the target "
            f"(torch.nn.functional.one_hot(target, {input.shape[1]}).movedim(-1, 1))")
