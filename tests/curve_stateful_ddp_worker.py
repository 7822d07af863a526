"""One rank of the distributed check of ``CurveStatefulMetric`` in ``test_curve_stateful.py``.

Run as ``python tests/curve_stateful_ddp_worker.py RANK WORLD PORT OUTDIR``: joins a
``gloo`` group on 127.0.0.1, updates exact and binned curve metrics with this rank's
uneven shards over two batches (the last rank's shards hold no positives) and saves every
synced ``compute()``. :func:`run` with every rank's shards in one process is the reference.
"""

from __future__ import annotations

import torch

STEPS = 2
SHARDS = {2: [13, 7]}
CASES = {"auroc": None, "average_precision": None, "auroc_binned": 11, "average_precision_binned": 11,
         "recall_at_precision": None}


def shard(world: int, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(700 + step)
    sizes = SHARDS[world]
    y = (torch.rand(sum(sizes), generator=g) < 0.5).long()
    y[sizes[0]:] = 0  # the last rank sees no positives
    y[:2] = torch.tensor([1, 0])
    s = (torch.rand(sum(sizes), generator=g) * 10).round() / 10  # tied scores
    lo = sum(sizes[:rank])
    return s[lo:lo + sizes[rank]], y[lo:lo + sizes[rank]]


def run(world: int, ranks: list[int]) -> dict[str, torch.Tensor]:
    from metricc.evaluate.curve_stateful import CurveStatefulMetric
    from metricc.language.parse import parse

    out = {}
    for name, bins in CASES.items():
        formula = parse(name.removesuffix("_binned"))
        m = CurveStatefulMetric(formula.expr, {"min_precision": 0.6}, thresholds=bins)
        for step in range(STEPS):
            for rank in ranks:
                m.update(*shard(world, rank, step))
        out[name] = m.compute()
    return out



if __name__ == "__main__":
    from ddp_launch import serve

    serve(lambda rank, world: run(world, [rank]))
