"""Relaxations: how scores become soft 0/1 predictions ``A(s)``, and their derivatives.

A relaxation is one immutable :class:`Relaxation` registered in :data:`RELAXATIONS`: its
name, its options (:class:`Option` attributes, each with its default and check), value,
derivative (the plain form ``metricc.verify`` checks symbolically) and the fused
value-and-derivative the loss runs. The registry holds each at its defaults; :meth:`Relaxation.bind` gives a copy
holding checked options, which the loss keeps (``loss.relax``). Adding a relaxation means a
class here, its name in :data:`metricc.runtime.options.RELAXATION_NAMES` (read by the CLI
without torch) and its tests; adding an option to one means an :class:`Option` on its class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

from ..errors import MetricError, suggest
from .options import RELAXATION_NAMES
from .relax_base import Option, Pair, Relaxation
from .sigmoids import sigmoid_both, sigmoid_fused, sigmoid_pair


class AnyLoss(Relaxation):
    """``sigmoid(amplifier * (p - 0.5))``, ``p`` the probability (``sigmoid(s)`` on logits)."""

    name = "anyloss"
    amplifier = Option(73.0, positive=True, bounds=(
        0.0, 1e30, ("a larger amplifier overflows float32 (inf * 0 = NaN in the gradient), and "
                    "beyond about 1e8 the sigmoid is already a step at float32 resolution")))

    def value(self, s: Tensor, from_logits: bool, sigmoid: Any = torch.sigmoid) -> Tensor:
        p = sigmoid(s) if from_logits else s
        return sigmoid(self.amplifier * (p - 0.5))

    def derivative(self, s: Tensor, from_logits: bool) -> Tensor:
        # k sigmoid(z) sigmoid(-z), not k a (1 - a): in float32 a rounds to 1 for p
        # near 1 once k >= 34, and 1 - a would silently zero the gradient there.
        if from_logits:
            p = torch.sigmoid(s)
            dp = p * torch.sigmoid(-s)
        else:
            p = s
            dp = torch.ones_like(s)
        z = self.amplifier * (p - 0.5)
        return self.amplifier * torch.sigmoid(z) * torch.sigmoid(-z) * dp

    def pair(self, s: Tensor, from_logits: bool) -> Pair:
        k = self.amplifier
        if not from_logits:
            a, d = sigmoid_pair(torch.sub(s, 0.5).mul_(k))
            return a, d, k
        p, dp = sigmoid_pair(s, overwrite=False)
        # a = sigmoid(z), z = k (p - 1/2); dA/ds = k sigmoid(z) sigmoid(-z) dp/ds.
        a, d = sigmoid_pair(p.sub_(0.5).mul_(k))
        return a, d.mul_(dp), k

    def pair_fused(self, s: Tensor, from_logits: bool) -> Pair:
        # One exp per sigmoid gives it and its derivative: two exp per element on logits,
        # where a compiled autograd loss needs four (two forward, two recomputed).
        k = self.amplifier
        if not from_logits:
            a, d = sigmoid_fused(k * (s - 0.5))
            return a, d, k
        p, dp = sigmoid_fused(s)
        a, da = sigmoid_fused(k * (p - 0.5))
        return a, da * dp, k


class Linear(Relaxation):
    """``p`` itself: the probability (``sigmoid(s)`` on logits)."""

    name = "linear"

    def value(self, s: Tensor, from_logits: bool, sigmoid: Any = torch.sigmoid) -> Tensor:
        return sigmoid(s) if from_logits else s

    def derivative(self, s: Tensor, from_logits: bool) -> Tensor:
        if from_logits:
            return torch.sigmoid(s) * torch.sigmoid(-s)
        return torch.ones_like(s)

    def pair(self, s: Tensor, from_logits: bool) -> Pair:
        if not from_logits:
            return s, None, 1.0
        p, dp = sigmoid_pair(s, overwrite=False)
        return p, dp, 1.0

    def pair_fused(self, s: Tensor, from_logits: bool) -> Pair:
        if not from_logits:
            return s, None, 1.0
        p, d = sigmoid_fused(s)
        return p, d, 1.0


class Sigmoid(Relaxation):
    """``sigmoid(slope * (logit + offset))`` (sigmoidF1), on logits only."""

    name = "sigmoid"
    slope = Option(1.0, positive=True)
    offset = Option(0.0, nonnegative=False)

    def check_options(self, from_logits: bool) -> None:
        if not from_logits:
            raise MetricError("relaxation='sigmoid' acts on logits: pass from_logits=True, "
                              "or use relaxation='anyloss' on probabilities")

    def check_mode(self, mode: Any) -> None:
        if mode.exclusive:
            raise MetricError("relaxation='sigmoid' acts on independent logits, but multiclass "
                              "losses act on softmax probabilities: use relaxation='anyloss' "
                              "or 'linear', or mode='multilabel' for independent sigmoids")

    def value(self, s: Tensor, from_logits: bool, sigmoid: Any = torch.sigmoid) -> Tensor:
        return sigmoid(self.slope * (s + self.offset))

    def derivative(self, s: Tensor, from_logits: bool) -> Tensor:
        z = self.slope * (s + self.offset)
        return self.slope * torch.sigmoid(z) * torch.sigmoid(-z)

    def pair(self, s: Tensor, from_logits: bool) -> Pair:
        slope, offset = self.slope, self.offset
        z = torch.add(s, offset).mul_(slope) if offset else torch.mul(s, slope)
        a, d = sigmoid_pair(z)
        return a, d, slope

    def pair_fused(self, s: Tensor, from_logits: bool) -> Pair:
        a, d = sigmoid_fused(self.slope * (s + self.offset))
        return a, d, self.slope


class SelfAdjusting(Relaxation):
    """``(1 - p)^alpha * p``: the self-adjusting relaxation of Li et al., "Dice Loss for
    Data-imbalanced NLP Tasks" (ACL 2020), ``p`` the probability (``sigmoid(s)`` on logits).

    The factor ``(1 - p)^alpha`` pushes down the soft prediction of elements the model is
    already sure of, so easy examples weigh less; ``alpha = 0`` is ``linear``. On logits
    ``1 - p`` is ``sigmoid(-s)`` (exact where ``p`` rounds to 1) and
    ``dA/ds = A (sigmoid(-s) - alpha p)``. On probabilities ``0 < alpha < 1`` is refused:
    ``(1 - p)^alpha`` has an infinite slope at ``p = 1``.
    """

    name = "self_adjusting"
    alpha = Option(1.0)

    def check_options(self, from_logits: bool) -> None:
        if not from_logits and 0 < self.alpha < 1:
            raise MetricError(f"alpha={self.alpha!r} in (0, 1) on probabilities: (1 - p)^alpha "
                              "has an infinite slope at p = 1; use alpha = 0 or alpha >= 1, or "
                              "pass logits with from_logits=True")

    def value(self, s: Tensor, from_logits: bool, sigmoid: Any = torch.sigmoid) -> Tensor:
        p = sigmoid(s) if from_logits else s
        q = sigmoid(-s) if from_logits else 1 - s
        return q**self.alpha * p

    def derivative(self, s: Tensor, from_logits: bool) -> Tensor:
        if from_logits:
            p = torch.sigmoid(s)
            q = torch.sigmoid(-s)
            return q**self.alpha * p * (q - self.alpha * p)
        if self.alpha == 0:  # linear: 0 * (1 - p)^-1 would be NaN at p = 1
            return torch.ones_like(s)
        return (1 - s) ** self.alpha - self.alpha * s * (1 - s) ** (self.alpha - 1)

    def pair(self, s: Tensor, from_logits: bool) -> Pair:
        alpha = self.alpha
        if not from_logits:
            if alpha == 0:
                return s, None, 1.0
            q = torch.rsub(s, 1.0)
            w = q.pow(alpha - 1)  # finite: alpha >= 1 here (check_options)
            a = torch.mul(w, q).mul_(s)
            return a, q.sub_(s, alpha=alpha).mul_(w), 1.0  # (1 - p - alpha p) (1 - p)^(alpha-1)
        p, q = sigmoid_both(s)
        a = q.pow(alpha).mul_(p)
        return a, p.mul_(-alpha).add_(q).mul_(a), 1.0

    def pair_fused(self, s: Tensor, from_logits: bool) -> Pair:
        alpha = self.alpha
        if not from_logits:
            if alpha == 0:
                return s, None, 1.0
            q = 1 - s
            w = q.pow(alpha - 1)
            return w * q * s, (q - alpha * s) * w, 1.0
        p, q = sigmoid_both(s)
        a = q.pow(alpha) * p
        return a, a * (q - alpha * p), 1.0


class Softmax(Linear):
    """``softmax(x / temperature)`` over the classes: the relaxed argmax of ``(N, C, *)`` scores.

    On logits ``x`` it is ``softmax(x / T, 1)``; on probabilities ``p`` it is
    ``p^(1/T) / sum_c p_c^(1/T)``, which is ``softmax(log p / T, 1)``. As ``T -> 0``
    it tends to the one-hot argmax, the decision ``score`` counts; at ``T = 1`` (the
    default) it is the softmax (or the probabilities) itself. On probabilities ``T``
    must be at most 1 (``p^(1/T)`` has an infinite slope at ``p = 0`` above). Unlike a
    threshold at 0.5 it is centred on the decision between classes whatever their
    number, so it does not start saturated when ``C`` probabilities of about ``1/C``
    come in. The 2x2 multiclass losses and the K x K losses both relax with it.

    :meth:`classes` (with the plain :meth:`class_value` and the backward
    :meth:`class_vjp`, which ``metricc.verify`` checks against SymPy's Jacobian)
    acts on the class dimension; the relaxed memberships are then counted as
    they are, so the elementwise methods inherited from :class:`Linear` run
    on probabilities (the identity).
    """

    name = "softmax"
    temperature = Option(1.0, positive=True, bounds=(
        1e-30, float("inf"), ("below it, logits / temperature overflow float32 and the softmax "
                              "is NaN; below about 1e-4 it is already an argmax")))
    class_wise = True

    def check_options(self, from_logits: bool) -> None:
        if not from_logits and self.temperature > 1:
            raise MetricError(f"temperature={self.temperature!r} > 1 on probabilities: p^(1/T) "
                              "has an infinite slope at p = 0; use a temperature <= 1, or pass "
                              "logits with from_logits=True")

    def check_mode(self, mode: Any) -> None:
        if not mode.exclusive:
            raise MetricError(f"relaxation='softmax' relaxes the argmax over mutually exclusive "
                              f"classes (an (N, C, *) input), so it needs mode='multiclass', not "
                              f"{mode!r}; binary and multilabel losses use 'anyloss', 'linear', "
                              "'sigmoid' or 'self_adjusting'")

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

    def classes(self, x: Tensor, from_logits: bool, *, autograd: bool = False) -> Tensor:
        """:meth:`class_value` of ``x``, with :meth:`class_vjp` as its backward
        (``autograd=True``: autograd differentiates the plain ops instead). On logits
        that is ``torch.softmax`` with torch's own softmax backward, in either mode.

        Works in float32 at least; the result keeps that dtype.
        """
        x = x.to(torch.promote_types(x.dtype, torch.float32))
        t = self.temperature
        if from_logits:
            # torch's softmax and its fused backward are exactly class_value and class_vjp
            # (tested); at T = 1 the division would be a wasted pass over the input.
            return torch.softmax(x if t == 1 else x / t, 1)
        if autograd:
            return self.class_value(x, t, from_logits)
        return _ClassRelaxation.apply(x, t, from_logits)


class _ClassRelaxation(torch.autograd.Function):
    """The softmax relaxation on probabilities, whose backward is :meth:`Softmax.class_vjp`."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, temperature: float, from_logits: bool) -> Tensor:
        a = Softmax.class_value(x, temperature, from_logits)
        ctx.save_for_backward(a, x)
        ctx.args = (temperature, from_logits)
        return a

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        a, x = ctx.saved_tensors
        return Softmax.class_vjp(a, g, x, *ctx.args), None, None


#: Every relaxation at its defaults, by name: the one registry the loss, ``verify()`` and
#: the CLI read.
RELAXATIONS: dict[str, Relaxation] = {r.name: r for r in (
    AnyLoss(), Linear(), Sigmoid(), Softmax(), SelfAdjusting())}
if tuple(RELAXATIONS) != RELAXATION_NAMES:  # pragma: no cover - a developer's slip
    raise RuntimeError("metricc.runtime.options.RELAXATION_NAMES must list the relaxations "
                       "registered in metricc.runtime.relax.RELAXATIONS, in order")
#: Each option name -> the relaxation declaring it (names are unique across relaxations).
OPTION_OWNERS: dict[str, Relaxation] = {o: r for r in RELAXATIONS.values() for o in r.options}
#: Each relaxation option's default, read from the :class:`Option` that declares it: the one
#: place a default lives (the losses' signatures and :func:`relax` read it from here).
OPTION_DEFAULTS: dict[str, float] = {o: getattr(r, o) for o, r in OPTION_OWNERS.items()}


def check_relaxation_options(values: Mapping[str, Any]) -> dict[str, float]:
    """Every relaxation option in ``values``, checked by the relaxation declaring it.

    A loss takes every relaxation's options as keywords; each is checked whichever
    relaxation it uses, so a bad value never waits for a change of relaxation.

    >>> check_relaxation_options({"amplifier": 50, "alpha": 0})
    {'amplifier': 50.0, 'alpha': 0.0}
    """
    out = {}
    for key, value in values.items():
        owner = OPTION_OWNERS.get(key)
        if owner is None:
            raise MetricError(f"{key!r} is not a relaxation option{suggest(key, list(OPTION_OWNERS))}")
        out[key] = getattr(owner.bind(**{key: value}), key)
    return out


def refuse_foreign_options(name: str, given: Iterable[str]) -> None:
    """A MetricError for an option in ``given`` that belongs to another relaxation than
    ``name`` (``loss("linear", amplifier=20)`` would drop the amplifier silently); names
    outside :data:`RELAXATIONS` (a curve loss's histogram) and non-relaxation options pass.

    >>> refuse_foreign_options("linear", ["amplifier"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    metricc.errors.MetricError: relaxation='linear' does not use 'amplifier' (its options: none); ...
    """
    r = RELAXATIONS.get(name)
    if r is None:
        return
    for key in given:
        if key in OPTION_OWNERS and key not in r.options:
            owners = " or ".join(repr(o.name) for o in RELAXATIONS.values() if key in o.options)
            raise MetricError(f"relaxation={name!r} does not use {key!r} (its options: "
                              f"{', '.join(r.options) or 'none'}); {key} is an option of "
                              f"relaxation={owners}: pass that relaxation, or leave {key} out")


def bound_relaxation(name: str, from_logits: bool, options: Mapping[str, Any]) -> Relaxation:
    """``RELAXATIONS[name]`` bound to its own options out of ``options`` (which may hold
    other relaxations' too) and checked for ``from_logits``."""
    r = RELAXATIONS[name]
    r = r.bind(**{k: v for k, v in options.items() if k in r.options})
    r.check_options(from_logits)
    return r


def relax(s: Tensor, relaxation: str, amplifier: float = OPTION_DEFAULTS["amplifier"],
          slope: float = OPTION_DEFAULTS["slope"], offset: float = OPTION_DEFAULTS["offset"],
          from_logits: bool = False, sigmoid: Any = torch.sigmoid, **options: float) -> Tensor:
    """The relaxed 0/1 prediction ``a = A(s)`` for scores ``s`` (see :class:`Relaxation`).

    A functional shortcut for ``RELAXATIONS[relaxation].bind(...).value(s, from_logits)``:
    ``anyloss``: ``sigmoid(amplifier * (p - 0.5))``; ``linear``: ``p``;
    ``sigmoid``: ``sigmoid(slope * (logit + offset))`` (sigmoidF1), on logits;
    ``self_adjusting``: ``(1 - p)^alpha p``. ``p`` is ``sigmoid(s)`` when ``from_logits``
    else ``s``. Where autograd differentiates it, pass ``sigmoid=stable_sigmoid``.
    """
    opts = {"amplifier": amplifier, "slope": slope, "offset": offset, **options}
    return bound_relaxation(relaxation, from_logits, opts).value(s, from_logits, sigmoid)


def relax_grad(s: Tensor, relaxation: str, amplifier: float = OPTION_DEFAULTS["amplifier"],
               slope: float = OPTION_DEFAULTS["slope"], offset: float = OPTION_DEFAULTS["offset"],
               from_logits: bool = False, **options: float) -> Tensor:
    """``dA/ds`` of :func:`relax`: the plain reference form, which ``verify`` checks
    symbolically; the loss's backward runs the faster, numerically equal
    :meth:`Relaxation.pair` (tests compare the two)."""
    opts = {"amplifier": amplifier, "slope": slope, "offset": offset, **options}
    return bound_relaxation(relaxation, from_logits, opts).derivative(s, from_logits)
