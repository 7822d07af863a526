"""Start ``gloo`` worker processes for the distributed tests, one per rank.

Each worker script is called as ``worker.py RANK WORLD PORT OUTDIR`` and writes its
results under ``OUTDIR``; the ranks find each other on ``127.0.0.1:PORT``. A worker's
``__main__`` is ``serve(results)`` (join, save, leave cleanly).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Generous: on a loaded 2-core machine one rank took over 120 s (torch import, then the
# collectives); a hang is still caught.
TIMEOUT_S = 300


def serve(results: Callable[[int, int], Any], timeout_s: float = 60) -> None:
    """A worker's body: join the group its arguments name, save ``results(rank, world)`` to
    ``OUTDIR/rank<RANK>.pt``, and leave together.

    A rank that destroys the group while another still talks to it can make gloo abort that
    one at exit, hence the barrier; interpreter teardown (seconds with torch loaded on a busy
    machine) is skipped once the results are saved and the group is closed.
    """
    import datetime

    import torch
    import torch.distributed as dist

    rank, world, port, outdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=timeout_s))
    try:
        torch.save(results(rank, world), f"{outdir}/rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def record_steps(params: Any, opt: Any, steps: int, step: Callable[[int], tuple[Any, Any]]
                 ) -> list[tuple[Any, ...]]:
    """``steps`` optimiser steps; each step's ``(loss, score gradient, *parameter gradients)``.

    ``step(i)`` returns step ``i``'s ``(scores, loss)``; the gradients are read after
    ``loss.backward()`` (DDP's averaged ones for the parameters) and before ``opt.step()``.
    """
    params, results = list(params), []
    for i in range(steps):
        opt.zero_grad()
        scores, loss = step(i)
        scores.retain_grad()
        loss.backward()
        results.append((loss.detach().clone(), scores.grad.clone(), *(p.grad.clone() for p in params)))
        opt.step()
    return results


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
