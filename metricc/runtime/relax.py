"""Relaxations: how scores become soft 0/1 predictions ``A(s)``, and their derivatives.

A relaxation is one :class:`Relaxation` subclass registered in :data:`RELAXATIONS`:
its name, option checks, value, derivative (the plain form ``metricc.verify``
checks symbolically) and the fused value-and-derivative the loss runs. Adding
one means a class here, its name in :data:`metricc.runtime.options.RELAXATION_NAMES`
(read by the CLI without torch) and its tests.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import MetricError
from .options import RELAXATION_NAMES
from .sigmoids import _sigmoid_fused, _sigmoid_pair


class Relaxation:
    """One relaxation ``A(s)``; every method takes the loss's relaxation options.

    ``value`` is ``A(s)`` (pass ``sigmoid=stable_sigmoid`` where autograd
    differentiates it) and ``derivative`` its plain ``dA/ds``: ``metricc.verify``
    runs both on SymPy symbols, so they call only ``torch`` functions.
    ``pair`` returns ``(A(s), d, k)`` with ``dA/ds = k * d`` (``d`` is ``None``
    where it is 1) for the symbolic backward: in eager torch it works in place
    on as few buffers as possible (at 10^7 elements each fresh buffer costs more
    than a pass), and ``k`` is left for the caller to fold into a scalar.
    ``A(s)`` is a fresh tensor the caller may overwrite, unless it is ``s``
    itself. Call it without grad. ``pair_fused`` is the same for
    ``torch.compile``, where one fused loop does it all and arithmetic, not
    passes, is what counts.
    """

    name: ClassVar[str] = ""
    #: The loss options this relaxation reads (shown by the loss's repr).
    options: ClassVar[tuple[str, ...]] = ()
    #: True for a relaxation of a whole class dimension (:class:`Softmax`): it maps the
    #: ``(N, C, *)`` input to relaxed class memberships, which are then counted as they are.
    class_wise: ClassVar[bool] = False

    def check_options(self, from_logits: bool) -> None:
        """Refuse option values this relaxation cannot work with."""

    def check_mode(self, mode: str) -> None:
        """Refuse modes this relaxation cannot work with."""

    @staticmethod
    def value(s: Tensor, amplifier: float, slope: float, offset: float, from_logits: bool,
              sigmoid: Any = torch.sigmoid) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def derivative(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def pair(s: Tensor, amplifier: float, slope: float, offset: float, from_logits: bool
             ) -> tuple[Tensor, Tensor | None, float]:
        raise NotImplementedError

    @staticmethod
    def pair_fused(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
        raise NotImplementedError


class AnyLoss(Relaxation):
    """``sigmoid(amplifier * (p - 0.5))``, ``p`` the probability (``sigmoid(s)`` on logits)."""

    name = "anyloss"
    options = ("amplifier",)

    @staticmethod
    def value(s: Tensor, amplifier: float, slope: float, offset: float, from_logits: bool,
              sigmoid: Any = torch.sigmoid) -> Tensor:
        p = sigmoid(s) if from_logits else s
        return sigmoid(amplifier * (p - 0.5))

    @staticmethod
    def derivative(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> Tensor:
        # k sigmoid(z) sigmoid(-z), not k a (1 - a): in float32 a rounds to 1 for p
        # near 1 once k >= 34, and 1 - a would silently zero the gradient there.
        if from_logits:
            p = torch.sigmoid(s)
            dp = p * torch.sigmoid(-s)
        else:
            p = s
            dp = torch.ones_like(s)
        z = amplifier * (p - 0.5)
        return amplifier * torch.sigmoid(z) * torch.sigmoid(-z) * dp

    @staticmethod
    def pair(s: Tensor, amplifier: float, slope: float, offset: float, from_logits: bool
             ) -> tuple[Tensor, Tensor | None, float]:
        if not from_logits:
            a, d = _sigmoid_pair(torch.sub(s, 0.5).mul_(amplifier))
            return a, d, amplifier
        p, dp = _sigmoid_pair(s, overwrite=False)
        # a = sigmoid(z), z = k (p - 1/2); dA/ds = k sigmoid(z) sigmoid(-z) dp/ds.
        a, d = _sigmoid_pair(p.sub_(0.5).mul_(amplifier))
        return a, d.mul_(dp), amplifier

    @staticmethod
    def pair_fused(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
        # One exp per sigmoid gives it and its derivative: two exp per element on logits,
        # where a compiled autograd loss needs four (two forward, two recomputed).
        if not from_logits:
            a, d = _sigmoid_fused(amplifier * (s - 0.5))
            return a, d, amplifier
        p, dp = _sigmoid_fused(s)
        a, da = _sigmoid_fused(amplifier * (p - 0.5))
        return a, da * dp, amplifier


class Linear(Relaxation):
    """``p`` itself: the probability (``sigmoid(s)`` on logits)."""

    name = "linear"

    @staticmethod
    def value(s: Tensor, amplifier: float, slope: float, offset: float, from_logits: bool,
              sigmoid: Any = torch.sigmoid) -> Tensor:
        return sigmoid(s) if from_logits else s

    @staticmethod
    def derivative(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> Tensor:
        if from_logits:
            return torch.sigmoid(s) * torch.sigmoid(-s)
        return torch.ones_like(s)

    @staticmethod
    def pair(s: Tensor, amplifier: float, slope: float, offset: float, from_logits: bool
             ) -> tuple[Tensor, Tensor | None, float]:
        if not from_logits:
            return s, None, 1.0
        p, dp = _sigmoid_pair(s, overwrite=False)
        return p, dp, 1.0

    @staticmethod
    def pair_fused(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
        if not from_logits:
            return s, None, 1.0
        p, d = _sigmoid_fused(s)
        return p, d, 1.0


class Sigmoid(Relaxation):
    """``sigmoid(slope * (logit + offset))`` (sigmoidF1), on logits only."""

    name = "sigmoid"
    options = ("slope", "offset")

    def check_options(self, from_logits: bool) -> None:
        if not from_logits:
            raise MetricError("relaxation='sigmoid' acts on logits: pass from_logits=True, "
                              "or use relaxation='anyloss' on probabilities")

    def check_mode(self, mode: str) -> None:
        if mode == "multiclass":
            raise MetricError("relaxation='sigmoid' acts on independent logits, but multiclass "
                              "losses act on softmax probabilities: use relaxation='anyloss' "
                              "or 'linear', or mode='multilabel' for independent sigmoids")

    @staticmethod
    def value(s: Tensor, amplifier: float, slope: float, offset: float, from_logits: bool,
              sigmoid: Any = torch.sigmoid) -> Tensor:
        return sigmoid(slope * (s + offset))

    @staticmethod
    def derivative(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> Tensor:
        z = slope * (s + offset)
        return slope * torch.sigmoid(z) * torch.sigmoid(-z)

    @staticmethod
    def pair(s: Tensor, amplifier: float, slope: float, offset: float, from_logits: bool
             ) -> tuple[Tensor, Tensor | None, float]:
        z = torch.add(s, offset).mul_(slope) if offset else torch.mul(s, slope)
        a, d = _sigmoid_pair(z)
        return a, d, slope

    @staticmethod
    def pair_fused(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
        a, d = _sigmoid_fused(slope * (s + offset))
        return a, d, slope


class Softmax(Linear):
    """``softmax(x / temperature)`` over the classes: the relaxed argmax of ``(N, C, *)`` scores.

    On logits ``x`` it is ``softmax(x / T, 1)``; on probabilities ``p`` it is
    ``p^(1/T) / sum_c p_c^(1/T)``, which is ``softmax(log p / T, 1)``. As ``T -> 0``
    it tends to the one-hot argmax, the decision ``score`` counts; at ``T = 1`` it
    is the softmax (or the probabilities) itself. Unlike a threshold at 0.5 it
    is centred on the decision between classes whatever their number, so it
    does not start saturated when ``C`` probabilities of about ``1/C`` come in.

    :meth:`classes` (with the plain :meth:`class_value` and the backward
    :meth:`class_vjp`, which ``metricc.verify`` checks against SymPy's Jacobian)
    acts on the class dimension; the relaxed memberships are then counted as
    they are, so the elementwise methods inherited from :class:`Linear` run
    on probabilities (the identity).
    """

    name = "softmax"
    options = ("temperature",)
    class_wise = True

    def check_mode(self, mode: str) -> None:
        if mode != "multiclass":
            raise MetricError(f"relaxation='softmax' relaxes the argmax over mutually exclusive "
                              f"classes (an (N, C, *) input), so it needs mode='multiclass', not "
                              f"{mode!r}; binary and multilabel losses use 'anyloss', 'linear' or "
                              "'sigmoid'")

    @staticmethod
    def check_temperature(temperature: Any, from_logits: bool) -> float:
        """``temperature`` as a float, if it is a finite number > 0 (and <= 1 on probabilities)."""
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
                or not 0 < temperature < float("inf"):
            raise MetricError(f"temperature must be a finite number > 0, got {temperature!r}")
        if not from_logits and temperature > 1:
            raise MetricError(f"temperature={temperature!r} > 1 on probabilities: p^(1/T) has an "
                              "infinite slope at p = 0; use a temperature <= 1, or pass logits "
                              "with from_logits=True")
        return float(temperature)

    @staticmethod
    def class_value(x: Tensor, temperature: float, from_logits: bool) -> Tensor:
        """The relaxed memberships of ``(N, C, *)`` scores, classes on dim 1 (plain torch ops)."""
        if from_logits:
            return torch.softmax(x / temperature, 1)
        # (p / max p)^(1/T): the largest term is 1, so the sum cannot underflow to 0.
        q = (x / x.amax(1, keepdim=True)).pow(1 / temperature)
        return q / q.sum(1, keepdim=True)

    @staticmethod
    def class_vjp(a: Tensor, g: Tensor, x: Tensor, temperature: float, from_logits: bool
                  ) -> Tensor:
        """``sum_i g_i dA_i/dx``, the backward of :meth:`class_value` (``a`` is its output).

        On logits ``a (g - sum_c a_c g_c) / T``; on probabilities that times
        ``1/p``, written as ``(p / max p)^(1/T - 1) / (Z max p)`` (``Z`` the sum of
        :meth:`class_value`'s terms) so that ``p = 0`` gives no ``0/0``.
        """
        w = g - (a * g).sum(1, keepdim=True)
        if from_logits:
            return a * w / temperature
        m = x.amax(1, keepdim=True)
        u = x / m
        z = u.pow(1 / temperature).sum(1, keepdim=True)
        return u.pow(1 / temperature - 1) * w / (z * m * temperature)

    def classes(self, x: Tensor, temperature: float, from_logits: bool, *,
                autograd: bool = False) -> Tensor:
        """:meth:`class_value` of ``x``, with :meth:`class_vjp` as its backward
        (``autograd=True``: autograd differentiates the plain ops instead). On logits
        that is ``torch.softmax`` with torch's own softmax backward, in either mode.

        Works in float32 at least; the result keeps that dtype.
        """
        x = x.to(torch.promote_types(x.dtype, torch.float32))
        if from_logits:
            # torch's softmax and its fused backward are exactly class_value and class_vjp
            # (tested); at T = 1 the division would be a wasted pass over the input.
            return torch.softmax(x if temperature == 1 else x / temperature, 1)
        if autograd:
            return self.class_value(x, temperature, from_logits)
        return _ClassRelaxation.apply(x, self, temperature, from_logits)


class _ClassRelaxation(torch.autograd.Function):
    """A class-wise relaxation whose backward is its own :meth:`Softmax.class_vjp`."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, relaxation: Softmax, temperature: float,
                from_logits: bool) -> Tensor:
        a = relaxation.class_value(x, temperature, from_logits)
        ctx.save_for_backward(a, x)
        ctx.args = (relaxation, temperature, from_logits)
        return a

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        a, x = ctx.saved_tensors
        relaxation, temperature, from_logits = ctx.args
        return relaxation.class_vjp(a, g, x, temperature, from_logits), None, None, None


#: Every relaxation, by name: the one registry the loss, ``verify()`` and the CLI read.
RELAXATIONS: dict[str, Relaxation] = {r.name: r for r in (AnyLoss(), Linear(), Sigmoid(),
                                                          Softmax())}
if tuple(RELAXATIONS) != RELAXATION_NAMES:  # pragma: no cover - a developer's slip
    raise RuntimeError("metricc.runtime.options.RELAXATION_NAMES must list the relaxations "
                       "registered in metricc.runtime.relax.RELAXATIONS, in order")


def relax(s: Tensor, relaxation: str, amplifier: float, slope: float, offset: float,
          from_logits: bool, sigmoid: Any = torch.sigmoid) -> Tensor:
    """The relaxed 0/1 prediction ``a = A(s)`` for scores ``s`` (see :class:`Relaxation`).

    ``anyloss``: ``sigmoid(amplifier * (p - 0.5))``; ``linear``: ``p``;
    ``sigmoid``: ``sigmoid(slope * (logit + offset))`` (sigmoidF1), on logits.
    ``p`` is ``sigmoid(s)`` when ``from_logits`` else ``s``. Where autograd
    differentiates it, pass ``sigmoid=stable_sigmoid``.
    """
    return RELAXATIONS[relaxation].value(s, amplifier, slope, offset, from_logits, sigmoid)


def relax_grad(s: Tensor, relaxation: str, amplifier: float, slope: float, offset: float,
               from_logits: bool) -> Tensor:
    """``dA/ds`` of :func:`relax`: the plain reference form, which ``verify`` checks
    symbolically; the loss's backward runs the faster, numerically equal
    :func:`_relax_pair` (tests compare the two)."""
    return RELAXATIONS[relaxation].derivative(s, amplifier, slope, offset, from_logits)


def _relax_pair(s: Tensor, relaxation: str, amplifier: float, slope: float, offset: float,
                from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
    """``(A(s), d, k)`` with ``dA/ds = k * d``: :meth:`Relaxation.pair`, or
    :meth:`Relaxation.pair_fused` while ``torch.compile`` traces."""
    r = RELAXATIONS[relaxation]
    if torch.compiler.is_compiling():
        return r.pair_fused(s, amplifier, slope, offset, from_logits)
    return r.pair(s, amplifier, slope, offset, from_logits)


def _relax_pair_fused(s: Tensor, relaxation: str, amplifier: float, slope: float,
                      offset: float, from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
    """:meth:`Relaxation.pair_fused` of ``relaxation``."""
    return RELAXATIONS[relaxation].pair_fused(s, amplifier, slope, offset, from_logits)
