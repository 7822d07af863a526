"""One check of the keyword arguments a facade method takes: a typo is a :class:`MetricError`
with a did-you-mean, never Python's bare ``TypeError`` (or torchmetrics' ``ValueError``).

``value``, ``score``, ``metric`` and ``best_threshold`` of every statistic's facade are
wrapped by :func:`checked_keywords`; ``verify`` passes its options on to its stage's function
and checks them against it (:func:`check_passed_on`); ``loss`` checks its options itself,
against the loss class's parameters.

>>> import metricc
>>> metricc.compile("f1").score([1, 0], [1, 0], averag="macro")
Traceback (most recent call last):
...
metricc.errors.MetricError: score() has no option 'averag' (did you mean 'average'?); its options are ...
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .errors import MetricError, suggest

__all__ = ["TORCHMETRICS_OPTIONS", "check_passed_on", "checked_keywords", "unknown_keyword"]

F = TypeVar("F", bound=Callable[..., Any])

#: Keyword arguments ``torchmetrics.Metric.__init__`` takes (``metric(**kwargs)`` passes them on).
TORCHMETRICS_OPTIONS = ("compute_on_cpu", "dist_sync_on_step", "process_group", "dist_sync_fn",
                        "distributed_available_fn", "sync_on_compute", "compute_with_cache")

#: Names other libraries use for an option, and what metricc calls it.
_OTHER_NAMES = {
    "task": "torchmetrics' task= is mode= here: mode='binary', 'multiclass' or 'multilabel'",
}


def unknown_keyword(method: str, key: str, options: Sequence[str]) -> MetricError:
    """The error for ``method(key=...)`` when ``method`` takes only ``options``.

    >>> print(unknown_keyword("metric", "task", ["mode", "num_classes"]))
    metric() has no option 'task' (torchmetrics' task= is mode= here: mode='binary', 'multiclass' or
    'multilabel'); its options are mode, num_classes
    """
    other = _OTHER_NAMES.get(key)
    note = f" ({other})" if other is not None else suggest(key, list(options))
    return MetricError(f"{method}() has no option {key!r}{note}; its options are "
                       f"{', '.join(options) or 'none'}")


def checked_keywords(extra: Sequence[str] = ()) -> Callable[[F], F]:
    """Wrap a method so that an unknown keyword raises :func:`unknown_keyword`'s error.

    ``extra``: the keywords a ``**kwargs`` parameter accepts (none: it takes no others).
    """
    def wrap(fn: F) -> F:
        params = inspect.signature(fn).parameters.values()
        named = [p.name for p in params if p.name != "self" and p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
        allowed = frozenset(named) | frozenset(extra)
        options = [*named, *extra]
        method = fn.__name__
        target, refuse = fn, unknown_keyword  # closure cells: the body reads no globals

        def checked(*args: Any, **kwargs: Any) -> Any:
            for key in kwargs:
                if key not in allowed:
                    raise refuse(method, key, options)
            return target(*args, **kwargs)

        # Rebuilt with the method's own globals: doctest matches a function to its module
        # by __globals__, and would skip the wrapped method's examples otherwise (the
        # body reads only its closure and builtins, so any globals serve it).
        fixed = types.FunctionType(checked.__code__, fn.__globals__, method, None,  # type: ignore[attr-defined]
                                   checked.__closure__)
        return functools.update_wrapper(fixed, fn)  # type: ignore[return-value]

    return wrap


def check_passed_on(method: str, options: Mapping[str, Any], to: Callable[..., Any]) -> None:
    """Refuse an option of ``method(**options)`` that ``to``, the stage function the options
    are passed on to, has no keyword-only parameter for: :func:`unknown_keyword`'s error, where
    Python would raise a bare ``TypeError`` naming the internal function."""
    takes = [p.name for p in inspect.signature(to).parameters.values()
             if p.kind is inspect.Parameter.KEYWORD_ONLY]
    for key in options:
        if key not in takes:
            raise unknown_keyword(method, key, takes)
