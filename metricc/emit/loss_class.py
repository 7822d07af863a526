"""The loss class: generated kernels executed into a subclass of the statistic's runtime loss."""

from __future__ import annotations

import builtins
import importlib
import inspect
import linecache
import threading
import types
from collections.abc import Mapping
from typing import Any

from ..analysis.statistics import Statistic, resolve

__all__ = ["build_kernel", "build_loss_class", "loss_class_name", "loss_parameters",
           "own_copy", "rebuild_loss", "rebuild_loss_class", "reduce_loss", "remember_source"]

def loss_parameters(statistic: Statistic) -> list[inspect.Parameter]:
    """The options of the statistic's runtime loss: its ``__init__`` parameters after ``self``.

    ``Metric.loss`` checks option names against them and standalone files copy
    them into their class's signature.
    """
    return list(inspect.signature(resolve(statistic.loss_class).__init__).parameters.values())[1:]


def loss_class_name(name: str | None, statistic: Statistic) -> str:
    """The one class-name rule, in process and in standalone files: ``F1Loss`` for ``f1``,
    ``QuadraticKappaLoss`` for ``quadratic_kappa``, the statistic's ``unnamed_loss`` else.

    >>> from metricc.analysis.statistics import STATISTICS
    >>> loss_class_name("balanced_accuracy", STATISTICS["counts"])
    'BalancedAccuracyLoss'
    >>> loss_class_name(None, STATISTICS["matrix"])
    'CustomMatrixMetricLoss'
    """
    if not name:
        return statistic.unnamed_loss
    return "".join(part[:1].upper() + part[1:] for part in name.split("_")) + "Loss"


def build_loss_class(statistic: Statistic, kernels_source: str, class_name: str,
                     attrs: Mapping[str, Any], recipe: tuple[Any, ...]) -> type:
    """A subclass of the statistic's runtime loss holding the kernels of ``kernels_source``.

    ``kernels_source`` must come from the statistic's declared
    ``emitter``: it is executed, with
    ``torch`` and the statistic's ``kernel_helpers`` in its namespace. ``attrs`` are
    further class attributes (``formula``, ``higher_is_better``, ...). ``recipe`` is
    ``(function, args)`` that compiles the metric again: instances pickle (and
    ``torch.save``) as the recipe plus their state (:func:`reduce_loss`).
    """
    import torch

    base = resolve(statistic.loss_class)
    runtime = importlib.import_module(statistic.loss_class.rpartition(".")[0])
    filename = remember_source(f"<metricc {statistic.name} {abs(hash(kernels_source)):x}>",
                               kernels_source)
    namespace: dict[str, Any] = {"torch": torch,
                                 **{k: getattr(runtime, k) for k in statistic.kernel_helpers}}
    # The source is generated from validated SymPy trees only (metricc.emit).
    exec(builtins.compile(kernels_source, filename, "exec"), namespace)
    body = {
        **{k: staticmethod(namespace[k]) for k in statistic.kernel_names},
        "source": kernels_source,
        "__module__": "metricc.generated",
        **attrs,
        # Generated classes live in no importable module, so pickle could not find them
        # by name: their instances pickle as the metric's recipe plus their state.
        "_metric_recipe": recipe,
        "__reduce_ex__": reduce_loss,
        # and the class itself, where a module holds it (a constraint's kernels)
        "_class_recipe": (rebuild_loss_class, (recipe,)),
    }
    # A forward of its own per class: torch.compile counts recompiles per code object.
    body["forward"] = own_copy(base.forward, f"{class_name}.forward")
    return type(class_name, (base,), body)


def rebuild_loss_class(recipe: tuple[Any, ...]) -> type:
    """Unpickle a generated loss class: its metric's (re)compiled ``loss_class``."""
    function, args = recipe
    return function(*args).loss_class


def rebuild_loss(recipe: tuple[Any, ...]) -> Any:
    """Unpickle a loss module: an empty instance of its metric's (re)compiled loss class;
    pickle then restores its state (options, buffers, memory) with ``__setstate__``."""
    cls = rebuild_loss_class(recipe)
    return object.__new__(cls)  # what cls.__new__ is: loss classes define no __new__


def reduce_loss(self: Any, protocol: int) -> tuple[Any, ...]:
    """``__reduce_ex__`` of generated loss classes (pickle, ``copy.deepcopy``, ``torch.save``)."""
    return (rebuild_loss, (type(self)._metric_recipe,), self.__dict__)


#: Generated sources kept in ``linecache`` (the compile cache holds 256 metrics).
LINECACHE_SIZE = 256
_LINECACHE_KEYS: dict[str, None] = {}
# Compiling in several threads at once: the bookkeeping below must not interleave.
_LINECACHE_LOCK = threading.Lock()


def remember_source(filename: str, source: str) -> str:
    """Put generated ``source`` in ``linecache`` under ``filename`` and return the name.

    linecache lets tracebacks and torch.compile show the generated lines; it keeps the
    latest LINECACHE_SIZE sources (like the compile cache), not one per formula forever.
    """
    lines = source.splitlines(True)
    with _LINECACHE_LOCK:
        linecache.cache[filename] = (len(source), None, lines, filename)
        _LINECACHE_KEYS.pop(filename, None)
        _LINECACHE_KEYS[filename] = None
        while len(_LINECACHE_KEYS) > LINECACHE_SIZE:
            oldest = next(iter(_LINECACHE_KEYS))
            del _LINECACHE_KEYS[oldest]
            linecache.cache.pop(oldest, None)
    return filename


def own_copy(fn: Any, qualname: str) -> Any:
    """``fn`` with a code object of its own.

    torch.compile caches compiled frames per code object: every generated class
    sharing ``MetricLoss.forward`` made the 9th metric compiled in one process hit
    the recompile limit (``FailOnRecompileLimitHit`` under ``fullgraph=True``).
    """
    try:
        code = fn.__code__.replace(co_qualname=qualname)
    except TypeError:  # Python 3.10: no co_qualname; replace() still makes a new code object
        code = fn.__code__.replace(co_firstlineno=fn.__code__.co_firstlineno)
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__annotations__ = dict(fn.__annotations__)
    copy.__doc__ = fn.__doc__
    copy.__qualname__ = qualname
    return copy


def build_kernel(source: str, name: str) -> Any:
    """The function ``name`` of ``source``, which must come from this package's emitters
    (e.g. :func:`metricc.emit.counts.emit_curvature_kernel`): executed with ``torch`` alone
    in its namespace, as :func:`build_loss_class` executes kernels."""
    import torch

    filename = remember_source(f"<metricc kernel {abs(hash(source)):x}>", source)
    namespace: dict[str, Any] = {"torch": torch}
    # The source is generated from validated SymPy trees only (metricc.emit).
    exec(builtins.compile(source, filename, "exec"), namespace)
    return namespace[name]
