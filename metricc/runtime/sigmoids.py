"""The sigmoid with its derivative, accurate also where the sigmoid rounds to 1.

``sigmoid(z) sigmoid(-z)`` three ways: in one eager pass beside the sigmoid
(:func:`sigmoid_pair`), from one ``exp`` inside a fused ``torch.compile`` loop
(:func:`sigmoid_fused`), and as the backward autograd takes (:func:`stable_sigmoid`).
``a (1 - a)`` would be 0 in float32 once ``a`` rounds to 1 (``z > 17``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def stable_sigmoid(z: Tensor) -> Tensor:
    """``sigmoid(z)`` whose *autograd* derivative is exact in every dtype.

    Autograd differentiates ``torch.sigmoid`` as ``a * (1 - a)`` from its output
    ``a``; in float32 ``a`` rounds to 1 for ``z > 17`` and that derivative is 0
    (for AnyLoss, every ``p > 0.73``). Here the backward is ``a sigmoid(-z)``, with
    ``sigmoid(-z)`` from ``exp(-z)`` in one pass (:func:`sigmoid_pair`), itself
    differentiable for higher derivatives.

    >>> z = torch.tensor([36.5], requires_grad=True)
    >>> stable_sigmoid(z).backward(); z.grad.item() > 0
    True
    """
    return _StableSigmoid.apply(z)


class _StableSigmoid(torch.autograd.Function):
    # Not torch.where(z >= 0, 1/(1+e), e/(1+e)) with e = exp(-|z|): torch's CPU where
    # branches per element, and on random signs costs ~3 ns each, 20x a multiply.
    @staticmethod
    def forward(ctx: Any, z: Tensor) -> Tensor:
        a = torch.sigmoid(z)
        ctx.save_for_backward(a, z)
        return a

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        a, z = ctx.saved_tensors
        return _times_sigmoid_neg(grad * a, z)


#: Past this -z, sigmoid(-z) rounds to 1 (e^-20 < 2^-24, e^-40 < 2^-53); exp(-z) nears overflow.
_SATURATION = {torch.float64: 40.0}


def sigmoid_pair(z: Tensor, overwrite: bool = True) -> tuple[Tensor, Tensor]:
    """``(sigmoid(z), sigmoid(z) sigmoid(-z))``: the sigmoid and its derivative, accurate
    also where ``sigmoid(z)`` rounds to 1 (where ``a (1 - a)`` would be 0), in two passes:
    ``softplus_backward(a, z, beta=-1)`` is ``a e / (1 + e)`` with ``e = exp(-z)``, and
    ``a`` past saturation. With ``overwrite`` the derivative is written into ``z``.

    >>> a, d = sigmoid_pair(torch.tensor([0.0, 30.0]))
    >>> a.tolist(), d.tolist()[0], d.tolist()[1] > 0
    ([0.5, 1.0], 0.25, True)
    """
    a = torch.sigmoid(z)
    return a, _times_sigmoid_neg(a, z, out=z if overwrite else None)


def _times_sigmoid_neg(g: Tensor, z: Tensor, out: Tensor | None = None) -> Tensor:
    """``g sigmoid(-z)`` in one pass, exact where ``sigmoid(z)`` rounds to 1: torch's
    ``softplus_backward(g, z, beta=-1)`` is ``g e / (1 + e)`` with ``e = exp(-z)``, and
    ``g`` itself past saturation (where ``exp(-z)`` would near overflow)."""
    f, sat = torch.ops.aten.softplus_backward, _SATURATION.get(z.dtype, 20.0)
    return f(g, z, -1.0, sat) if out is None else f.grad_input(g, z, -1.0, sat, grad_input=out)


def _sigmoid_parts(m: Tensor) -> tuple[Tensor, Tensor]:
    """``(sigmoid(m), sigmoid(-m))`` for ``m = |z| >= 0`` from one ``exp``.

    With ``e = exp(-m)``: ``sigmoid(m) = 1 / (1 + e)``, ``sigmoid(-m) = e / (1 + e)``,
    so ``sigmoid(z) sigmoid(-z)`` is their product, exact for every ``z`` (no
    ``1 - a`` cancellation, no overflow).
    """
    e = torch.exp(-m)
    r = 1 / (1 + e)
    return r, e * r


def sigmoid_fused(z: Tensor) -> tuple[Tensor, Tensor]:
    """``(sigmoid(z), sigmoid(z) sigmoid(-z))`` from one ``exp``, for ``torch.compile``.

    Both come from :func:`_sigmoid_parts` of ``|z|``: ``sigmoid(z)`` is its first part
    for ``z >= 0`` and its second otherwise, and the product is exact for every ``z``.
    """
    r, q = _sigmoid_parts(torch.abs(z))
    return torch.where(z >= 0, r, q), r * q


def sigmoid_both(z: Tensor) -> tuple[Tensor, Tensor]:
    """``(sigmoid(z), sigmoid(-z))``, each exact (``1 - sigmoid(z)`` is 0 in float32 past
    ``z = 17``): two fresh tensors in eager torch, one ``exp`` per element compiled.

    >>> p, q = sigmoid_both(torch.tensor([0.0, 30.0]))
    >>> p.tolist(), q.tolist()[0], q.tolist()[1] > 0
    ([0.5, 1.0], 0.5, True)
    """
    if not torch.compiler.is_compiling():
        return torch.sigmoid(z), torch.neg(z).sigmoid_()
    r, q = _sigmoid_parts(torch.abs(z))
    positive = z >= 0
    return torch.where(positive, r, q), torch.where(positive, q, r)

