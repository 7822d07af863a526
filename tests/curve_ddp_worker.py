"""One rank of the soft-curve checks under DistributedDataParallel in ``test_curve_runtime.py``.

Run as ``python tests/curve_ddp_worker.py RANK WORLD PORT OUTDIR``: joins a ``gloo``
group on 127.0.0.1, trains a small float64 model in DDP on this rank's shard with a
soft AUROC loss over the curve summed across ranks (and, in one case, remembered over
batches), and saves every step's loss, score gradient and parameter gradients. The last
shard holds no positives. :func:`run_case` with ``world=1`` is the single-process
reference on the concatenated shards.
"""

from __future__ import annotations

import torch

FEATURES = 3
STEPS = 2
SHARDS = {1: [30], 2: [21, 9]}
CASES = {"auroc_sync": None, "auroc_sync_memory": 0.5}


def soft_auroc(tp: torch.Tensor, fp: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    zero = tp.new_zeros(1)
    tpr, fpr = torch.cat((tp / pos, zero)), torch.cat((fp / neg, zero))
    return ((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:])).sum() / 2


def make_data(world: int, step: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(500 + step)
    sizes = SHARDS[world]
    n = sum(sizes)
    x = torch.randn(n, FEATURES, generator=g, dtype=torch.float64)
    y = (torch.rand(n, generator=g) < 0.4).double()
    y[-SHARDS[2][1]:] = 0  # the second shard of world 2 has no positives
    y[:2] = torch.tensor([1.0, 0.0])
    return list(zip(x.split(sizes), y.split(sizes), strict=True))


def run_case(name: str, world: int, rank: int, ddp: bool) -> list[tuple[torch.Tensor, ...]]:
    from ddp_launch import record_steps

    from metricc.runtime.curve import CurveRelaxation, curve_pool, soft_curve

    relax = CurveRelaxation(bins=16, space="logit", clip=4.0)
    pool = curve_pool(sync_dist=world > 1, memory_decay=CASES[name])
    torch.manual_seed(3)
    base = torch.nn.Linear(FEATURES, 1).double()
    model = torch.nn.parallel.DistributedDataParallel(base) if ddp else base
    opt = torch.optim.SGD(base.parameters(), lr=0.5)

    def step(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = make_data(world, i)[rank]
        scores = model(x).squeeze(-1)
        curve = soft_curve(scores, y, relax=relax, from_logits=True)
        return scores, 1 - soft_auroc(*(curve if pool is None else pool(curve)))

    return record_steps(base.parameters(), opt, STEPS, step)



if __name__ == "__main__":
    from ddp_launch import serve

    serve(lambda rank, world: {name: run_case(name, world, rank, ddp=True) for name in CASES})
