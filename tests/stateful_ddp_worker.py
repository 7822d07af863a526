"""One rank of the checks in ``test_stateful_ddp.py``: stateful metrics and weighted losses.

Run as ``python tests/stateful_ddp_worker.py RANK WORLD PORT OUTDIR``: joins a
``gloo`` group on 127.0.0.1, updates each metric of :data:`CASES` with this
rank's shards of every step (uneven; on one rank some steps have no positive),
and saves the synced ``compute()`` of each to ``OUTDIR/rank{RANK}.pt``, with
the value and input gradient of each weighted ``sync_dist`` loss of
:data:`LOSSES` on this rank's shard. The test compares them with one process
working on all the data.
"""

from __future__ import annotations

from typing import Any

import torch

C = 4
STEPS = 3
SHARDS = {1: [9], 2: [6, 3], 3: [2, 5, 2]}

#: name -> (metric, options of Metric.metric)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "binary_f1": ("f1", {}),
    "binary_mcc_samplewise": ("mcc", {"multidim_average": "samplewise"}),
    "multiclass_jaccard_macro": ("jaccard", {"mode": "multiclass", "num_classes": C,
                                             "ignore_index": 255}),
    "multiclass_f1_none_samplewise": ("f1", {"mode": "multiclass", "num_classes": C,
                                             "average": "none", "ignore_index": 255,
                                             "multidim_average": "samplewise"}),
    "multilabel_recall_weighted": ("recall", {"mode": "multilabel", "num_classes": C,
                                              "average": "weighted"}),
}


#: name -> (metric, loss options); the loss gets a weight map and sync_dist=True
LOSSES: dict[str, tuple[str, dict[str, Any]]] = {
    "weighted_binary_f1_symbolic": ("f1", {"from_logits": True, "amplifier": 5.0}),
    "weighted_multiclass_dice_macro_autograd": ("dice", {
        "mode": "multiclass", "from_logits": True, "relaxation": "linear",
        "backward": "autograd"}),
    "weighted_soft_label_jaccard_symbolic": ("jaccard", {"relaxation": "linear",
                                                         "soft_label": True}),
}


def loss_data() -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``(input, target, weight)`` of the whole batch for each loss case (float64)."""
    g = torch.Generator().manual_seed(900)
    n, f64 = sum(SHARDS[1]), torch.float64
    w = torch.randint(0, 4, (n, 5), generator=g).to(f64)
    return {
        "weighted_binary_f1_symbolic": (torch.randn(n, 5, generator=g, dtype=f64),
                                        (torch.rand(n, 5, generator=g) < 0.3).to(f64), w),
        "weighted_multiclass_dice_macro_autograd": (
            torch.randn(n, C, 5, generator=g, dtype=f64),
            torch.randint(0, C, (n, 5), generator=g), w),
        "weighted_soft_label_jaccard_symbolic": (torch.rand(n, 5, generator=g, dtype=f64),
                                                 torch.rand(n, 5, generator=g, dtype=f64), w),
    }


def run_losses(world: int, rank: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``(loss, d loss / d input)`` of each case on ``rank``'s shard (all data for world 1)."""
    import metricc

    lo = sum(SHARDS[world][:rank])
    hi = lo + SHARDS[world][rank]
    out = {}
    for name, (x, t, w) in loss_data().items():
        metric, opts = LOSSES[name]
        loss_fn = metricc.compile(metric).loss(sync_dist=True, **opts)
        xs = x[lo:hi].clone().requires_grad_()
        value = loss_fn(xs, t[lo:hi], weight=w[lo:hi])
        value.backward()
        out[name] = (value.detach(), xs.grad)
    return out


def make_data(step: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The whole step's batch for every mode; ranks take consecutive slices of it."""
    g = torch.Generator().manual_seed(500 + step)
    n = sum(SHARDS[1])
    binary_t = (torch.rand(n, 5, generator=g) < 0.3).long()
    binary_t[-2:] = 0  # the last rank's shard has no positive
    mc_t = torch.randint(0, C, (n, 5), generator=g)
    mc_t[torch.rand(n, 5, generator=g) < 0.1] = 255
    return {
        "binary": (torch.rand(n, 5, generator=g), binary_t),
        "multiclass": (torch.randn(n, C, 5, generator=g).softmax(1), mc_t),
        "multilabel": (torch.rand(n, C, 5, generator=g),
                       (torch.rand(n, C, 5, generator=g) < 0.3).long()),
    }


def run(world: int, ranks: list[int]) -> dict[str, torch.Tensor]:
    """``compute()`` of every case after updating with the shards of ``ranks``, rank by rank.

    A rank of a group passes itself; one process passing every rank sees all the data
    in the order in which the synced samplewise states are concatenated (rank-major).
    """
    import metricc

    sizes = SHARDS[world]
    metrics = {name: metricc.compile(f).metric(**opts) for name, (f, opts) in CASES.items()}
    data = [make_data(step) for step in range(STEPS)]
    for rank in ranks:
        lo = sum(sizes[:rank])
        for step in range(STEPS):
            for name, m in metrics.items():
                p, t = data[step][name.split("_")[0]]
                m.update(p[lo:lo + sizes[rank]], t[lo:lo + sizes[rank]])
    return {name: m.compute() for name, m in metrics.items()}



if __name__ == "__main__":
    from ddp_launch import serve

    serve(lambda rank, world: {"metrics": run(world, [rank]), "losses": run_losses(world, rank)})
