#!/usr/bin/env python
"""The smooth ``best()``: the softmax-weighted mean against the monotone log-mean-exp.

docs/curve.md ("Exact values and relaxed values"). Both are formed here from the package's own
soft curve (``SoftCurve``, 256 bins on probabilities, ``T`` = 257 thresholds), with the default
temperatures ``tau = 0.01``, ``tau_gate = 0.001``:

* ``mean``: ``sum_k w_k p_k``, ``w = softmax(p/tau + log s)`` (0.2's relaxation);
* ``lme``: ``tau * log(mean_k exp(p_k/tau))``, which is monotone in every ``p_k`` and lies in
  ``[max - tau log T, max]``;

with ``p_k = s_k f_k + tau tau_gate log s_k``, ``s_k = sigmoid(d_k/tau_gate)`` for a bound (``p = f``,
``s = 1`` without). It prints (1) a case where raising one ``f_k`` lowers ``mean``, (2) the exact
and relaxed values of best F1 and recall at precision >= 0.7, (3) the share of positives whose
rising logit raises ``1 - precision_at_recall`` at a backwards-ranked batch (the trap of
docs/curve.md, "When it failed").

    python benchmarks/best_monotone.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import precision_recall_curve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metricc.runtime.curve import CurveRelaxation, SoftCurve

TAU, TAU_GATE, EPS = 0.01, 0.001, 1e-7


def smooth_best(f: torch.Tensor, d: torch.Tensor | None, kind: str) -> torch.Tensor:
    """The relaxed ``best(f)`` (``d is None``) or ``best(f, d >= 0)`` over the last axis."""
    if d is None:
        p, log_s = f, torch.zeros_like(f)
    else:
        log_s = torch.nn.functional.logsigmoid(d / TAU_GATE)
        p = log_s.exp() * f + TAU * TAU_GATE * log_s
    if kind == "mean":
        return (torch.softmax(p / TAU + log_s, -1) * p).sum(-1)
    return TAU * (torch.logsumexp(p / TAU, -1) - torch.log(torch.tensor(float(p.shape[-1]))))


def curve(z: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    tp, fp, pos, _ = SoftCurve.apply(z, y, None, CurveRelaxation(), True, True)
    return tp, fp, pos


def f1_of(tp: torch.Tensor, fp: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    return 2 * tp / (tp + fp + pos + EPS)


def main() -> int:
    torch.set_num_threads(1)
    print("1. raising one f_k lowers the softmax-weighted mean (tau = 0.01):")
    for second in (0.46, 0.47, 0.48, 0.49):
        f = torch.tensor([0.5, second], dtype=torch.float64)
        print(f"   f = (0.5, {second}): mean {float(smooth_best(f, None, 'mean')):.6f}, "
              f"lme {float(smooth_best(f, None, 'lme')):.6f}")

    print("2. exact against relaxed (logits N(0,1) + 1.5 y, 30% positives):")
    for n, what in ((100_000, "best F1"), (20_000, "recall at precision >= 0.7")):
        g = torch.Generator().manual_seed(0)
        y = (torch.rand(n, generator=g) < 0.3).double()
        z = torch.randn(n, generator=g, dtype=torch.float64) + 1.5 * y
        prec, rec, _ = precision_recall_curve(y.numpy(), z.numpy())
        tp, fp, pos = curve(z, y)
        precision, recall = tp / (tp + fp + EPS), tp / (pos + EPS)
        if what == "best F1":
            exact = float(np.max(2 * prec * rec / np.maximum(prec + rec, 1e-300)))
            f, d = f1_of(tp, fp, pos), None
        else:
            exact = float(np.max(rec[prec >= 0.7]))
            f, d = recall, precision - 0.7
        hard = float((f if d is None else torch.where(d >= 0, f, 0.0)).max())
        vals = {k: float(smooth_best(f, d, k)) for k in ("mean", "lme")}
        print(f"   {what}, n = {n}, T = {f.shape[-1]}: exact {exact:.4f}, max over the soft "
              f"curve {hard:.4f}, mean {vals['mean']:.4f} ({vals['mean'] - exact:+.4f}), "
              f"lme {vals['lme']:.4f} ({vals['lme'] - exact:+.4f})")

    print("3. the backwards batch of tests/test_curve_backwards.py, 1 - best(precision, recall >= 0.8):")
    g = torch.Generator().manual_seed(0)
    z = torch.cat([torch.randn(35, generator=g, dtype=torch.float64) * 0.5 - 1.0,
                   torch.randn(65, generator=g, dtype=torch.float64) * 0.5 + 0.5])
    y = torch.cat([torch.ones(35), torch.zeros(65)]).double()
    for kind in ("mean", "lme"):
        x = z.clone().requires_grad_(True)
        tp, fp, pos = curve(x, y)
        loss = 1 - smooth_best(tp / (tp + fp + EPS), tp / (pos + EPS) - 0.8, kind)
        loss.backward()
        assert x.grad is not None
        up = float((x.grad[y == 1] > 0).double().mean())
        print(f"   {kind}: loss {float(loss):.4f}; raising the logit raises the loss for "
              f"{100 * up:.0f}% of the positives")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
