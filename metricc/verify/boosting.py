"""A boosting objective's gradient and Hessian diagonal against autograd and finite differences.

The reference is written here, independently of :mod:`metricc.evaluate.boosting`: the soft
confusion matrix of ``sigmoid``/``softmax`` scores in torch, the metric's generated value
kernel on it, ``L = W (1 - f)`` (``W f`` where lower is better), differentiated twice by
autograd in float64. Finite differences check both again: central differences of ``L``
for the gradient, of the objective's own gradient for the Hessian diagonal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .report import Check, VerificationReport, finish

__all__ = ["BoostSubject", "reference_loss", "verify_boost"]


@dataclass(frozen=True)
class BoostSubject:
    """What :func:`verify_boost` reads: the objective as data.

    ``kind``: ``binary``, ``one_vs_rest`` or ``matrix``; ``kernel``: the metric's value
    kernel (``metric_value(TP, FP, FN, TN, eps)`` or ``matrix_value(C, eps, *params)``);
    ``run(margins, labels, weight, exact) -> (grad, hess, loss)``: the objective under test.
    """

    kind: str
    kernel: Callable[..., Any]
    params: tuple[Any, ...]
    eps: float
    sign: float
    num_classes: int
    run: Callable[..., tuple[Any, Any, float]]


def reference_loss(subject: BoostSubject, z: Any, y: Any, w: Any) -> Any:
    """``L`` in torch (float64) at margins ``z`` for labels ``y`` and weights ``w``."""
    import torch

    total = w.sum()
    if subject.kind == "binary":
        p = torch.sigmoid(z)
        tp, fp = (w * y * p).sum(), (w * (1 - y) * p).sum()
        fn, tn = (w * y * (1 - p)).sum(), (w * (1 - y) * (1 - p)).sum()
        f = subject.kernel(tp, fp, fn, tn, subject.eps)
    else:
        P = torch.softmax(z, dim=1)
        Y = torch.nn.functional.one_hot(y.long(), z.shape[1]).to(z.dtype) * w[:, None]
        if subject.kind == "matrix":
            f = subject.kernel((Y.T @ P).unsqueeze(0), subject.eps, *subject.params)[0]
        else:
            rest = w[:, None] - Y
            f = subject.kernel((Y * P).sum(0), (rest * P).sum(0), (Y * (1 - P)).sum(0),
                               (rest * (1 - P)).sum(0), subject.eps).mean()
    return total * (1 - f) if subject.sign < 0 else total * f


def _sample(subject: BoostSubject, rows: int, rng: np.random.Generator,
            weighted: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    k = subject.num_classes
    shape = (rows,) if subject.kind == "binary" else (rows, k)
    z = rng.normal(0.0, 1.5, shape)
    y = rng.integers(0, 2 if subject.kind == "binary" else k, rows)
    y[: (2 if subject.kind == "binary" else k)] = np.arange(2 if subject.kind == "binary" else k)
    w = rng.uniform(0.2, 3.0, rows) if weighted else None
    return z, y, w


def _compare(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> Check:
    err = np.abs(got - want)
    bad = err > atol + rtol * np.abs(want)
    if not bad.any():
        return Check(name, True, f"max abs difference {float(err.max()):.2e}")
    i = int(np.flatnonzero(bad.ravel())[0])
    return Check(name, False, "mismatch", {"got": float(got.ravel()[i]),
                                           "expected": float(want.ravel()[i])})


def _checks(subject: BoostSubject, z: np.ndarray, y: np.ndarray, w: np.ndarray | None,
            tag: str) -> list[Check]:
    import torch

    zt = torch.tensor(z, dtype=torch.float64)
    yt = torch.tensor(y, dtype=torch.float64)
    wt = torch.ones(len(y), dtype=torch.float64) if w is None else torch.tensor(w)

    def loss(x: Any) -> Any:
        return reference_loss(subject, x, yt, wt)

    grad, hess, value = subject.run(z, y, w, True)
    _, positive, _ = subject.run(z, y, w, False)
    auto_grad = torch.autograd.functional.jacobian(loss, zt).numpy()
    full = torch.autograd.functional.hessian(loss, zt).reshape(z.size, z.size)
    auto_hess = torch.diagonal(full).reshape(z.shape).numpy()
    h = 1e-5
    fd_grad = np.empty_like(z)
    fd_hess = np.empty_like(z)
    for i in np.ndindex(z.shape):
        up, down = z.copy(), z.copy()
        up[i] += h
        down[i] -= h
        fd_grad[i] = (float(loss(torch.tensor(up))) - float(loss(torch.tensor(down)))) / (2 * h)
        fd_hess[i] = (subject.run(up, y, w, True)[0][i] - subject.run(down, y, w, True)[0][i]) / (2 * h)
    scale = float(np.abs(auto_grad).max()) + 1e-12
    hscale = float(np.abs(auto_hess).max()) + 1e-12
    want_positive = np.maximum(hess, np.abs(grad))
    return [
        _compare(f"boost loss{tag} = reference", np.array([value]), np.array([float(loss(zt))]),
                 1e-10, 1e-12),
        _compare(f"boost gradient{tag} = autograd", grad, auto_grad, 1e-8, 1e-10 * scale),
        _compare(f"boost Hessian diagonal{tag} = autograd", hess, auto_hess, 1e-8, 1e-10 * hscale),
        _compare(f"boost gradient{tag} = finite differences", grad, fd_grad, 1e-5, 1e-6 * scale),
        _compare(f"boost Hessian diagonal{tag} = finite differences", hess, fd_hess, 1e-5,
                 1e-6 * hscale),
        Check(f"boost positive Hessian{tag} = max(exact, |grad|) >= 0",
              bool(np.array_equal(positive, want_positive) and (positive >= 0).all()),
              "the surrogate trees receive"),
    ]


def verify_boost(subject: BoostSubject, *, rows: int = 24, seed: int = 0,
                 raise_on_failure: bool = True) -> VerificationReport:
    """Check a boosting objective on random margins, labels and weights (float64)."""
    rng = np.random.default_rng(seed)
    report = VerificationReport()
    for weighted in (False, True):
        z, y, w = _sample(subject, rows, rng, weighted)
        report.checks.extend(_checks(subject, z, y, w, " (weighted)" if weighted else ""))
    return finish(report, raise_on_failure)
