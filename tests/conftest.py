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


#: The slow tier, by test id (a file, a test, or one parametrisation): multi-process DDP,
#: torch.compile, the examples' and benchmarks' smoke runs, mypy, the wheel build, and every
#: test that took over 2 s on 2 cores. Measured with ``python -m pytest --durations=0``; the
#: fast tier (``python -m pytest -m "not slow"``) is everything else.
SLOW_IDS = frozenset(
    line.split("#")[0].strip()
    for line in (Path(__file__).parent / "slow_tests.txt").read_text(encoding="utf-8").splitlines()
    if line.split("#")[0].strip())


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    for item in items:
        nodeid = item.nodeid
        if nodeid in SLOW_IDS or nodeid.split("[")[0] in SLOW_IDS or nodeid.split("::")[0] in SLOW_IDS:
            item.add_marker("slow")
