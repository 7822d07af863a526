"""metricc computes the peers' losses where the options say it should (benchmarks/peers.py).

The speed races in ``benchmarks/bench_peers.py`` compare metricc with MONAI and
segmentation_models_pytorch; they mean something only if the raced losses are the same
function. Here each peer row is checked against its metricc row, loss and gradient, in
float64 on small batches in which every class occurs. A peer that is not installed is
skipped (MONAI is in the ``test`` extra; smp is not, see docs/performance.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import peers

SHAPES = {"binary": (4, 1, 12, 12), "multiclass": (3, 5, 10, 10), "3-D": (2, 4, 6, 6, 6)}
# eps enters metricc (added) and smp (clamped, or added to each count for MCC) differently;
# at 1e-12 that difference is below float64 rounding of these sums.
EPS = 1e-12


def _value_and_grad(loss: peers.Loss, x: torch.Tensor, y: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    xx = x.detach().clone().requires_grad_(True)
    out = loss(xx, y)
    out.backward()
    assert xx.grad is not None
    return out.detach(), xx.grad


def _check(library: str, case: str) -> int:
    mode = peers.CASES[case][1]
    rows = peers.rows(mode, eps=EPS, default=False)
    gen = torch.Generator().manual_seed(3)
    x, y = peers.make_batch(case, gen, dtype=torch.float64, shape=SHAPES[case])
    if mode == "multiclass":
        assert len(y.unique()) == x.shape[1]  # every class present: the empty-class rules agree
    ours = {r.metric: r for r in rows if r.library == "metricc"}
    checked = 0
    for row in rows:
        if row.library != library:
            continue
        want_v, want_g = _value_and_grad(row.loss, x, y)
        got_v, got_g = _value_and_grad(ours[row.metric].loss, x, y)
        torch.testing.assert_close(got_v, want_v.to(got_v.dtype), rtol=1e-12, atol=1e-14,
                                   msg=lambda m, row=row: f"{row.name} ({row.options}): {m}")
        torch.testing.assert_close(got_g, want_g, rtol=1e-10, atol=1e-15,
                                   msg=lambda m, row=row: f"{row.name} gradient: {m}")
        checked += 1
    return checked


@pytest.mark.parametrize("case", list(SHAPES))
def test_monai_losses_equal_metricc_linear(case: str) -> None:
    pytest.importorskip("monai.losses")
    assert _check("MONAI", case) == 2  # DiceLoss, TverskyLoss


@pytest.mark.parametrize("case", list(SHAPES))
def test_smp_losses_equal_metricc_linear(case: str) -> None:
    if peers.smp_losses() is None:
        pytest.skip("segmentation_models_pytorch is not installed")
    expected = 3 if case == "binary" else 2  # DiceLoss, JaccardLoss (+ MCCLoss, binary only)
    assert _check("smp", case) == expected
