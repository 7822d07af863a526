"""One rank of ``test_hardening2.py``'s DDP checks: empty shards and mismatched shapes.

Run as ``python tests/hardening_ddp_worker.py RANK WORLD PORT OUTDIR`` (two ranks): each
scenario of :data:`SCENARIOS` runs on this rank's shard, and ``OUTDIR/rank{RANK}.pt`` gets,
per scenario, ``("ok", loss, input gradient)`` or ``("error", exception type, message)``.
Rank 1's shard is empty in the ``empty_*`` scenarios and has another number of classes in
the ``mismatch_*`` ones.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

import torch

import metricc

F64 = torch.float64


def shard(kind: str, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input, target)`` of this rank (rank 0's data depends only on ``kind``)."""
    g = torch.Generator().manual_seed(7)
    if kind == "counts":
        x, y = torch.randn(8, generator=g, dtype=F64), torch.tensor([1., 0, 1, 1, 0, 0, 1, 0], dtype=F64)
    else:
        x, y = torch.randn(8, 3, generator=g, dtype=F64), torch.tensor([0, 1, 2, 1, 0, 2, 2, 1])
    return (x, y) if rank == 0 else (x[:0], y[:0])


SCENARIOS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "empty_counts": ("counts", "f1", {"from_logits": True}),
    "empty_matrix_symbolic": ("matrix", "quadratic_kappa", {"from_logits": True}),
    "empty_matrix_autograd": ("matrix", "quadratic_kappa", {"from_logits": True,
                                                            "backward": "autograd"}),
    "empty_multiclass": ("matrix", "dice", {"from_logits": True, "mode": "multiclass"}),
    "empty_constrained": ("counts", "precision subject to recall >= 0.9", {"from_logits": True}),
}


def run_loss(kind: str, metric: str, options: dict[str, Any], rank: int, sync: bool
             ) -> tuple[Any, ...]:
    x, y = shard(kind, rank)
    x = x.clone().requires_grad_()
    loss = metricc.compile(metric).loss(sync_dist=sync, **options)
    value = loss(x, y)
    value.backward()
    return ("ok", value.detach(), x.grad if x.grad is not None else torch.zeros_like(x))


def mismatch(name: str, rank: int) -> Any:
    k = 3 + rank
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(6, k, generator=g, dtype=F64), torch.arange(6) % k
    if name == "mismatch_matrix":
        return metricc.compile("quadratic_kappa").loss(from_logits=True, sync_dist=True)(x, y)
    if name == "mismatch_multiclass":
        return metricc.compile("dice").loss(from_logits=True, mode="multiclass",
                                            sync_dist=True)(x, y)
    m = metricc.compile("quadratic_kappa").metric(num_classes=k)
    m.update(x.argmax(1), y)
    return m.compute()


def attempt(fn: Any, *args: Any) -> tuple[Any, ...]:
    try:
        out = fn(*args)
        return out if isinstance(out, tuple) else ("ok", out)
    except Exception as e:  # recorded, for the test to assert on
        return ("error", type(e).__name__, str(e))


def main() -> None:
    rank, world, port, outdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                         rank=rank, world_size=world,
                                         timeout=datetime.timedelta(seconds=30))
    out: dict[str, Any] = {}
    try:
        for name, (kind, metric, options) in SCENARIOS.items():
            out[name] = attempt(run_loss, kind, metric, options, rank, True)
            torch.distributed.barrier()
        for name in ("mismatch_matrix", "mismatch_multiclass", "mismatch_stateful"):
            out[name] = attempt(mismatch, name, rank)
            torch.distributed.barrier()
    finally:
        torch.save(out, f"{outdir}/rank{rank}.pt")
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
