"""The loss's string options, validated in one place, with did-you-mean suggestions.

Needs only the standard library: the CLI reads the choices from here without
importing torch, and standalone loss files carry this module.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

from ..errors import MetricError, suggest

#: Names of the relaxations; :data:`metricc.runtime.relax.RELAXATIONS` maps each
#: to its object (a test keeps the two in step).
RELAXATION_NAMES = ("anyloss", "linear", "sigmoid", "softmax", "self_adjusting")
REDUCTIONS = ("mean", "sum", "none")
BACKWARDS = ("symbolic", "autograd")
MULTIDIM_AVERAGES = ("global", "samplewise")
MODES = ("binary", "multiclass", "multilabel")
DEFAULT_MODE = "binary"  # of a loss, score() or metric() given none (K x K: multiclass only)
AVERAGES = ("micro", "macro", "weighted", "none")

#: The curve losses' defaults, the one place they are written: the soft curve's grid
#: (:class:`~metricc.runtime.curve.CurveRelaxation`: ``bins`` thresholds, kernel half-width
#: ``width`` in bins, ``space``, logit ``clip``) and the smooth ``best()``'s temperatures
#: (:class:`~metricc.runtime.curve_loss.SmoothMax`, the analysis's ``DEFAULT_TAU``). Swept on
#: the development sets in ``docs/curve_defaults.md``.
CURVE_DEFAULTS: dict[str, Any] = {"bins": 256, "width": 1.0, "space": "probability", "clip": 8.0,
                                  "tau": 0.01, "tau_gate": 0.001}

#: The allowed values of every string option, by option name.
CHOICES: dict[str, tuple[str, ...]] = {
    "relaxation": RELAXATION_NAMES,
    "backward": BACKWARDS,
    "multidim_average": MULTIDIM_AVERAGES,
    "reduction": REDUCTIONS,
    "mode": MODES,
    "average": AVERAGES,
}


def look_up_option(name: str, value: Any, choices: Sequence[str] | None = None) -> str:
    """``value`` if it is one of the ``choices`` of option ``name``, else a :class:`MetricError`.

    ``choices`` defaults to ``CHOICES[name]``. The message lists the choices
    and suggests the closest for a likely typo.

    >>> look_up_option("reduction", "sum")
    'sum'
    >>> look_up_option("reduction", "summ")
    Traceback (most recent call last):
    ...
    metricc.errors.MetricError: reduction='summ' is not one of 'mean', 'sum', 'none' (did you mean 'sum'?)
    """
    allowed = CHOICES[name] if choices is None else tuple(choices)
    if isinstance(value, str) and value in allowed:
        return value
    hint = suggest(value, list(allowed)) if isinstance(value, str) else ""
    raise MetricError(f"{name}={value!r} is not one of {', '.join(map(repr, allowed))}{hint}")


def check_class_options(
    mode: Any, average: str, ignore_index: Any, classes: Any, class_weights: Any,
) -> tuple[int | None, tuple[int, ...] | None, tuple[float, ...] | None]:
    """Validate ``average``, ``ignore_index``, ``classes``, ``class_weights`` against
    ``mode`` (a ``modes.Mode``, looked up by ``modes.look_up_mode``: this module, which
    needs only the standard library, comes before it).

    Returns ``(ignore_index, classes, class_weights)`` as plain ints and floats.
    """
    look_up_option("average", average)
    if ignore_index is not None:
        ignore_index = check_integer("ignore_index", ignore_index)
        if not mode.exclusive and ignore_index in (0, 1):
            # 0 and 1 are the labels themselves: ignoring one drops every positive (or negative)
            raise MetricError(f"ignore_index={ignore_index} is a label of mode={mode!r} (targets "
                              f"hold 0 and 1): it would leave out every "
                              f"{'positive' if ignore_index else 'negative'} element; give the "
                              "value that marks elements to leave out (such as 255 or -100)")
    if not mode.class_dim and (classes is not None or class_weights is not None):
        raise MetricError("classes and class_weights pick and weigh the classes of an "
                          "(N, C, *) input; mode='binary' has a single class: use "
                          "mode='multiclass' or 'multilabel'")
    cl = None
    if classes is not None:
        cl = tuple(check_integer("classes", c) for c in _as_sequence("classes", classes))
        if not cl:
            raise MetricError("classes is empty: list at least one class index, or pass None "
                              "for all")
        if min(cl) < 0:
            raise MetricError(f"classes must be class indices >= 0, got {list(cl)}")
        if len(set(cl)) != len(cl):
            raise MetricError(f"classes lists a class twice: {list(cl)}")
    cw = None
    if class_weights is not None:
        if average == "none":
            raise MetricError("class_weights weigh the classes in an average; average='none' "
                              "returns each class's loss on its own, so weights do not apply")
        cw = tuple(_as_float(x) for x in _as_sequence("class_weights", class_weights))
        if not cw:
            raise MetricError("class_weights is empty: give one weight per class, or pass None")
    return ignore_index, cl, cw


def select_classes(num_classes: int, classes: tuple[int, ...] | None,
                   class_weights: tuple[float, ...] | None
                   ) -> tuple[list[int] | None, list[float] | None]:
    """Check ``classes`` and ``class_weights`` against the input's ``num_classes``.

    Returns the selected class indices (``None`` for all) and their weights.
    """
    if classes is not None and max(classes) >= num_classes:
        bad = [c for c in classes if c >= num_classes]
        raise MetricError(f"classes names class {bad[0]}, but the input has {num_classes} "
                          f"classes (indices 0 to {num_classes - 1})")
    chosen = list(classes) if classes is not None else list(range(num_classes))
    if class_weights is None:
        return (None if classes is None else chosen), None
    if len(class_weights) != num_classes:
        raise MetricError(f"class_weights has {len(class_weights)} weights but the input has "
                          f"{num_classes} classes: give one weight per class index (the weights "
                          "of classes left out by classes= are not used)")
    weights = [class_weights[c] for c in chosen]
    if not sum(weights) > 0:
        raise MetricError("class_weights of the selected classes are all 0; at least one must "
                          "be > 0")
    return (None if classes is None else chosen), weights


def check_number(name: str, value: Any, *, positive: bool = False,
                 nonnegative: bool = True) -> float:
    """``value`` as a float if it is a finite number in range, else a :class:`MetricError`.

    Numbers only: a string, a bool (``True`` is 1) or NaN would otherwise be
    coerced, and end up as a NaN loss or a string in a generated file.

    >>> check_number("amplifier", 50)
    50.0
    >>> check_number("offset", float("nan"), nonnegative=False)
    Traceback (most recent call last):
    ...
    metricc.errors.MetricError: offset must be a finite number, got nan
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if positive:
        if not (ok and value > 0):
            raise MetricError(f"{name} must be a finite number > 0, got {value!r}")
    elif nonnegative:
        if not (ok and value >= 0):
            raise MetricError(f"{name} must be a finite number >= 0, got {value!r}")
    elif not ok:
        raise MetricError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def check_flag(name: str, value: Any) -> bool:
    """``value`` if it is ``True`` or ``False``, else a :class:`MetricError`.

    ``bool("no")`` is ``True``: a flag given as a string is refused, not coerced.

    >>> check_flag("from_logits", "no")
    Traceback (most recent call last):
    ...
    metricc.errors.MetricError: from_logits must be True or False, got 'no'
    """
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)  # numpy's booleans (e.g. a comparison of numpy numbers)
    if not isinstance(value, bool):
        raise MetricError(f"{name} must be True or False, got {value!r}")
    return value


