"""One rank of the DistributedDataParallel checks in ``test_distributed.py``.

Run as ``python tests/ddp_worker.py RANK WORLD PORT OUTDIR``: joins a ``gloo``
group on 127.0.0.1, trains a fresh float64 model for each case in :data:`CASES`
on this rank's shard, and saves every step's loss and parameter gradients
(after DDP's averaging) to ``OUTDIR/rank{RANK}.pt``. The test runs the same
cases in one process on the concatenated shards (:func:`run_case` with
``world=1``) and compares.
"""

from __future__ import annotations

from typing import Any

import torch

FEATURES = 4
CLASSES = 3
STEPS = 2
#: Uneven shards; the last shard of every step has no positives (binary) and
#: no sample of the last class (rows).
SHARDS = {1: [19], 2: [16, 3], 3: [5, 11, 3]}
#: The last rank's shard is empty: it must still join the all-reduce (zero counts)
#: and get the global loss, or the other ranks would wait in it until the timeout.
EMPTY_SHARDS = {1: [19], 2: [19, 0], 3: [5, 14, 0]}

#: name -> (model kind, metric, loss options). "rows": one confusion matrix per
#: class (one-vs-rest rows of softmax probabilities), macro-averaged.
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "binary_f1_symbolic": ("binary", "f1", {"relaxation": "anyloss", "amplifier": 10.0,
                                            "from_logits": True, "sync_dist": True}),
    "binary_mcc_autograd": ("binary", "mcc", {"relaxation": "sigmoid", "from_logits": True,
                                              "backward": "autograd", "sync_dist": True}),
    "binary_f1_unsynced": ("binary", "f1", {"relaxation": "anyloss", "amplifier": 10.0,
                                            "from_logits": True, "sync_dist": False}),
    "binary_f1_memory_symbolic": ("binary", "f1", {"relaxation": "linear", "from_logits": True,
                                                   "sync_dist": True, "memory_decay": 0.5}),
    "binary_jaccard_memory_autograd": ("binary", "jaccard", {
        "relaxation": "linear", "from_logits": True, "backward": "autograd",
        "sync_dist": True, "memory_decay": 1.0}),
    "multiclass_f1_macro_symbolic": ("multiclass", "f1", {
        "mode": "multiclass", "from_logits": True, "relaxation": "anyloss", "amplifier": 10.0,
        "sync_dist": True}),
    "multiclass_mcc_weighted_autograd": ("multiclass", "mcc", {
        "mode": "multiclass", "from_logits": True, "average": "weighted", "relaxation": "linear",
        "backward": "autograd", "sync_dist": True}),
    "multiclass_dice_micro_symbolic": ("multiclass", "dice", {
        "mode": "multiclass", "from_logits": True, "average": "micro", "relaxation": "linear",
        "sync_dist": True}),
    # Softmax losses on class indices form their own logit gradient (runtime/logit_grad.py).
    "multiclass_dice_macro_logit_grad": ("multiclass", "dice", {
        "mode": "multiclass", "from_logits": True, "relaxation": "linear", "sync_dist": True}),
    "multiclass_mcc_weighted_softmax_memory": ("multiclass", "mcc", {
        "mode": "multiclass", "from_logits": True, "average": "weighted", "temperature": 0.5,
        "sync_dist": True, "memory_decay": 0.5}),
    # Constraints: step 1's loss depends on the multipliers that step 0 moved, so it
    # matches only if every rank took the same (global) multiplier step.
    "binary_constrained_symbolic": ("binary", "precision subject to recall >= 0.9, fpr <= 0.2", {
        "relaxation": "anyloss", "amplifier": 10.0, "from_logits": True, "sync_dist": True,
        "memory_decay": 0.5, "multiplier_lr": 5.0}),
    "binary_constrained_autograd": ("binary", "precision subject to recall >= 0.9", {
        "relaxation": "sigmoid", "from_logits": True, "backward": "autograd", "sync_dist": True,
        "multiplier_lr": 5.0, "multiplier_rates": "relaxed", "penalty": 2.0}),
    "rows_dice_symbolic": ("rows", "dice", {"relaxation": "linear", "sync_dist": True}),
    # K x K metrics: one soft matrix of the global batch (world 3's last shard has no
    # sample of the last class).
    "matrix_qwk_softmax_symbolic": ("multiclass", "quadratic_kappa", {
        "from_logits": True, "sync_dist": True}),
    "matrix_mcc_linear_autograd": ("multiclass", "multiclass_mcc", {
        "relaxation": "linear", "from_logits": True, "backward": "autograd", "sync_dist": True}),
    "matrix_kappa_memory_symbolic": ("multiclass", "multiclass_kappa", {
        "relaxation": "linear", "from_logits": True, "sync_dist": True, "memory_decay": 0.5}),
    "rows_mcc_autograd": ("rows", "mcc", {"relaxation": "anyloss", "amplifier": 8.0,
                                          "backward": "autograd", "sync_dist": True}),
    "binary_f1_empty_shard_symbolic": ("binary", "f1", {
        "relaxation": "anyloss", "amplifier": 10.0, "from_logits": True, "sync_dist": True}),
    "multiclass_mcc_empty_shard_autograd": ("multiclass", "mcc", {
        "mode": "multiclass", "from_logits": True, "average": "weighted", "relaxation": "linear",
        "backward": "autograd", "sync_dist": True}),
}


