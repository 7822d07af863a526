"""The code base stays ruff-clean (the configuration is in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_is_clean() -> None:
    # ruff from the test extra, through the running interpreter: a `ruff` on PATH may be another
    # install (or absent when the venv is not activated), which once turned this test into a skip.
    paths = [p for p in ("metricc", "tests", "examples", "benchmarks") if (ROOT / p).exists()]
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *paths], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
