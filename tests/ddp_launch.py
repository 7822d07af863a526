"""Start ``gloo`` worker processes for the distributed tests, one per rank.

Each worker script is called as ``worker.py RANK WORLD PORT OUTDIR`` and writes its
results under ``OUTDIR``; the ranks find each other on ``127.0.0.1:PORT``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Generous: on a loaded 2-core machine one rank took over 120 s (torch import, then the
# collectives); a hang is still caught.
TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(worker: Path, world: int, outdir: Path) -> list[subprocess.CompletedProcess]:
    """Run the ranks as separate processes, killed after ``TIMEOUT_S``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")])), "OMP_NUM_THREADS": "1"}
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(worker), str(r), str(world), str(port),
                               str(outdir)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    done = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=TIMEOUT_S)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return done


def run_ranks(worker: Path, world: int, outdir: Callable[[], Path]
              ) -> tuple[list[subprocess.CompletedProcess], Path]:
    """:func:`launch`, once more if another process took the port meanwhile.

    ``outdir`` gives the folder of each attempt; returns the runs and the last folder.
    """
    for _attempt in range(2):
        folder = outdir()
        runs = launch(worker, world, folder)
        if all(r.returncode == 0 for r in runs) or not any(
                "Address already in use" in r.stdout for r in runs):
            break
    return runs, folder


def rank_logs(runs: list[subprocess.CompletedProcess]) -> str:
    return "\n".join(f"--- rank {i} (rc {r.returncode})\n{r.stdout[-3000:]}"
                     for i, r in enumerate(runs))
