#!/usr/bin/env python
"""The stall warning on the synthetic case of benchmarks/constrained_defaults.py, per seed.

At the former defaults (AnyLoss 73, ``multiplier_lr=0.05``) and at the new ones, one run per
seed (``run_synthetic``, 120 epochs of 18 steps): the final whole-set training recall and
precision at 0.5, and the training step at which the constrained loss warned (or ``None``).
Quoted in docs/constraints.md (*The stall warning*). ``python benchmarks/stall_warning.py``
(about a minute of CPU time).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import constrained_defaults as cd  # noqa: E402

from metricc.runtime import constraint_defaults as d  # noqa: E402


def main() -> int:
    torch.set_num_threads(1)
    fired_at: list[int] = []
    update = d.StallWatch.update

    def recording(self: d.StallWatch, *args: object) -> None:  # the step it first warned at
        was = self.warned
        update(self, *args)  # type: ignore[arg-type]
        if self.warned and not was:
            fired_at.append(self.steps)

    d.StallWatch.update = recording  # type: ignore[method-assign]
    print("| defaults | seed | final training recall | precision | warned at step |\n|---|---:|---:|---:|---:|")
    for name, cfg in (("former", cd.TODAY), ("new", cd.CHOSEN)):
        for seed in (0, 1, 2, 3):
            fired_at.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rows, _ = cd.run_synthetic(cfg, [seed], 120)
            r = rows[0]
            print(f"| {name} `{cfg.tag}` | {seed} | {r['fit_recall']:.3f} | {r['fit_precision']:.3f} | "
                  f"{fired_at[0] if fired_at else '—'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
