"""The base of every relaxation: :class:`Relaxation`, an immutable object holding its
options, each an :class:`Option` declared on its class (default and check).

The relaxations themselves and their registry are in :mod:`metricc.runtime.relax`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import MetricError, suggest
from .options import check_number

#: ``(A(s), d, k)`` with ``dA/ds = k * d`` (``d`` ``None`` where it is 1).
Pair = tuple[Tensor, Tensor | None, float]


class Option:
    """A relaxation option, declared on its class (``amplifier = Option(73.0, positive=True)``):
    its default, and the check :meth:`Relaxation.bind` runs
    (:func:`metricc.runtime.options.check_number` with ``positive``, ``nonnegative``).

    Read on an instance it is that instance's value. (A dataclass would do this too, but
    dataclasses look their module up in ``sys.modules``, and a standalone file may be
    run without being imported.)
    """

    def __init__(self, default: float, *, positive: bool = False, nonnegative: bool = True,
                 bounds: tuple[float, float, str] | None = None) -> None:
        self.default, self.positive, self.nonnegative = default, positive, nonnegative
        #: ``(least, most, why)``: the range where the loss stays finite (docs/numerics.md)
        self.bounds = bounds
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type) -> Any:
        return self.default if obj is None else obj.__dict__.get(self.name, self.default)

    def check(self, value: Any) -> float:
        v = check_number(self.name, value, positive=self.positive, nonnegative=self.nonnegative)
        if self.bounds is not None and not self.bounds[0] <= v <= self.bounds[1]:
            least, most, why = self.bounds
            raise MetricError(f"{self.name}={v!r} is outside [{least:g}, {most:g}]: {why}")
        return v


def _declared(cls: type) -> dict[str, Option]:
    """``cls``'s options by name, in the order its classes declare them (bases first)."""
    out: dict[str, Option] = {}
    for klass in reversed(cls.__mro__):
        out.update((k, v) for k, v in vars(klass).items() if isinstance(v, Option))
    return out


class Relaxation:
    """One relaxation ``A(s)``, holding its options (its :class:`Option` attributes).

    ``RELAXATIONS[name]`` holds the defaults; ``bind(**options)`` returns a copy with
    checked values (:class:`MetricError` otherwise), e.g.
    ``RELAXATIONS["anyloss"].bind(amplifier=50.0)``; instances are immutable. Every
    method reads the options from ``self`` and takes ``from_logits`` (``s`` logits or
    probabilities).

    ``value(s, from_logits)`` is ``A(s)`` (pass ``sigmoid=stable_sigmoid`` where
    autograd differentiates it) and ``derivative(s, from_logits)`` its plain
    ``dA/ds``; both call only ``torch`` functions and read the options as attributes,
    so they are functions of ``(s, options)`` on SymPy objects too: ``type(r)(**symbols)``
    (the constructor checks nothing, unlike :meth:`bind`) holds SymPy symbols for the
    options, and the methods' source run with a SymPy ``torch`` namespace, on that
    object, a SymPy ``s`` and a bool, gives ``A`` and ``dA/ds`` (``metricc.verify``
    does this). ``pair`` returns ``(A(s), d, k)`` with ``dA/ds = k * d`` (``d`` is
    ``None`` where it is 1) for the symbolic backward: in eager torch it works in place
    on as few buffers as possible (at 10^7 elements each fresh buffer costs more than a
    pass), and ``k`` is left for the caller to fold into a scalar. ``A(s)`` is a fresh
    tensor the caller may overwrite, unless it is ``s`` itself. Call it without grad.
    ``pair_fused`` is the same for ``torch.compile``, where one fused loop does it all
    and arithmetic, not passes, is what counts; :meth:`value_and_derivative` picks one.

    >>> from metricc.runtime.relax import RELAXATIONS
    >>> r = RELAXATIONS["anyloss"].bind(amplifier=50)
    >>> r, r.options
    (AnyLoss(amplifier=50.0), ('amplifier',))
    >>> RELAXATIONS["anyloss"].bind(amplifer=50)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    metricc.errors.MetricError: relaxation='anyloss' has no option 'amplifer' ... (did you mean 'amplifier'?)
    """

    name: ClassVar[str] = ""
    #: The names of the options (its :class:`Option` attributes), shown by the loss's repr.
    options: ClassVar[tuple[str, ...]] = ()
    #: True for a relaxation of a whole class dimension (:class:`Softmax`): it maps the
    #: ``(N, C, *)`` input to relaxed class memberships, which are then counted as they are.
    class_wise: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.options = tuple(_declared(cls))

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - set(self.options)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no option {min(unknown)!r}")
        self.__dict__.update(values)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: use bind({name}=...)")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, o) for o in self.options)

    def __repr__(self) -> str:
        inner = ", ".join(f"{o}={getattr(self, o)!r}" for o in self.options)
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values() == self._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __reduce__(self) -> tuple[Any, ...]:
        # By class, not by name: the class is importable wherever the registry is.
        return type(self), (), dict(zip(self.options, self._values(), strict=True))

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def bind(self, **values: Any) -> Any:
        """A copy holding ``values`` for some of this relaxation's options, each checked."""
        declared = _declared(type(self))
        checked = {}
        for key, value in values.items():
            opt = declared.get(key)
            if opt is None:
                own = ", ".join(declared) or "none"
                raise MetricError(f"relaxation={self.name!r} has no option {key!r} (its options: "
                                  f"{own}){suggest(key, list(declared))}")
            checked[key] = opt.check(value)
        return type(self)(**{**dict(zip(self.options, self._values(), strict=True)), **checked})

    def check_options(self, from_logits: bool) -> None:
        """Refuse option values this relaxation cannot work with on this kind of input."""

    def check_mode(self, mode: Any) -> None:
        """Refuse modes (a ``modes.Mode``) this relaxation cannot work with."""

    def value(self, s: Tensor, from_logits: bool, sigmoid: Any = torch.sigmoid) -> Tensor:
        raise NotImplementedError

    def derivative(self, s: Tensor, from_logits: bool) -> Tensor:
        raise NotImplementedError

    def pair(self, s: Tensor, from_logits: bool) -> Pair:
        raise NotImplementedError

    def pair_fused(self, s: Tensor, from_logits: bool) -> Pair:
        raise NotImplementedError

    def value_and_derivative(self, s: Tensor, from_logits: bool) -> Pair:
        """:meth:`pair`, or :meth:`pair_fused` while ``torch.compile`` traces."""
        if torch.compiler.is_compiling():
            return self.pair_fused(s, from_logits)
        return self.pair(s, from_logits)
