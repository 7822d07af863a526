"""One rank of the compiled group losses under DistributedDataParallel (``test_groups_distributed.py``).

Run as ``python tests/groups_ddp_worker.py RANK WORLD PORT OUTDIR``: joins a ``gloo`` group on
127.0.0.1 and for every case in :data:`CASES` trains a small float64 model in DDP on this
rank's uneven shard with ``loss(sync_dist=True, ...)``, saving every step's loss, the gradient
reaching this rank's scores and the parameter gradients. The last shard holds no member of
group 2. :func:`run_case` with ``world=1`` is the single-process reference.
"""

from __future__ import annotations

from typing import Any

import torch

FEATURES = 3
GROUPS = 3
STEPS = 2
SHARDS = {1: [40], 2: [29, 11]}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "equal_opportunity": ("equal_opportunity_difference", {"from_logits": True, "num_groups": GROUPS}),
    "constrained": ("accuracy subject to gap(recall) <= 0.05", {"from_logits": True, "num_groups": GROUPS}),
    "worst_memory": ("worst_group_accuracy", {"from_logits": True, "num_groups": GROUPS,
                                              "memory_decay": 0.5}),
}


def make_data(world: int, step: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(700 + step)
    n = sum(SHARDS[world])
    x = torch.randn(n, FEATURES, generator=g, dtype=torch.float64)
    y = (torch.rand(n, generator=g) < 0.5).double()
    groups = torch.randint(0, GROUPS, (n,), generator=g)
    last = SHARDS[2][-1]
    groups[-last:] = groups[-last:] % (GROUPS - 1)  # the last shard: no member of group 2
    groups[:GROUPS] = torch.arange(GROUPS)
    y[:2 * GROUPS] = torch.tensor([1.0, 0.0]).repeat(GROUPS)
    groups[:2 * GROUPS] = torch.arange(GROUPS).repeat_interleave(2)
    sizes = SHARDS[world]
    return list(zip(x.split(sizes), y.split(sizes), groups.split(sizes), strict=True))


def run_case(name: str, world: int, rank: int, ddp: bool) -> list[tuple[torch.Tensor, ...]]:
    from ddp_launch import record_steps

    import metricc

    metric, options = CASES[name]
    loss_fn = metricc.compile(metric).loss(**options, sync_dist=world > 1)
    torch.manual_seed(3)
    base = torch.nn.Sequential(torch.nn.Linear(FEATURES, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 1)).double()
    model = torch.nn.parallel.DistributedDataParallel(base) if ddp else base
    opt = torch.optim.SGD(base.parameters(), lr=0.5)

    def step(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, groups = make_data(world, i)[rank]
        scores = model(x).squeeze(-1)
        return scores, loss_fn(scores, y, groups)

    out = record_steps(base.parameters(), opt, STEPS, step)
    return [(*row, loss_fn.multipliers.clone()) for row in out]


if __name__ == "__main__":
    from ddp_launch import serve

    serve(lambda rank, world: {name: run_case(name, world, rank, ddp=True) for name in CASES})
