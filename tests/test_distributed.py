"""sync_dist under DistributedDataParallel equals one process on the concatenated batch.

Starts 2 and 3 ``gloo`` processes on 127.0.0.1 (``tests/ddp_worker.py``), each
training a small float64 model in DDP on an uneven shard (one shard has no
positives), and compares every step's loss and parameter gradients with a
single-process run on the concatenated batch, to 1e-10.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ddp_launch import rank_logs, run_ranks
from script_loader import load_script

WORKER = Path(__file__).with_name("ddp_worker.py")

worker = load_script(WORKER, "metricc_ddp_worker")

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch built without the gloo backend")


@pytest.fixture(scope="module", params=[2, 3], ids=lambda w: f"world{w}")
def ranks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list:
    world = request.param
    runs, outdir = run_ranks(WORKER, world, lambda: tmp_path_factory.mktemp(f"ddp{world}"))
    if all(r.returncode == 0 for r in runs):
        return [torch.load(outdir / f"rank{r}.pt") for r in range(world)]
    pytest.fail(f"distributed workers failed:\n{rank_logs(runs)}")


@functools.cache
def _reference(name: str) -> list:
    return worker.run_case(name, world=1, rank=0, ddp=False)


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((u - v).abs().max()) for u, v in zip(a, b, strict=True))


SYNCED = [n for n, (_, _, o) in worker.CASES.items() if o["sync_dist"]]


@pytest.mark.parametrize("name", SYNCED)
def test_synced_loss_and_gradients_equal_single_process(ranks: list, name: str) -> None:
    ref = _reference(name)
    for rank, results in enumerate(ranks):
        for step, ((loss, grads), (ref_loss, ref_grads)) in enumerate(
                zip(results[name], ref, strict=True)):
            where = f"{name} rank {rank} step {step}"
            assert abs(float(loss - ref_loss)) < 1e-10, where
            assert _max_diff(grads, ref_grads) < 1e-10, where
            # The comparison is not vacuous: the gradients are far from zero.
            assert max(float(g.abs().max()) for g in ref_grads) > 1e-3, where


def test_without_sync_each_rank_optimises_a_different_objective(ranks: list) -> None:
    name = "binary_f1_unsynced"
    (ref_loss, ref_grads) = _reference(name)[0]
    losses = [results[name][0][0] for results in ranks]
    # Each rank's loss is the F1 loss of its own shard, not of the global batch ...
    assert all(abs(float(loss - ref_loss)) > 1e-3 for loss in losses)
    assert max(losses) - min(losses) > 1e-3
    # ... and DDP's average of their gradients is not the global batch's gradient.
    assert _max_diff(ranks[0][name][0][1], ref_grads) > 1e-4
