#!/usr/bin/env python
"""Soft-label overlap losses against the peers: MONAI (``soft_label=True``) and smp.

Both peers compute ``TP = (|a| + |y| - |a - y|) / 2`` (Wang & Blaschko 2023);
metricc's ``soft_label=True`` should give the same loss and gradient. Prints the
largest differences on random soft targets (float64), and with the default
(product) counts against MONAI's ``soft_label=False``.

    python benchmarks/peer_soft_labels.py      # needs the bench extra (monai) and smp
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

try:
    import metricc
except ImportError:  # running from a checkout without installing it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import metricc


def _smp_functional():
    """smp's loss functions, loaded from their file: importing the package needs torchvision."""
    import importlib.util

    spec = importlib.util.find_spec("segmentation_models_pytorch")
    path = Path(spec.origin).parent / "losses" / "_functional.py"
    module_spec = importlib.util.spec_from_file_location("smp_losses_functional", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _grad(fn, a: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
    x = a.clone().requires_grad_()
    v = fn(x, y)
    v.backward()
    return float(v.detach()), x.grad


def main() -> None:
    from monai.losses import DiceLoss, TverskyLoss

    smp = _smp_functional()

    g = torch.Generator().manual_seed(0)
    a = torch.rand(4, 3, 16, 16, generator=g, dtype=torch.float64)
    y = torch.rand(4, 3, 16, 16, generator=g, dtype=torch.float64)
    a, y = a / a.sum(1, keepdim=True), y / y.sum(1, keepdim=True)  # class distributions
    tv = metricc.compile("tversky", alpha=0.3, beta=0.7)
    dice = metricc.compile("dice")
    cases = {
        "Dice, MONAI soft_label=True": (
            DiceLoss(soft_label=True, batch=True, smooth_nr=0.0, smooth_dr=1e-7),
            dice.loss("linear", mode="multiclass", soft_label=True)),
        "Tversky 0.3/0.7, MONAI soft_label=True": (
            TverskyLoss(alpha=0.3, beta=0.7, soft_label=True, batch=True, smooth_nr=0.0,
                        smooth_dr=1e-7),
            tv.loss("linear", mode="multiclass", soft_label=True)),
        "Dice, MONAI soft_label=False (product counts)": (
            DiceLoss(soft_label=False, batch=True, smooth_nr=0.0, smooth_dr=1e-7),
            dice.loss("linear", mode="multiclass")),
        # smp's losses average 1 - score over classes, the score pooled over dims (0, 2)
        # (its eps clamps the denominator; metricc's eps=0 here, nothing is near 0)
        "Dice, smp soft_dice_score (L1 form)": (
            lambda x, t: (1 - smp.soft_dice_score(x.flatten(2), t.flatten(2), dims=(0, 2))).mean(),
            dice.loss("linear", mode="multilabel", soft_label=True, eps=0.0)),
        "Tversky 0.3/0.7, smp soft_tversky_score (L1 form)": (
            lambda x, t: (1 - smp.soft_tversky_score(x.flatten(2), t.flatten(2), 0.3, 0.7,
                                                     dims=(0, 2))).mean(),
            tv.loss("linear", mode="multilabel", soft_label=True, eps=0.0)),
    }
    print(f"{'case':48s} {'loss (peer)':>14s} {'|loss diff|':>12s} {'max |grad diff|':>16s}")
    for name, (peer, ours) in cases.items():
        vp, gp = _grad(peer, a, y)
        vo, go = _grad(ours, a, y)
        print(f"{name:48s} {vp:14.10f} {abs(vp - vo):12.2e} {float((gp - go).abs().max()):16.2e}")


if __name__ == "__main__":
    main()
