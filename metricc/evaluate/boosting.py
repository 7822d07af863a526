"""Per-row gradients and Hessians of a metric-loss for gradient boosting, in NumPy.

A booster hands its objective the raw margins of every training row each round, so the
soft confusion matrix over all rows is the population statistic itself. The loss is

    L(z) = W * (1 - f(soft counts))      (``W * f`` where lower is better),

``W`` the total sample weight (so that per-row gradients are of order one, like
logloss's, and the libraries' ``lambda``/``min_child_weight`` keep their scale), the soft
counts taken at ``p = sigmoid(z)`` (binary) or ``P = softmax(z)`` (multiclass). This module
receives data only: the generated kernels of the metric (values, first and second
derivatives at one confusion matrix) as functions of float64 arrays; the facade
(:mod:`metricc.boosting`) builds them and checks the inputs.

Gradients are exact; ``hess`` is the exact diagonal ``d^2 L / dz^2`` (``exact=True``) or
``max(exact, |grad|)`` (the positive surrogate, see ``docs/boosting.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "binary_grad_hess",
    "hard_counts",
    "matrix_grad_hess",
    "one_hot",
    "ovr_counts",
    "ovr_grad_hess",
    "sigmoid",
    "softmax",
]

#: ``(TP, FP, FN, TN) -> (value, g1, g0, h1, h0)`` on float64 arrays (``emit_curvature_kernel``).
Curvature = Callable[..., tuple[Any, ...]]
#: ``C (K, K) -> (value, dF/dC (K, K), d^2F/dC[y, b] dC[y, d] (K, K, K))``.
MatrixDerivatives = Callable[[np.ndarray], tuple[float, np.ndarray, np.ndarray]]


def sigmoid(z: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-z))`` without overflow warnings (``exp(800)`` is ``inf``: p is 0)."""
    with np.errstate(over="ignore"):
        out = np.exp(-z)
    out += 1.0
    np.reciprocal(out, out=out)
    return out


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``(N, K)`` margins, shifted by the row maximum."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    e /= e.sum(axis=1, keepdims=True)
    return e


