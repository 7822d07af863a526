from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from hypothesis import settings

# Under --import-mode=importlib the tests folder is not on sys.path; tests import their
# oracles (tests/oracles.py) from it.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Two cores are shared by everything on the CI machine; one thread is faster for small tensors.
torch.set_num_threads(1)

settings.register_profile("ci", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    config.addinivalue_line("markers", "slow: takes tens of seconds; deselect with -m 'not slow'")
