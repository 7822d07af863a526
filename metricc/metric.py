"""``metricc.compile``: parse, pick the statistic's facade, cache; and how metrics unpickle.

:class:`Metric` (:mod:`metricc.facade`) is what ``compile`` returns for every statistic;
the statistic a formula is over (``Formula.statistic``) picks the facade class from
:data:`FACADES`. The ``_rebuild_*`` functions stay here, under the names pickles
written by earlier releases refer to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, cast

from .analysis.statistics import STATISTICS, analysis_errors, resolve, statistic_of
from .counts_metric import CountsMetric
from .errors import MetricError, MissingParameterError, suggest_all
from .facade import Metric
from .language.parse import Formula, check_single_identifier, known_names, parse
from .library import lookup
from .runtime.options import check_flag

__all__ = ["FACADES", "CountsMetric", "Metric", "compile"]

#: The facade class of each statistic, as its declaration names it (``Statistic.facade``).
FACADES: dict[str, type[Metric]] = {s.name: resolve(s.facade) for s in STATISTICS.values()}


def compile(formula: str, *, higher_is_better: bool | None = None,
            constraints: Iterable[str] | None = None, **params: float) -> Metric:
    """Compile a formula over ``TP FP FN TN`` (or a metric name) into a :class:`Metric`.

    ``params`` give values to the formula's free parameters; named metrics have
    defaults (``fbeta``'s ``beta=1``). ``higher_is_better`` defaults to the named
    metric's direction, else ``True``. ``constraints`` (``["recall >= 0.9"]``,
    or a ``subject to`` clause in the formula) are held in ``Metric.constraints``
    and shape :meth:`Metric.loss`, :meth:`Metric.check` and
    :meth:`Metric.best_threshold` (``docs/constraints.md``).

    >>> import metricc
    >>> metricc.compile("fbeta", beta=2.0).value(tp=30, fp=5, fn=10, tn=955)
    0.7692307692307693
    """
    if not isinstance(formula, str):
        raise MetricError(f"formula must be a string, got {type(formula).__name__}")
    if higher_is_better is not None:  # a flag like every other: "False" is not False
        higher_is_better = check_flag("higher_is_better", higher_is_better)
    if constraints is not None:
        if isinstance(constraints, str) or not isinstance(constraints, Iterable):
            raise MetricError("constraints must be a list of strings, e.g. ['recall >= 0.9'], "
                              f"got {constraints!r}")
        constraints = tuple(constraints)
    # K x K parameters (a weight or cost matrix) arrive as lists, arrays or tensors.
    params = {k: _hashable(v) for k, v in params.items()}
    key = (formula, tuple(sorted((k, repr(v)) for k, v in params.items())), higher_is_better,
           constraints)
    try:
        return _compile_cached(key, formula, higher_is_better, tuple(params.items()),
                               constraints or ())
    except TypeError as e:  # unhashable parameter values
        raise MetricError(f"parameters must be numbers: {e}") from None


def _hashable(value: Any) -> Any:
    if hasattr(value, "tolist") and not isinstance(value, (int, float)):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


def _check_parameter_ranges(parsed: Any, given: Mapping[str, float]) -> None:
    """Refuse a named metric's parameter outside its range (``fbeta`` with ``beta < 0``)."""
    for metric_name in parsed.metrics:
        metric = lookup(metric_name)
        assert metric is not None
        for param, (low, why) in metric.bounds.items():
            value = given.get(param)
            if not isinstance(value, bool) and isinstance(value, (int, float)) and value < low:
                raise MetricError(f"{metric.name}'s {param} must be >= {low:g}, got {value!r}: {why}")


def _rebuild_metric(formula: str, param_items: tuple[tuple[str, float], ...],
                    higher_is_better: bool | None, constraints: tuple[str, ...] = ()) -> Metric:
    """Unpickle a :class:`Metric`: compile it again (a cache hit if it was compiled here)."""
    return compile(formula, higher_is_better=higher_is_better,
                   constraints=constraints or None, **dict(param_items))


Metric.rebuild = staticmethod(_rebuild_metric)  # type: ignore[assignment]
#: How a K x K ``MatrixMetric`` unpickled in earlier releases (kept for their pickles).
_recompile = _rebuild_metric


