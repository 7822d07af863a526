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


def stable_sigmoid(z: Tensor) -> Tensor:
    """``sigmoid(z)`` whose *autograd* derivative is exact in every dtype.

    Autograd differentiates ``torch.sigmoid`` as ``a * (1 - a)`` from its output
    ``a``; in float32 ``a`` rounds to 1 for ``z > 17`` and that derivative is 0
    (for AnyLoss, every ``p > 0.73``). Built from ``e = exp(-|z|)`` instead, the
    derivative autograd finds is ``e / (1 + e)**2``, with no cancellation.

    >>> z = torch.tensor([36.5], requires_grad=True)
    >>> stable_sigmoid(z).backward(); z.grad.item() > 0
    True
    """
    u = torch.where(z >= 0, -z, z)  # -|z|, with derivative -1 at 0 (torch's abs has 0)
    e = torch.exp(u)
    return torch.where(z >= 0, 1 / (1 + e), e / (1 + e))


def _sigmoid_pair(z: Tensor) -> tuple[Tensor, Tensor]:
    """``(sigmoid(z), sigmoid(-z))``, each accurate where the other rounds to 1.

    ``z`` is scratch: it is overwritten by ``sigmoid(z)``.
    """
    ac = torch.neg(z).sigmoid_()
    return z.sigmoid_(), ac


def _sigmoid_parts(m: Tensor) -> tuple[Tensor, Tensor]:
    """``(sigmoid(m), sigmoid(-m))`` for ``m = |z| >= 0`` from one ``exp``.

    With ``e = exp(-m)``: ``sigmoid(m) = 1 / (1 + e)``, ``sigmoid(-m) = e / (1 + e)``,
    so ``sigmoid(z) sigmoid(-z)`` is their product, exact for every ``z`` (no
    ``1 - a`` cancellation, no overflow).
    """
    e = torch.exp(-m)
    r = 1 / (1 + e)
    return r, e * r


def _logit_pair(s: Tensor) -> tuple[Tensor, Tensor]:
    """``(p, dp/ds)`` for ``p = sigmoid(s)``, as fresh tensors (``dp = p sigmoid(-s)``)."""
    dp = torch.neg(s).sigmoid_()
    p = torch.sigmoid(s)
    return p, dp.mul_(p)


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
            return a, d.mul_(a), amplifier
        p, dp = _logit_pair(s)
        # a = sigmoid(z), z = k (p - 1/2); dA/ds = k sigmoid(z) sigmoid(-z) dp/ds.
        a, d = _sigmoid_pair(p.sub_(0.5).mul_(amplifier))
        return a, d.mul_(a).mul_(dp), amplifier

    @staticmethod
    def pair_fused(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
        # d needs one exp per sigmoid pair and only |z|: for z = k (sigmoid(s) - 1/2)
        # that is k (sigmoid(|s|) - 1/2). Forward plus backward cost four exp per
        # element, as a compiled autograd loss does.
        if not from_logits:
            z = amplifier * (s - 0.5)
            r, q = _sigmoid_parts(torch.abs(z))
            return torch.sigmoid(z), r * q, amplifier
        r, q = _sigmoid_parts(torch.abs(s))
        a = torch.sigmoid(amplifier * (torch.sigmoid(s) - 0.5))
        rz, qz = _sigmoid_parts(amplifier * (r - 0.5))  # |z|, as r = sigmoid(|s|) >= 1/2
        return a, (rz * qz) * (r * q), amplifier


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
        p, dp = _logit_pair(s)
        return p, dp, 1.0

    @staticmethod
    def pair_fused(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
        if not from_logits:
            return s, None, 1.0
        r, q = _sigmoid_parts(torch.abs(s))
        return torch.sigmoid(s), r * q, 1.0


class Sigmoid(Relaxation):
    """``sigmoid(slope * (logit + offset))`` (sigmoidF1), on logits only."""

    name = "sigmoid"

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
        return a, d.mul_(a), slope

    @staticmethod
    def pair_fused(s: Tensor, amplifier: float, slope: float, offset: float,
                   from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
        z = slope * (s + offset)
        r, q = _sigmoid_parts(torch.abs(z))
        return torch.sigmoid(z), r * q, slope


#: Every relaxation, by name: the one registry the loss, ``verify()`` and the CLI read.
RELAXATIONS: dict[str, Relaxation] = {r.name: r for r in (AnyLoss(), Linear(), Sigmoid())}
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