def _as_sequence(name: str, value: Any) -> list[Any]:
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()  # a tensor or array
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise MetricError(f"{name} must be a list of numbers, got {value!r}")
    return list(value)


def check_integer(name: str, value: Any) -> int:
    """``value`` as an int if it is an integer (not a bool), else a :class:`MetricError`.

    >>> check_integer("ignore_index", 255)
    255
    """
    if isinstance(value, bool):
        raise MetricError(f"{name} must hold integers, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise MetricError(f"{name} must hold integers, got {value!r}") from None


def _as_float(value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = float("nan")
    if isinstance(value, bool) or not math.isfinite(x) or x < 0:
        raise MetricError(f"class_weights must be finite numbers >= 0, got {value!r}")
    return x


def class_count(num_classes: int | None, num_labels: int | None) -> int | None:
    """The size of dim 1, given as ``num_classes`` or as torchmetrics' multilabel name
    ``num_labels``: the same thing in every statistic's ``score`` and ``metric``.

    >>> class_count(None, 4), class_count(3, None), class_count(5, 5)
    (4, 3, 5)
    """
    if num_labels is None:
        return num_classes
    if num_classes is not None and num_classes != num_labels:
        raise MetricError(f"num_classes={num_classes!r} and num_labels={num_labels!r} name the same "
                          "thing (the size of dim 1; num_labels is torchmetrics' name): pass one")
    return num_labels
