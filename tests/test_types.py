"""The annotations hold: mypy finds no error in metricc/ or examples/ ([tool.mypy] in pyproject.toml).

CI runs the README's test command, so the type check runs from pytest. Skipped where
mypy is not installed (it is in the ``test`` extra).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_error_in_the_package_and_examples() -> None:
    pytest.importorskip("mypy")
    # mypy's cache outside the checkout (a warm run takes seconds, a cold one about a minute).
    cache = Path(tempfile.gettempdir()) / f"metricc-mypy-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:10]}"
    env = {**os.environ, "MYPY_FORCE_COLOR": "0"}
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                          "--cache-dir", str(cache), "--no-error-summary", "--hide-error-context"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
