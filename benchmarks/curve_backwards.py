#!/usr/bin/env python
"""How often ``precision_at_recall`` trains a model that ranks backwards, per smooth-max setting.

docs/curve.md ("When it failed"). With ``benchmarks/operating_points.py``'s data, folds, model and
training (``run_dataset``), each variant trains 5 folds x 3 seeds per target; a run ranks
backwards when its test AUROC is below 0.5. ``logsumexp`` is a reference smooth maximum
(``tau * logsumexp``, not in metricc) on the package's own soft curve.

    python benchmarks/curve_backwards.py --datasets wisconsin habarman
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import constraints_tabular as ct
import operating_points as op

import metricc
from metricc.runtime.curve import CurveRelaxation, SoftCurve, curve_pool

#: name -> (loss options, memory_decay); "logsumexp" is the reference below.
VARIANTS: dict[str, tuple[dict[str, float], float | None]] = {
    "default": ({}, 0.9), "default_nomem": ({}, None),
    "tau0.1_gate0.01": ({"tau": 0.1, "tau_gate": 0.01}, 0.9),
    "tau0.1": ({"tau": 0.1}, 0.9), "gate0.01": ({"tau_gate": 0.01}, 0.9),
    "logsumexp": ({}, 0.9)}


class LogSumExp(torch.nn.Module):
    """``1 - tau * logsumexp(precision/tau + log sigmoid((recall - t)/tau_gate))`` on the soft curve."""

    def __init__(self, target: float, memory_decay: float | None) -> None:
        super().__init__()
        self.target, self.relax = target, CurveRelaxation()
        self.pool = curve_pool(False, None, memory_decay)

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        curve = SoftCurve.apply(z, y, None, self.relax, True, True)
        tp, fp, pos, _ = curve if self.pool is None else self.pool(curve)
        a = tp / (tp + fp + 1e-7) / 0.01 + torch.nn.functional.logsigmoid(
            (tp / (pos + 1e-7) - self.target) / 0.001)
        return 1 - 0.01 * torch.logsumexp(a, -1)


def build(name: str) -> Callable[[float], torch.nn.Module]:
    options, memory = VARIANTS[name]
    if name == "logsumexp":
        return lambda t: LogSumExp(t, memory)
    return lambda t: metricc.compile("precision_at_recall", min_recall=t).loss(
        from_logits=True, memory_decay=memory, **options)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["wisconsin"], choices=list(ct.DATASETS))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = ap.parse_args(argv)
    methods = [op.Method(v, build(v), at_half=False) for v in args.variants]
    for name in args.datasets:
        start = time.process_time()
        rows = [r for r in op.run_dataset(name, ct.Config(), methods) if r["rule"] == "plain"]
        for v in args.variants:
            for t in op.TARGETS:
                runs = [r for r in rows if r["method"] == v and r["target"] == t]
                back = sum(r["test_auroc"] < 0.5 for r in runs)
                prec = sum(r["precision"] for r in runs) / len(runs)
                print(f"{name} {v} t={t}: backwards {back}/{len(runs)}, mean test precision {prec:.3f}")
        print(f"{name}: {time.process_time() - start:.0f} s CPU", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