def make_data(world: int, step: int, empty: bool = False
              ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Shards ``(x, binary y, class labels)`` of one step; the same for every world size."""
    g = torch.Generator().manual_seed(1000 + step)
    sizes = (EMPTY_SHARDS if empty else SHARDS)[world]
    n = sum(sizes)
    x = torch.randn(n, FEATURES, generator=g, dtype=torch.float64)
    y = (torch.rand(n, generator=g) < 0.4).double()
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    # The last 3 samples form the last shard for world 3; keep them free of
    # positives and of the last class, and make sure the rest has both.
    y[-3:] = 0
    y[0] = 1
    labels[-3:] = labels[-3:] % (CLASSES - 1)
    labels[:CLASSES] = torch.arange(CLASSES)
    return list(zip(x.split(sizes), y.split(sizes), labels.split(sizes), strict=True))


def make_model(kind: str) -> torch.nn.Module:
    torch.manual_seed(7)
    out = 1 if kind == "binary" else CLASSES
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 5), torch.nn.Tanh(), torch.nn.Linear(5, out)
    ).double()


def objective(kind: str, loss: Any, out: torch.Tensor, y: torch.Tensor,
              labels: torch.Tensor) -> torch.Tensor:
    if kind == "binary":
        return loss(out.squeeze(-1), y)
    if kind == "multiclass":
        return loss(out, labels)
    probs = torch.softmax(out, -1)
    onehot = torch.nn.functional.one_hot(labels, CLASSES).to(probs.dtype)
    return loss.row_losses(probs.T, onehot.T).mean()


def run_case(name: str, world: int, rank: int, ddp: bool
             ) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
    """Train ``STEPS`` SGD steps; each step's ``(loss, [param.grad])``.

    ``world=1`` is the single-process reference on the concatenated batch: the
    same loss with ``sync_dist`` off (there is nothing to sync).
    """
    import metricc

    kind, metric, options = CASES[name]
    if world == 1:
        options = {**options, "sync_dist": False}
    loss = metricc.compile(metric).loss(**options)
    base = make_model(kind)
    model = torch.nn.parallel.DistributedDataParallel(base) if ddp else base
    opt = torch.optim.SGD(base.parameters(), lr=0.5)
    results = []
    for step in range(STEPS):
        x, y, labels = make_data(world, step, empty="empty_shard" in name)[rank]
        opt.zero_grad()
        value = objective(kind, loss, model(x), y, labels)
        value.backward()
        results.append((value.detach().clone(), [p.grad.clone() for p in base.parameters()]))
        opt.step()
    return results



if __name__ == "__main__":
    from ddp_launch import serve

    serve(lambda rank, world: {name: run_case(name, world, rank, ddp=True) for name in CASES})
