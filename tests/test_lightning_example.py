"""Smoke run of examples/lightning_segmentation.py: trains, logs, and the logged Dice is exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_lightning_example_smoke_run(tmp_path: Path) -> None:
    before = set(ROOT.iterdir())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "lightning_segmentation.py"),
                           "--quick", "--out", str(tmp_path / "out")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "lightning_segmentation.json").read_text())
    # the metric logged through Lightning (compute() over the epoch's batches) is the Dice of
    # all validation pixels at once, and the training terms were logged too
    assert abs(summary["val/dice"] - summary["val/dice_recomputed"]) < 1e-6
    assert 0.0 <= summary["val/dice"] <= 1.0
    for key in ("train/loss", "train/ce", "train/soft_dice_loss", "train/dice", "val/dice_class0"):
        assert key in summary
    assert summary["train/loss"] > summary["train/ce"]  # CE + lam * (1 - soft Dice)
    logs = list((tmp_path / "out").rglob("metrics.csv"))
    assert len(logs) == 1 and "val/dice" in logs[0].read_text()
    assert set(ROOT.iterdir()) == before  # nothing (lightning_logs/) written into the checkout
