"""One rank of ``test_loss_state.py``'s DDP check: inputs of another dtype on each rank.

Run as ``python tests/state_ddp_worker.py RANK WORLD PORT OUTDIR`` (two ranks): rank 0
passes float32 input, rank 1 float64, to each loss of :data:`SCENARIOS` with
``sync_dist=True``; ``OUTDIR/rank{RANK}.pt`` gets, per scenario, ``("ok", loss)`` or
``("error", exception type, message)``. Before the dtype was compared, gloo aborted a rank.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from ddp_launch import serve

import metricc

#: name -> (metric, options, input shape: (8,) binary scores or (8, 3) class logits)
SCENARIOS: dict[str, tuple[str, dict[str, Any], tuple[int, ...]]] = {
    "counts": ("f1", {"from_logits": True}, (8,)),
    "matrix": ("quadratic_kappa", {"from_logits": True}, (8, 3)),
    "curve": ("auroc", {"from_logits": True}, (8,)),
    "constrained": ("precision subject to recall >= 0.9", {"from_logits": True}, (8,)),
}


def shard(shape: tuple[int, ...], rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input, target)`` of this rank: float32 input on rank 0, float64 on rank 1."""
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(shape, generator=g, dtype=torch.float32 if rank == 0 else torch.float64)
    y = torch.arange(8) % 3 if len(shape) == 2 else (torch.arange(8) % 2).to(x.dtype)
    return x, y


def run(name: str, rank: int) -> tuple[Any, ...]:
    metric, options, shape = SCENARIOS[name]
    x, y = shard(shape, rank)
    x.requires_grad_()
    try:
        value = metricc.compile(metric).loss(sync_dist=True, **options)(x, y)
        value.backward()
        return ("ok", value.detach())
    except Exception as e:  # recorded, for the test to assert on
        return ("error", type(e).__name__, str(e))


def results(rank: int, world: int) -> dict[str, tuple[Any, ...]]:
    out = {}
    for name in SCENARIOS:
        out[name] = run(name, rank)
        torch.distributed.barrier()
    return out


if __name__ == "__main__":
    serve(results)
