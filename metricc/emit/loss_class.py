"""The loss class: generated kernels executed into a subclass of the statistic's runtime loss."""

from __future__ import annotations

import builtins
import inspect
import linecache
import types
from typing import TYPE_CHECKING, Any

import sympy

from .counts import KERNEL_NAMES

if TYPE_CHECKING:
    from ..runtime.loss import MetricLoss


def loss_parameters() -> list[inspect.Parameter]:
    """The options of :class:`MetricLoss`: its ``__init__`` parameters after ``self``.

    ``Metric.loss`` checks option names against them and standalone files copy
    them into their class's signature.
    """
    from ..runtime.loss import MetricLoss

    return list(inspect.signature(MetricLoss.__init__).parameters.values())[1:]


def build_loss_class(kernels_source: str, name: str | None, formula: str, expr: sympy.Expr,
                     higher_is_better: bool, micro_refusal: str = "") -> type[MetricLoss]:
    """A :class:`MetricLoss` subclass holding the kernels of ``kernels_source``.

    ``kernels_source`` must come from :func:`emit_kernels`: it is executed.
    ``micro_refusal`` (for metrics that use TN) is why multiclass micro-averaging is refused.
    """
    import torch

    from ..runtime.loss import MetricLoss

    filename = remember_source(f"<metricc {abs(hash(kernels_source)):x}>", kernels_source)
    namespace: dict[str, Any] = {"torch": torch}
    exec(builtins.compile(kernels_source, filename, "exec"), namespace)
    attrs = {
        **{k: staticmethod(namespace[k]) for k in KERNEL_NAMES},
        "formula": formula,
        "source": kernels_source,
        "higher_is_better": higher_is_better,
        "micro_refusal": micro_refusal,
        "__module__": "metricc.generated",
        "__doc__": f"Loss for the metric {formula!r} = {expr}.",
    }
    class_name = ("".join(part.capitalize() for part in name.split("_")) + "Loss" if name
                  else "CustomMetricLoss")
    attrs["forward"] = own_copy(MetricLoss.forward, f"{class_name}.forward")
    return type(class_name, (MetricLoss,), attrs)


#: Generated sources kept in ``linecache`` (the compile cache holds 256 metrics).
LINECACHE_SIZE = 256
_LINECACHE_KEYS: dict[str, None] = {}


def remember_source(filename: str, source: str) -> str:
    """Put generated ``source`` in ``linecache`` under ``filename`` and return the name.

    linecache lets tracebacks and torch.compile show the generated lines; it keeps the
    latest LINECACHE_SIZE sources (like the compile cache), not one per formula forever.
    """
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
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
