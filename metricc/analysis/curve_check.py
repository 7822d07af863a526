"""``check()`` of a curve metric: where it is undefined and which way it trains.

Takes data (the resolved expression and the generated gradient kernel), not the facade;
:meth:`metricc.curve_metric.CurveMetric.check` calls :func:`check`.

A batch moves a curve in two ways: raising a positive's score moves its mass into ``TP`` at
the thresholds it passes (``TP_k`` up for ``k`` in a range ``(b, b']``), raising a negative's
moves it into ``FP`` there. So the metric should not fall as ``TP`` rises over any range of
thresholds, nor rise as ``FP`` does: ``sum_{k in (b, b']} dV/dTP_k >= 0`` and the ``FP`` sum
``<= 0``. Both are *sampled* on random monotone curves through the generated kernel (its
gradient is proved equal to SymPy's by ``verify()``); the single-threshold partials
``dV/dTP_k``, ``dV/dFP_k`` are reported beside them, and each reduction's local formulas are
checked *symbolically* where SymPy can (:func:`metricc.analysis.counts_check.check`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from ..language.curve import TOTALS, CurveReduction, reductions
from ..language.symbols import COUNTS
from .counts_check import check as check_counts
from .domain import reductions_domain_problem
from .sampled import sampled_direction, sampled_wrong_way

__all__ = ["CurveCheckReport", "check", "curve_domain_problem", "local_directions", "sample_curves",
           "sampled_direction", "sampled_wrong_way"]

#: The moves a batch allows, as the 2x2 reports name them.
MOVES = ("FN->TP", "TN->FP")


@dataclass(frozen=True)
class CurveCheckReport:
    """What :meth:`metricc.curve_metric.CurveMetric.check` found.

    ``moves``: the direction of the metric along each feasible move (``"FN->TP"``: a
    positive's score rises past thresholds ``(b, b']``; ``"TN->FP"``: a negative's), and
    ``partials`` that of the single-threshold partials ``dV/dTP_k``, ``dV/dFP_k`` (``k >= 1``;
    ``TP_0 = P`` does not move): ``increasing``, ``decreasing``, ``constant`` or ``mixed``,
    sampled at ``samples`` random monotone curves (``witness``: a curve where a move goes the
    unexpected way). ``local``: each reduction argument's direction along the 2x2 moves,
    symbolic where SymPy could prove it (each verdict says which).
    """

    expr: sympy.Expr
    undefined: tuple[tuple[str, sympy.Expr], ...]
    moves: dict[str, str]
    partials: dict[str, str]
    samples: int
    witness: dict[str, list[float]] | None
    sampled_range: tuple[float, float] | None
    higher_is_better: bool
    local: dict[str, str] = field(default_factory=dict)

    @property
    def depends_on_predictions(self) -> bool:
        """False when neither move changes the metric: its loss would have zero gradient."""
        return any(d != "constant" for d in self.moves.values())

    def wrong_way(self) -> dict[str, str]:
        """``{move: why}`` for each feasible move along which the metric goes against training."""
        return sampled_wrong_way(self.moves, self.higher_is_better,
                                 "rises past thresholds", f"sampled at {self.samples} curves")

    def __str__(self) -> str:
        lines = [f"metric: {self.expr}"]
        if self.undefined:
            lines.append("undefined where (before eps):")
            lines.extend(f"  {e} = 0  ({where})" for where, e in self.undefined)
        else:
            lines.append("undefined where: nowhere")
        for move, d in self.moves.items():
            what = "a positive's score rises (TP up over thresholds (b, b'])" if move == "FN->TP" \
                else "a negative's score rises (FP up over thresholds (b, b'])"
            lines.append(f"{move}: {d} as {what} (sampled at {self.samples} monotone curves)")
        lines.append("single-threshold partials: " + ", ".join(f"{k} {d}" for k, d in self.partials.items())
                     + " (sampled)")
        if self.witness is not None:
            lines.append(f"  e.g. at TP = {self.witness['TP']}, FP = {self.witness['FP']}")
        for arg, d in self.local.items():
            lines.append(f"local {arg}: {d}")
        if self.sampled_range is not None:
            lines.append("range: sampled values {:.4g} .. {:.4g}".format(*self.sampled_range))
        direction = "higher is better" if self.higher_is_better else "lower is better"
        lines.append(f"as a loss ({direction}): " + ("TRAINS THE WRONG WAY" if self.wrong_way()
                                                     else "no feasible move trains the wrong way"))
        return "\n".join(lines)


def sample_curves(samples: int, seed: int = 0) -> list[tuple[np.ndarray, ...]]:
    """Random monotone curves ``(TP, FP, P, N)`` (float64, ``(R, T)`` and ``(R,)``) for
    ``T = 3 .. 24``: ``TP_0 = P``, ``FP_0 = N``, non-increasing, some ending at 0, some with
    flat stretches (ties), totals from 1 to 1000."""
    rng = np.random.default_rng(seed)
    out: list[tuple[np.ndarray, ...]] = []
    for T in (3, 4, 6, 9, 16, 24):
        r = samples // 6
        P = np.exp(rng.uniform(0, np.log(1000), r))
        N = np.exp(rng.uniform(0, np.log(1000), r))
        curves = []
        for total in (P, N):
            steps = rng.dirichlet(np.full(T, 0.7), r) * rng.uniform(0.3, 1.0, (r, 1))
            steps[rng.random((r, T)) < 0.2] = 0.0  # flat stretches
            c = total[:, None] * (1 - np.cumsum(steps, 1) + steps)
            c[:, 0] = total
            c[rng.random(r) < 0.5, -1] = 0.0
            curves.append(np.minimum.accumulate(np.maximum(c, 0.0), axis=1))
        out.append((curves[0], curves[1], P, N))
    return out


def _range_sums(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per curve, the smallest and largest ``sum_{k in (b, b']} d_k`` (``d`` ``(R, T)``, k >= 1)."""
    s = np.concatenate([np.zeros((d.shape[0], 1)), np.cumsum(d[:, 1:], 1)], 1)
    run_max, run_min = np.maximum.accumulate(s, 1), np.minimum.accumulate(s, 1)
    return (s[:, 1:] - run_max[:, :-1]).min(1), (s[:, 1:] - run_min[:, :-1]).max(1)


