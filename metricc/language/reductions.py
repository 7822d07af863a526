"""What the statistics built of reductions share while resolving names: the curve's
(``area``, ``steps``, ``best`` over thresholds) and the groups' (``gap``, ``worst``, ... over
groups). A formula's bindings are substituted where they are used, named metrics are parsed
once, their parameters and defaults noted; each statistic's resolver adds what its names mean.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import sympy

from ..library import lookup

__all__ = ["ReductionResolver"]

#: Named metrics' parsed formulas, parsed once per process (they are immutable).
_LIBRARY: dict[str, Any] = {}


class ReductionResolver:
    """One formula's names: bindings, named metrics and parameters.

    Subclasses define ``walk(expr, local)`` (``local``: inside a reduction) and
    ``reserved(name)``: why a binding may not take ``name`` (``None``: it may).
    """

    #: The reductions' names (a binding may not take them).
    reductions: tuple[str, ...] = ()

    def __init__(self, pos: Any, parse_metric: Callable[[str], Any]) -> None:
        self.pos, self.parse_metric, self.fail = pos, parse_metric, pos.fail
        self.defined: dict[str, sympy.Expr] = {}
        self.params: set[str] = set()
        self.defaults: dict[str, Any] = {}
        self.used: list[str] = []

    def walk(self, e: sympy.Expr, local: bool) -> sympy.Expr:
        raise NotImplementedError

    def reserved(self, name: str) -> str | None:
        raise NotImplementedError

    def library(self, name: str) -> Any:
        """A named metric's parsed formula (parsed once), its parameters and defaults noted."""
        metric = lookup(name)
        assert metric is not None
        if metric.name not in _LIBRARY:
            _LIBRARY[metric.name] = self.parse_metric(metric.formula)
        if metric.name not in self.used:
            self.used.append(metric.name)
        for k, v in metric.params.items():
            self.defaults.setdefault(k, v)
        self.params.update(_LIBRARY[metric.name].parameters)
        return _LIBRARY[metric.name]

    def bind(self, bindings: list[tuple[Any, sympy.Expr]], functions: Collection[str]) -> None:
        """Record the bindings, refusing reserved names, functions, doubles and uses before
        definition with positioned errors."""
        names = [str(b) for b, _ in bindings]
        for i, (tok, expr) in enumerate(bindings):
            n = str(tok)
            if (why := self.reserved(n)) is not None:
                raise self.pos.error(why, tok)
            if n in functions or n in self.reductions:
                raise self.pos.error(f"'{n}' is a function and cannot be redefined", tok)
            if n in self.defined:
                raise self.pos.error(f"'{n}' is defined twice", tok)
            for s in expr.atoms(sympy.Symbol):
                if s.name in names[i:]:
                    raise self.pos.error(f"'{s.name}' is used before it is defined",
                                         self.pos.first_use[s.name])
            self.defined[n] = expr  # substituted where used: inside a reduction or outside
