"""One rank of the distributed check of ``GroupStatefulMetric`` in ``test_groups_stateful.py``.

Run as ``python tests/groups_stateful_ddp_worker.py RANK WORLD PORT OUTDIR``: joins a ``gloo``
group on 127.0.0.1, updates group metrics with this rank's uneven shards over two batches (the
last rank sees groups 0 and 1 only, so without ``num_groups`` its state is smaller) and saves
every synced ``compute()``. :func:`run` with every rank's shards in one process is the reference.
"""

from __future__ import annotations

import torch

STEPS = 2
SHARDS = {2: [13, 7]}
#: name: (formula, num_groups)
CASES = {"grow": ("equalized_odds_difference", None), "fixed": ("equalized_odds_difference", 3),
         "worst": ("worst_group_accuracy", None)}


def shard(world: int, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(900 + step)
    sizes = SHARDS[world]
    n = sum(sizes)
    y = (torch.rand(n, generator=g) < 0.5).long()
    ids = torch.arange(n) % 3
    ids[sizes[0]:] = ids[sizes[0]:] % 2  # the last rank sees groups 0 and 1 only
    s = torch.rand(n, generator=g)
    y[:6] = torch.tensor([1, 1, 1, 0, 0, 0])  # every group has both classes on rank 0
    lo = sum(sizes[:rank])
    return s[lo:lo + sizes[rank]], y[lo:lo + sizes[rank]], ids[lo:lo + sizes[rank]]


def run(world: int, ranks: list[int]) -> dict[str, torch.Tensor]:
    from metricc.evaluate.groups_stateful import GroupStatefulMetric
    from metricc.language.parse import parse

    out = {}
    for name, (formula, num_groups) in CASES.items():
        m = GroupStatefulMetric(parse(formula).expr, formula, num_groups=num_groups, zero_division=0)
        for step in range(STEPS):
            for rank in ranks:
                m.update(*shard(world, rank, step))
        out[name] = m.compute()
    return out


if __name__ == "__main__":
    from ddp_launch import serve

    serve(lambda rank, world: run(world, [rank]))
