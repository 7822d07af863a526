"""Input hints: checks that catch a likely mix-up of the input and name the fix.

Torch only (standalone files carry it); :func:`metricc.runtime.modes.validate_inputs`
calls them.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from ..errors import MetricError, MetricWarning

#: Below this many scores, logits may well all lie in [0, 1] by chance; from it on, scores all
#: in [0, 1] are probabilities. A logit lands in [0, 1] with chance at most 1/2 wherever
#: logits lie symmetrically about 0, however narrow their spread (a fresh model's near-0
#: logits are the worst case), so 32 in a row has chance at most 2^-32 = 2.3e-10 (N(0, 1)
#: logits: 0.34^32 = 1e-15). The count runs over consecutive from_logits calls, so one call of
#: 32 scores warns, and small batches (8 scores each) gather the same evidence over 4 steps.
_PROBABILITY_HINT_MIN = 32
#: Binary/multilabel from_logits scores seen in a row lying in [0, 1] (this process); the
#: hint is given once per such run (a score outside [0, 1] starts a new one).
_IN_UNIT_RUN = [0]


def warn_if_probabilities(x: Tensor, mode: Any, in_unit: bool) -> None:
    """Warn when ``from_logits=True`` input looks like probabilities: the loss would apply a
    second sigmoid/softmax and train on a squashed, nearly flat signal. ``in_unit``: every
    score lies in [0, 1] (else they are logits, and the run of such scores starts again).
    ``mode``: a ``modes.Mode`` (this module comes before it)."""
    if not in_unit:
        _IN_UNIT_RUN[0] = 0
        return
    if mode.exclusive:
        if x.dim() < 2 or not bool(((x.sum(1, dtype=torch.float64) - 1).abs() <= 1e-3).all()):
            return
        why = "every element's class scores lie in [0, 1] and sum to 1"
        fix = "pass from_logits=False (or the logits before softmax)"
    else:
        before = _IN_UNIT_RUN[0]
        seen = _IN_UNIT_RUN[0] = before + x.numel()
        if not before < _PROBABILITY_HINT_MIN <= seen:  # once per run, when it gets long enough
            return
        why = (f"all {seen} scores lie in [0, 1]" if seen == x.numel()
               else f"the last {seen} scores, over several batches, all lie in [0, 1]")
        fix = "pass from_logits=False if they are probabilities (or the logits before sigmoid)"
    warnings.warn(f"input looks like probabilities, but from_logits=True ({why}); {fix}. "
                  "Silence this with validate_args=False or the warnings module if they "
                  "really are logits.", MetricWarning, stacklevel=6)


#: The ignore_index values already warned about by :func:`warn_if_ignore_drops_positives`.
_IGNORE_WARNED: set[int] = set()


def warn_if_ignore_drops_positives(target: Tensor, ignore_index: int | None, mode: Any,
                                    kept_range: list[float], stacklevel: int = 6) -> None:
    """Warn, once per ``ignore_index``, when it removed every positive of a 0/1 batch that held
    some: a 0/255 mask with ``ignore_index=255`` leaves only negatives, a constant loss
    (1 for F1) with zero gradient. ``kept_range``: the min and max of the kept targets (as
    read, float32 ones as int32 bit patterns: +0.0 and 0 both read 0), or empty. The
    hard-label score and metric warn here too (``stacklevel``: their caller's frame)."""
    if ignore_index is None or mode.exclusive or not kept_range or kept_range[0] != 0 \
            or kept_range[1] != 0 or ignore_index in _IGNORE_WARNED or ignore_index in (0, 1):
        return
    if not bool((target == ignore_index).any()):
        return  # nothing ignored: a batch without positives, as batches may be
    _IGNORE_WARNED.add(ignore_index)
    warnings.warn(f"ignore_index={ignore_index} removed every positive of this batch: the kept "
                  "targets are all 0, so a loss is constant with zero gradient (and a score "
                  "counts no positive). If "
                  f"{ignore_index} marks the foreground (a 0/{ignore_index} mask), pass "
                  f"target / {ignore_index} without ignore_index; if it marks elements to "
                  "leave out, ignore this (it is said once).", MetricWarning,
                  stacklevel=stacklevel)


def multilabel_validate(input: Tensor, target: Tensor) -> None:
    """Multilabel targets hold one 0/1 label per class: the input's shape ``(N, C, *)``."""
    if input.dim() >= 2 and target.shape == input.shape[:1] + input.shape[2:]:
        raise MetricError(
            f"mode='multilabel' needs target of the input's shape {tuple(input.shape)} (one 0/1 "
            f"label per class), got {tuple(target.shape)}, the shape of class indices: use "
            "mode='multiclass' for one class per element, or one-hot encode the target "
            f"(torch.nn.functional.one_hot(target, {input.shape[1]}).movedim(-1, 1))")


def label_error(mode: str, lo: float, hi: float, *, hard: bool,
                call: str = "forward takes (input, target)") -> MetricError:
    """The error for 0/1 targets holding values from ``lo`` to ``hi``: one message for the
    loss (``hard=False``: soft labels in [0, 1] pass), ``score`` and the stateful metric
    (``hard=True``: only 0 and 1), with the fix of the likely cause.

    >>> print(label_error("binary", 0, 255, hard=True, call="update takes (preds, target)"))
    target has values outside [0, 1] (min 0, max 255); binary targets hold only 0 and 1. For 0/255
    masks pass target / 255 (divide by 255), or ignore_index=255 if 255 marks elements to leave out.
    """
    lo, hi = lo + 0.0, hi + 0.0  # + 0.0: -0.0 reads 0
    kind = f"{mode} targets hold only 0 and 1" if hard else f"{mode} targets are 0/1, or soft labels in [0, 1]"
    if 0 <= lo and hi <= 1:  # hard labels only: a fraction
        head = f"target must hold only 0 and 1, found values from {lo:.4g} to {hi:.4g}"
    else:
        head = f"target has values outside [0, 1] (min {lo:.4g}, max {hi:.4g})"
    if hi == 255:
        hint = (" For 0/255 masks pass target / 255 (divide by 255), or ignore_index=255 if "
                "255 marks elements to leave out.")
    elif lo < 0 or (hard and 0 <= lo and hi <= 1):
        hint = f" Are the arguments swapped? {call}, predictions first."
    elif hi > 1 and float(hi).is_integer() and lo >= 0:
        hint = (" For class indices use mode='multiclass' (or ignore_index=<value> for a label "
                "marking elements to leave out).")
    else:
        hint = ""
    return MetricError(f"{head}; {kind}.{hint}")


def integer_preds_error(found: float) -> MetricError:
    """The error for binary or multilabel integer predictions other than 0 and 1 (``3`` would
    otherwise count as a positive: ``3 >= 0.5``).

    >>> print(integer_preds_error(3))
    preds holds integers other than 0 and 1 (3), but binary and multilabel preds are 0/1 labels or
    scores: pass
    probabilities in [0, 1] as floats or logits with from_logits=True (score() also takes any
    scores with threshold=<cut>); for class labels use mode='multiclass'
    """
    return MetricError(f"preds holds integers other than 0 and 1 ({found:g}), but binary and multilabel preds are "
                       "0/1 labels or scores: pass probabilities in [0, 1] as floats or logits with "
                       "from_logits=True (score() also takes any scores with threshold=<cut>); "
                       "for class labels use mode='multiclass'")


def overflow_message(formula: str, losses: Tensor) -> str:
    """Why a loss of ``formula`` came out non-finite: its value overflowed at this batch's counts.

    >>> overflow_message("exp(exp(exp(TP)))", torch.tensor([float("-inf")]))
    "the loss of 'exp(exp(exp(TP)))' is -inf at this batch's counts: the formula overflows ..."
    """
    bad = losses[~torch.isfinite(losses)].flatten()[0].item()
    return (f"the loss of {formula!r} is {bad} at this batch's counts: the formula overflows "
            "(past 3.4e38 in float32, 1.8e308 in float64), as exp of a count or a count to the "
            "power of a count soon do; rescale the counts (exp(TP/n) with n = TP+FP+FN+TN) or "
            "bound the formula (min(..., 100)). validate_args=False skips this check")
