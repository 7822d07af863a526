"""``benchmarks/curve_bias.py --quick``: the mini-batch bias table runs end to end, every value finite."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from script_loader import load_script


def test_quick_bias_table(capsys) -> None:
    threads = torch.get_num_threads()
    try:
        bias = load_script(Path("benchmarks/curve_bias.py"))
        assert bias.main(["--quick", "--markdown"]) == 0
    finally:
        torch.set_num_threads(threads)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    header, rows = lines[0], [line.strip("| ").split(" | ") for line in lines[1:]]
    assert "memory 0.9" in header and "exact per batch" in header
    assert len(rows) == 2 * 2 * 2  # prevalences x batch sizes x metrics
    for row in rows:
        population, relaxed_population = float(row[3]), float(row[4])
        values = [float(row[5].split(" ± ")[0]), *map(float, row[6:9])]
        assert all(0 <= v <= 1 and math.isfinite(v) for v in values), row
        # the relaxation's own bias is small next to the per-batch one (256 bins)
        assert abs(relaxed_population - population) < 0.01, row
