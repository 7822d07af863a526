"""One rank of the compiled curve losses under DistributedDataParallel (``test_curve_loss_distributed.py``).

Run as ``python tests/curve_loss_ddp_worker.py RANK WORLD PORT OUTDIR``: joins a ``gloo``
group on 127.0.0.1, and for every case in :data:`CASES` trains a small float64 model in DDP
on this rank's uneven shard with ``metricc.compile(metric).loss(sync_dist=True, ...)``,
saving every step's loss, the gradient reaching this rank's scores, and the parameter
gradients after DDP's averaging. The last shard holds no positives (binary) and no sample
of the last class (multiclass). :func:`run_case` with ``world=1`` is the single-process
reference on the concatenated shards (``sync_dist`` off: there is nothing to sync).
"""

from __future__ import annotations

from typing import Any

import torch

FEATURES = 3
CLASSES = 3
STEPS = 2
SHARDS = {1: [40], 2: [29, 11], 3: [17, 12, 11]}
#: name -> (metric, compile parameters, loss options); every loss has sync_dist=True.
CASES: dict[str, tuple[str, dict[str, float], dict[str, Any]]] = {
    "auroc": ("auroc", {}, {"from_logits": True, "bins": 16}),
    "average_precision": ("average_precision", {}, {"from_logits": True, "bins": 16}),
    "partial_auroc": ("partial_auroc", {"max_fpr": 0.5}, {"from_logits": True, "bins": 16}),
    "recall_at_precision": ("recall_at_precision", {"min_precision": 0.6},
                            {"from_logits": True, "bins": 16, "tau": 0.05, "tau_gate": 0.05}),
    "auroc_logit_width2": ("auroc", {}, {"from_logits": True, "bins": 16, "space": "logit",
                                          "clip": 4.0, "width": 2}),
    "auroc_memory": ("auroc", {}, {"from_logits": True, "bins": 16, "memory_decay": 0.5}),
    "average_precision_memory": ("average_precision", {}, {"from_logits": True, "bins": 16,
                                                           "memory_decay": 0.5}),
    "auroc_multiclass": ("auroc", {}, {"from_logits": True, "bins": 16, "mode": "multiclass"}),
    "average_precision_multiclass_weighted_memory": ("average_precision", {}, {
        "from_logits": True, "bins": 16, "mode": "multiclass", "average": "weighted",
        "memory_decay": 0.5}),
}


def make_data(world: int, step: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Shards ``(x, binary y, class labels)`` of one step; one global batch for every world size."""
    g = torch.Generator().manual_seed(900 + step)
    sizes = SHARDS[world]
    n = sum(sizes)
    x = torch.randn(n, FEATURES, generator=g, dtype=torch.float64)
    y = (torch.rand(n, generator=g) < 0.4).double()
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    last = SHARDS[3][-1]  # the last shard of worlds 2 and 3: no positives, no last class
    y[-last:] = 0
    labels[-last:] = labels[-last:] % (CLASSES - 1)
    y[:2] = torch.tensor([1.0, 0.0])
    labels[:CLASSES] = torch.arange(CLASSES)
    return list(zip(x.split(sizes), y.split(sizes), labels.split(sizes), strict=True))


def run_case(name: str, world: int, rank: int, ddp: bool, memory: bool = True
             ) -> list[tuple[torch.Tensor, ...]]:
    """``STEPS`` SGD steps; each step's ``(loss, score gradient, *parameter gradients)``
    (``memory=False``: the case without its ``memory_decay``)."""
    from ddp_launch import record_steps

    import metricc

    metric, params, options = CASES[name]
    if not memory:
        options = {k: v for k, v in options.items() if k != "memory_decay"}
    multiclass = options.get("mode") == "multiclass"
    loss_fn = metricc.compile(metric, **params).loss(**options, sync_dist=world > 1)
    torch.manual_seed(3)
    base = torch.nn.Sequential(torch.nn.Linear(FEATURES, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, CLASSES if multiclass else 1)).double()
    model = torch.nn.parallel.DistributedDataParallel(base) if ddp else base
    opt = torch.optim.SGD(base.parameters(), lr=0.5)

    def step(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, labels = make_data(world, i)[rank]
        scores = model(x)
        scores = scores if multiclass else scores.squeeze(-1)
        return scores, loss_fn(scores, labels if multiclass else y)

    return record_steps(base.parameters(), opt, STEPS, step)



if __name__ == "__main__":
    from ddp_launch import serve

    serve(lambda rank, world: {name: run_case(name, world, rank, ddp=True) for name in CASES})