def _rebuild_constraint_metric(spec: tuple[Any, ...], index: int) -> Metric:
    """Unpickle the metric of constraint ``index`` of the metric ``compile(*spec)``."""
    return _rebuild_metric(*spec).constraints[index].metric


def _rebuild_loss_class(recipe: tuple[Any, ...]) -> type[Any]:
    """Unpickle a generated loss class (pickles of earlier releases; new ones name
    :func:`metricc.emit.loss_class.rebuild_loss_class`).

    ``recipe`` is a metric's ``_recipe``; pickles written before recipes existed hold
    ``compile``'s arguments instead.
    """
    from .emit.loss_class import rebuild_loss_class  # emit imports torch: not at import time

    if callable(recipe[0]):
        return rebuild_loss_class(recipe)
    return _rebuild_metric(*recipe).loss_class


def _rebuild_loss(recipe: tuple[Any, ...]) -> Any:
    """Unpickle a loss module written by an earlier release: an empty instance of its
    metric's (re)compiled loss class; pickle then restores its state with ``__setstate__``."""
    cls = _rebuild_loss_class(recipe)
    return object.__new__(cls)  # what cls.__new__ is: loss classes define no __new__


def _reduce_loss(self: Any, protocol: int) -> tuple[Any, ...]:
    """``__reduce_ex__`` of generated loss classes in earlier releases (kept importable)."""
    return (_rebuild_loss, (type(self)._metric_recipe,), self.__dict__)


def _constraint_metric(formula: Formula, higher_is_better: bool) -> Metric:
    """How a constraint's normalised side is compiled (no parameters, no name)."""
    return CountsMetric(formula, {}, None, higher_is_better)


@lru_cache(maxsize=256)
def _compile_cached(key: Any, formula: str, higher_is_better: bool | None,
                    param_items: tuple[tuple[str, float], ...],
                    constraints: tuple[str, ...] = ()) -> Metric:
    params = dict(param_items)
    named = lookup(formula.strip())
    check_single_identifier(formula)
    with analysis_errors(formula):
        parsed = parse(formula)
        given = {**parsed.defaults, **params}
        known = (*parsed.parameters, *getattr(parsed, "matrix_parameters", ()))
        extra = [k for k in params if k not in known]
        if extra:
            hint = suggest_all(extra, list(known))
            raise MetricError(f"unknown parameter{'s' if len(extra) > 1 else ''} "
                              f"{', '.join(map(repr, extra))}{hint}; "
                              f"this formula's parameters: {', '.join(known) or 'none'}")
        missing = [p for p in known if p not in given]
        if missing:
            hints = suggest_all(missing, known_names())
            raise MissingParameterError(
                f"formula has parameter{'s' if len(missing) > 1 else ''} "
                f"{', '.join(missing)} with no value{hints}; pass "
                + ", ".join(f"{p}=<number>" for p in missing)
                + " to metricc.compile, or fix the name if it is a typo",
                missing,
            )
        _check_parameter_ranges(parsed, given)
        direction = higher_is_better
        if direction is None:
            direction = named.higher_is_better if named else True
        name = named.name if named else None
        if name is None and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", formula.strip()):
            name = formula.strip()
        statistic = statistic_of(parsed)
        facade = FACADES[statistic.name]
        if constraints and "parse_constraints" in facade.not_applicable:
            raise MetricError(f"constraints= does not apply to {formula.strip()!r}, a {facade.kind} "
                              f"metric: {facade.not_applicable['parse_constraints']}")
        built: tuple[Any, ...] = ()
        if getattr(parsed, "constraints", ()) or constraints:
            from .constraints import build_constraints

            assert isinstance(parsed, Formula)  # constraints are refused above for other statistics
            built = build_constraints(parsed, constraints, _constraint_metric)
        # each statistic's facade takes its own parsed record (the statistic_of() above)
        metric = facade(cast(Any, parsed), given, name, direction, built)
        # this very cache entry, for pickling
        metric._spec = (formula, param_items, higher_is_better, constraints)
        for i, c in enumerate(metric.constraints):
            # a constraint's side has no formula of its own to compile: it comes back
            # as the constraint of this metric
            c.metric._constraint_recipe = (_rebuild_constraint_metric, (metric._spec, i))
        return metric
