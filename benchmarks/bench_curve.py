"""Forward+backward time and peak memory of soft AUROC and AP losses over the soft curve.

Run from a checkout, on one thread (``--smoke``: tiny sizes, a few seconds)::

    OMP_NUM_THREADS=1 python benchmarks/bench_curve.py
    OMP_NUM_THREADS=1 python benchmarks/bench_curve.py --smoke

Binary logits ``x`` of ``n`` float32 elements (10^4, 10^5, 10^6), 0/1 targets with 10 %
positives. Rows, each a loss of ``(x, y)``:

* ``BCEWithLogits``: ``torch.nn.BCEWithLogitsLoss()``, the floor;
* ``soft AUROC`` / ``soft AP``: ``1 -`` the trapezoid AUROC (step-wise AP) written in plain
  torch over :func:`metricc.runtime.curve.soft_curve` (256 bins on probabilities, linear
  interpolation), whose backward is its own ``O(n + T)`` pass;
* ``... logit grid``: the same on logits clipped to ``[-8, 8]``;
* ``pairwise logistic``: the mean of ``log(1 + exp(-(s_i - s_j)))`` over every
  (positive, negative) pair, the classic AUC surrogate: ``n_pos n_neg`` work and memory,
  run only where that is at most ``PAIR_LIMIT`` pairs (skipped rows are named).

Timing and memory as ``bench_loss.py``: interleaved rounds in a new random order each,
the median and the fastest call of each row, and the ratios to BCE of each; peak extra
CPU bytes of one call from ``torch.profiler``. On a shared, loaded machine the medians of
calls longer than a scheduler time slice carry the waits for the CPU; the fastest calls
do not.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_loss, also when imported

from bench_loss import fmt_time, peak_bytes, print_table

from metricc.runtime.curve import CurveRelaxation, soft_curve

PAIR_LIMIT = 1e7
PROBABILITY = CurveRelaxation(bins=256)
LOGIT = CurveRelaxation(bins=256, space="logit", clip=8.0)


def soft_auroc(tp: torch.Tensor, fp: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    zero = tp.new_zeros(1)
    tpr, fpr = torch.cat((tp / pos, zero)), torch.cat((fp / neg, zero))
    return ((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:])).sum() / 2


def soft_ap(tp: torch.Tensor, fp: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    recall = torch.cat((tp / pos, tp.new_zeros(1)))
    return ((recall[:-1] - recall[1:]) * tp / (tp + fp).clamp_min(1e-300)).sum()


def curve_loss(score, relax: CurveRelaxation):
    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 1 - score(*soft_curve(x, y, relax=relax, from_logits=True))
    return loss


def pairwise_logistic(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    diff = x[y][:, None] - x[~y][None, :]
    return torch.nn.functional.softplus(-diff).mean()


def measure(losses: dict, x: torch.Tensor, y: torch.Tensor, rounds: int, warmup: int
            ) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Seconds of every forward+backward (rounds interleaved, each in a new random order)
    and the peak extra bytes of one call, per loss."""

    def step(loss) -> None:
        x.grad = None
        loss(x, y).backward()

    for loss in losses.values():
        for _ in range(warmup):
            step(loss)
    times: dict[str, list[float]] = {name: [] for name in losses}
    order = list(losses)
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            step(losses[name])
            times[name].append(time.perf_counter() - t0)
    peaks = {}
    for name, loss in losses.items():
        x.grad = None
        peaks[name] = peak_bytes(lambda loss=loss: loss(x, y).backward())
    x.grad = None
    return times, peaks


def run(sizes: list[int], rounds: int, warmup: int) -> list[list[str]]:
    bce = torch.nn.BCEWithLogitsLoss()
    rows, skipped = [], []
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        y = torch.rand(n, generator=g) < 0.1
        x = (torch.randn(n, generator=g) + 1.5 * y).requires_grad_()
        yf = y.float()
        losses = {
            "BCEWithLogits": lambda x, y, yf=yf: bce(x, yf),
            "soft AUROC": curve_loss(soft_auroc, PROBABILITY),
            "soft AP": curve_loss(soft_ap, PROBABILITY),
            "soft AUROC, logit grid": curve_loss(soft_auroc, LOGIT),
            "soft AP, logit grid": curve_loss(soft_ap, LOGIT),
        }
        pairs = int(y.sum()) * int((~y).sum())
        if pairs <= PAIR_LIMIT:
            losses["pairwise logistic"] = pairwise_logistic
        else:
            skipped.append(f"n = {n}: pairwise logistic skipped ({pairs:.2e} pairs > {PAIR_LIMIT:.0e})")
        times, peaks = measure(losses, x, y, rounds, warmup)
        med = {k: statistics.median(v) for k, v in times.items()}
        low = {k: min(v) for k, v in times.items()}
        for name in losses:
            rows.append([f"{n:.0e}", name, fmt_time(med[name]), f"{med[name] / med['BCEWithLogits']:.2f}",
                         fmt_time(low[name]), f"{low[name] / low['BCEWithLogits']:.2f}",
                         f"{peaks[name] / 2**20:.1f}"])
    print_table(["n", "loss", "median ms", "x BCE", "min ms", "x BCE (min)", "peak MB"], rows)
    for line in skipped:
        print(line)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.smoke:
        run([500, 2000], rounds=3, warmup=1)
    else:
        run([10**4, 10**5, 10**6], rounds=31, warmup=3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