def _finish(grad: np.ndarray, first: np.ndarray, second: np.ndarray,
            exact: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(grad, hess)``: the exact diagonal ``first + second``, or ``max(it, |grad|)``."""
    hess = first
    hess += second
    if not exact:
        np.maximum(hess, np.abs(grad), out=hess)
    return grad, hess


def binary_grad_hess(z: np.ndarray, y: np.ndarray, w: np.ndarray | None, curvature: Curvature,
                     sign: float, exact: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """Gradient, Hessian diagonal and loss value of ``L`` at ``(N,)`` margins ``z``.

    ``y`` holds 0/1 labels (float64), ``w`` weights or None; ``sign`` is -1 where higher
    is better (``L = W (1 - f)``) and +1 else (``L = W f``). With ``a = y g1 + (1-y) g0``
    (``dF/dp_i = w_i a``), ``s = p (1 - p)`` and ``hh = y h1 + (1-y) h0``:
    ``grad = sign W w a s``, ``hess = sign W (w a s (1 - 2p) + w^2 hh s^2)``.
    """
    p = sigmoid(z)
    wy = y if w is None else w * y
    total = float(z.size if w is None else w.sum())
    pos = float(wy.sum())
    tp = float(wy @ p)
    pred = float(p.sum() if w is None else w @ p)
    fp = pred - tp
    value, g1, g0, h1, h0 = (float(v) for v in curvature(tp, fp, pos - tp, total - pos - fp))
    scale = sign * total
    s = p * (1.0 - p)
    a = y * (scale * (g1 - g0))
    a += scale * g0
    if w is not None:
        a *= w
    grad = a * s  # scale w a s
    first = grad * (1.0 - 2.0 * p)
    hh = y * (scale * (h1 - h0))
    hh += scale * h0
    if w is not None:
        hh *= w * w
    s *= s
    hh *= s
    loss = total * (1.0 - value) if sign < 0 else total * value
    return (*_finish(grad, first, hh, exact), loss)


def one_hot(y: np.ndarray, k: int) -> np.ndarray:
    """``(N, K)`` float64 one-hot rows of class indices ``y``."""
    Y = np.zeros((y.size, k))
    Y[np.arange(y.size), y] = 1.0
    return Y


def _softmax_grad_hess(P: np.ndarray, u: np.ndarray, second: np.ndarray,
                       exact: bool) -> tuple[np.ndarray, np.ndarray]:
    """Through the softmax: ``u = dL/dP`` (N, K) and the curvature term already in margins.

    ``grad_k = P_k (u_k - sum_b u_b P_b)``; the first-order part of ``d^2 L / dz_k^2`` is
    ``(1 - 2 P_k) grad_k`` (the softmax's own second derivative), ``second`` the metric's.
    """
    grad = u - (u * P).sum(axis=1, keepdims=True)
    grad *= P
    first = (1.0 - 2.0 * P) * grad
    return _finish(grad, first, second, exact)


def matrix_grad_hess(Z: np.ndarray, y: np.ndarray, w: np.ndarray | None,
                     derivatives: MatrixDerivatives, sign: float,
                     exact: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """Gradient and Hessian diagonal ``(N, K)`` of ``L`` for a K x K metric at margins ``Z``.

    ``dL/dP[i, b] = sign W w_i F_C[y_i, b]``; the metric's second-order term of
    ``d^2 L / dz_k^2`` is ``sign W w_i^2 P_k^2 (e_k - P)^T H_{y_i} (e_k - P)`` with
    ``H_a[b, d] = d^2 F / dC[a, b] dC[a, d]``.
    """
    P = softmax(Z)
    n, k = P.shape
    Y = one_hot(y, k)
    total = float(n if w is None else w.sum())
    wY = Y if w is None else Y * w[:, None]
    value, G, H = derivatives(wY.T @ P)
    scale = sign * total
    # Row i reads block y_i: one-hot matrix products (BLAS) rather than gathers per class.
    u = Y @ (scale * G)
    quad = Y @ np.einsum("abb->ab", H)  # H_{y_i}[k, k]
    # (P_i H_a)[k] for every a in one product, then block a = y_i of each row
    HP = (P @ H.transpose(1, 0, 2).reshape(k, k * k)).reshape(n, k, k)[np.arange(n), y]
    quad -= 2.0 * HP
    quad += (HP * P).sum(axis=1, keepdims=True)
    second = quad * P
    second *= P
    second *= scale
    if w is not None:
        u *= w[:, None]
        second *= (w * w)[:, None]
    loss = total * (1.0 - value) if sign < 0 else total * value
    return (*_softmax_grad_hess(P, u, second, exact), loss)


def ovr_counts(P: np.ndarray, Y: np.ndarray, w: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """Per-class soft ``TP, FP, FN, TN`` (each ``(K,)``) of one-vs-rest scores ``P`` against
    one-hot ``Y``."""
    wY = Y if w is None else Y * w[:, None]
    total = float(P.shape[0] if w is None else w.sum())
    tp = (wY * P).sum(axis=0)
    pos = wY.sum(axis=0)
    pred = P.sum(axis=0) if w is None else w @ P
    return tp, pred - tp, pos - tp, total - pos - (pred - tp)


def ovr_grad_hess(Z: np.ndarray, y: np.ndarray, w: np.ndarray | None, curvature: Curvature,
                  sign: float, exact: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """A 2 x 2 metric macro-averaged over K one-vs-rest classes, at softmax scores.

    ``L = sign W mean_k f(TP_k, FP_k, FN_k, TN_k)`` (+ ``W`` where higher is better);
    ``dL/dP[i, b] = sign W / K w_i a_ib`` and the metric's second-order term is
    ``sign W / K w_i^2 P_k^2 (hh_ik (1 - 2 P_k) + sum_b hh_ib P_b^2)``.
    """
    P = softmax(Z)
    n, k = P.shape
    Y = one_hot(y, k)
    total = float(n if w is None else w.sum())
    value, g1, g0, h1, h0 = (np.asarray(v, dtype=np.float64) for v in curvature(*ovr_counts(P, Y, w)))
    scale = sign * total / k
    u = scale * (g0 + (g1 - g0) * Y)
    hh = scale * (h0 + (h1 - h0) * Y)
    if w is not None:
        u *= w[:, None]
        hh *= (w * w)[:, None]
    second = P * P * (hh * (1.0 - 2.0 * P) + (hh * P * P).sum(axis=1, keepdims=True))
    mean = float(value.mean())
    loss = total * (1.0 - mean) if sign < 0 else total * mean
    return (*_softmax_grad_hess(P, u, second, exact), loss)


def hard_counts(pred: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> tuple[float, ...]:
    """Weighted hard ``TP, FP, FN, TN`` of 0/1 decisions ``pred`` against 0/1 ``y``."""
    one = np.ones_like(y) if w is None else w
    tp = float(one @ (pred * y))
    fp = float(one @ (pred * (1 - y)))
    fn = float(one @ ((1 - pred) * y))
    return tp, fp, fn, float(one.sum()) - tp - fp - fn
