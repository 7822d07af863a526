#!/usr/bin/env python
"""Forward+backward cost of a group loss against the plain 2 x 2 loss and BCEWithLogitsLoss.

Logits ``x`` of ``--n`` float32 elements (default 10^6, a leaf that requires grad), 0/1
targets with 30 % positives, ``--groups`` group ids (default 8) drawn uniformly. One timed
call is ``x.grad = None; loss(x, y[, groups]).backward()`` in a training-mode module (so a
constrained loss also steps its multipliers, as it does in training). Rows:

* ``equal_opportunity_difference``: ``metricc.compile("equal_opportunity_difference")
  .loss(from_logits=True, num_groups=G)``;
* ``accuracy s.t. gap(recall)``: ``metricc.compile("accuracy subject to gap(recall) <= 0.05")
  .loss(from_logits=True, num_groups=G)`` (the augmented Lagrangian and its multiplier step);
* ``accuracy (2 x 2)``: ``metricc.compile("accuracy").loss(from_logits=True)``, the base the
  target is stated against (a group loss at most 1.5x it);
* ``BCEWithLogits``: ``torch.nn.BCEWithLogitsLoss()``, the floor.

Timing is the house method of ``benchmarks/bench_peers.py`` (its ``interleave`` is imported):
one thread, the process's CPU time, every round calls every loss once in a new random order,
and a ratio is the median over rounds of the per-round ratio, so load that comes and goes
on a shared machine hits both sides alike. ``--out`` writes the table as CSV (``--append``
adds to it). Page faults of fresh multi-MB buffers are a large share of every row's time
(``benchmarks/bench_peers.py`` explains): the ``malloc`` column says whether glibc was told to
keep freed memory (``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_MMAP_THRESHOLD_`` set, "steady"), the
arithmetic alone, or not ("default"), what a user's process sees. The recorded runs::

    python benchmarks/groups_speed.py --out benchmarks/results/groups_speed.csv
    MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_MMAP_THRESHOLD_=4294967296 \
        python benchmarks/groups_speed.py --out benchmarks/results/groups_speed.csv --append
    python benchmarks/groups_speed.py --smoke                                     # seconds
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_peers import interleave

import metricc

CONSTRAINED = "accuracy subject to gap(recall) <= 0.05"
GROUP_ROWS = {"equal_opportunity_difference": "equal_opportunity_difference",
              "accuracy s.t. gap(recall)": CONSTRAINED}
BASE = "accuracy (2 x 2)"
TARGET = 1.5
MALLOC = "steady" if os.environ.get("MALLOC_TRIM_THRESHOLD_") else "default"


def make_calls(n: int, num_groups: int, seed: int = 0) -> dict[str, Callable[[], None]]:
    """One forward+backward per loss, on the same batch."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen).requires_grad_(True)
    y = (torch.rand(n, generator=gen) < 0.3).float()
    g = torch.randint(0, num_groups, (n,), generator=gen)

    def step(loss: torch.nn.Module, *extra: torch.Tensor) -> Callable[[], None]:
        loss.train()

        def call() -> None:
            x.grad = None
            loss(x, y, *extra).backward()
        return call

    calls = {name: step(metricc.compile(text).loss(from_logits=True, num_groups=num_groups), g)
             for name, text in GROUP_ROWS.items()}
    calls[BASE] = step(metricc.compile("accuracy").loss(from_logits=True))
    calls["BCEWithLogits"] = step(torch.nn.BCEWithLogitsLoss())
    return calls


def measure(n: int, num_groups: int, rounds: int, warmup: int) -> list[dict[str, object]]:
    """Rows: loss, median ms, median per-round ratio to the 2 x 2 loss and to BCE."""
    calls = make_calls(n, num_groups)
    for call in calls.values():
        for _ in range(warmup):
            call()
    t = interleave(calls, rounds, clock=time.process_time)
    rows = []
    for name in calls:
        to_base = statistics.median(a / b for a, b in zip(t[name], t[BASE], strict=True))
        to_bce = statistics.median(a / b for a, b in zip(t[name], t["BCEWithLogits"], strict=True))
        rows.append({"loss": name, "n": n, "groups": num_groups, "rounds": rounds, "malloc": MALLOC,
                     "median_ms": round(1e3 * statistics.median(t[name]), 2),
                     "ratio_to_2x2": round(to_base, 3), "ratio_to_bce": round(to_bce, 3)})
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="10^4 elements, 3 rounds: a run, not a measurement")
    p.add_argument("--out", type=Path, default=None, help="write the rows as CSV here")
    p.add_argument("--append", action="store_true", help="add the rows to --out's")
    a = p.parse_args(argv)
    if a.smoke:
        a.n, a.rounds, a.warmup = 10_000, 3, 1
    torch.set_num_threads(1)
    rows = measure(a.n, a.groups, a.rounds, a.warmup)
    print(f"torch {torch.__version__}, 1 thread, CPU time, {MALLOC} malloc, n={a.n}, G={a.groups}, {a.rounds} rounds "
          f"(target: group loss <= {TARGET}x the 2 x 2 loss)")
    print("| loss | median ms | x 2 x 2 (median per-round ratio) | x BCE |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['loss']} | {r['median_ms']} | {r['ratio_to_2x2']:.2f} | {r['ratio_to_bce']:.2f} |")
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        old = a.append and a.out.exists()
        with a.out.open("a" if old else "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            if not old:
                w.writeheader()
            w.writerows(rows)
    return rows


if __name__ == "__main__":
    main()
