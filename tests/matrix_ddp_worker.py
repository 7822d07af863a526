"""One rank of ``test_matrix_metric_ddp.py``: K x K ``Metric.metric()`` synced over ranks.

Run as ``python tests/matrix_ddp_worker.py RANK WORLD PORT OUTDIR``: joins a ``gloo``
group, updates each metric of :data:`CASES` with this rank's (uneven) shard of every
step and saves the synced ``compute()`` of each to ``OUTDIR/rank{RANK}.pt``.
"""

from __future__ import annotations

import torch

K = 4
STEPS = 3
SHARDS = {1: [11], 2: [7, 4]}
CASES = ("quadratic_kappa", "linear_kappa", "multiclass_mcc", "multiclass_accuracy")


def make_data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(700 + step)
    n = sum(SHARDS[1])
    return torch.randn(n, K, generator=g), torch.randint(0, K, (n,), generator=g)


def run(world: int, ranks: list[int]) -> dict[str, torch.Tensor]:
    """``compute()`` of every case after the shards of ``ranks`` of every step."""
    import metricc

    metrics = {name: metricc.compile(name).metric(num_classes=K) for name in CASES}
    for rank in ranks:
        lo = sum(SHARDS[world][:rank])
        hi = lo + SHARDS[world][rank]
        for step in range(STEPS):
            p, t = make_data(step)
            for m in metrics.values():
                m.update(p[lo:hi], t[lo:hi])
    return {name: m.compute() for name, m in metrics.items()}



if __name__ == "__main__":
    from ddp_launch import serve

    serve(lambda rank, world: run(world, [rank]))
