"""The code base stays ruff-clean (the configuration is in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff comes with the test extra")
def test_ruff_check_is_clean() -> None:
    paths = [p for p in ("metricc", "tests", "examples", "benchmarks") if (ROOT / p).exists()]
    out = subprocess.run(["ruff", "check", *paths], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