def local_directions(expr: sympy.Expr) -> dict[str, str]:
    """Each reduction argument's direction along ``FN->TP`` and ``TN->FP`` (the 2x2 check,
    symbolic where SymPy can prove it)."""
    out: dict[str, str] = {}
    counts = set(COUNTS.values())
    for node in reductions(expr):
        for i, arg in enumerate(node.args):
            if not arg.free_symbols & counts or str(arg) in out:
                continue
            report = check_counts(arg)
            what = {0: "value", 1: "x" if node.keyword != "best" else "bound"}.get(i, "arg")
            out[f"{node.keyword}() {what} {arg}"] = ", ".join(f"{m} {report.moves[m]}" for m in MOVES
                                                              if m in report.moves)
    return out


def check(expr: sympy.Expr, kernel: Callable[..., Any], undefined: list[tuple[str, sympy.Expr]],
          higher_is_better: bool, tau: float, tau_gate: float, samples: int = 600) -> CurveCheckReport:
    """Sample the kernel's gradient on random monotone curves; see :class:`CurveCheckReport`.

    ``kernel`` is the generated ``curve_and_gradient`` (torch tensors in, out).
    """
    import torch

    grads: dict[str, list[np.ndarray]] = {"TP": [], "FP": []}
    moves: dict[str, list[np.ndarray]] = {"FN->TP": [], "TN->FP": []}
    values, witness = [], None
    scale = 0.0
    for tp, fp, P, N in sample_curves(samples):
        t = [torch.from_numpy(a) for a in (tp, fp, P, N)]
        v, d_tp, d_fp = (x.numpy() for x in kernel(*t, 1e-9, tau, tau_gate))
        values.append(v)
        for name, d, move in (("TP", d_tp, "FN->TP"), ("FP", d_fp, "TN->FP")):
            scale = max(scale, float(np.abs(d).max()))
            grads[name].append(d[:, 1:].ravel())
            lo, hi = _range_sums(d)
            moves[move].append(np.r_[lo, hi])
            bad = lo < -1e-9 * max(scale, 1e-300) if move == "FN->TP" else hi > 1e-9 * max(scale, 1e-300)
            if witness is None and bad.any():
                r = int(np.argmax(bad))
                witness = {"TP": tp[r].round(3).tolist(), "FP": fp[r].round(3).tolist()}
    vals = np.concatenate(values)
    finite = vals[np.isfinite(vals)]
    return CurveCheckReport(
        expr, tuple(undefined),
        {m: sampled_direction(np.concatenate(v), scale) for m, v in moves.items()},
        {f"dV/d{k}_k": sampled_direction(np.concatenate(v), scale) for k, v in grads.items()},
        samples, witness, (float(finite.min()), float(finite.max())) if finite.size else None,
        higher_is_better, local_directions(expr))


def curve_domain_problem(expr: sympy.Expr,
                         samples: Callable[[tuple[CurveReduction, ...]], tuple[tuple[float, ...], ...]]
                         ) -> str | None:
    """Why a curve metric is not real on some curve, or ``None``: each reduction's local formulas
    over the counts (the 2 x 2 domain), then the outer expression over the reductions' values and
    the totals, searched at ``samples(nodes)``: rows ``(r_0, ..., P, N)`` that curves reach (the
    exact values on random monotone curves, which the facade computes; called only where the
    outer expression has a piece that needs a nonnegative base)."""
    return reductions_domain_problem(expr, reductions(expr), tuple(TOTALS.values()),
                                     {t: sympy.Symbol(t.name, positive=True) for t in TOTALS.values()},
                                     samples)
