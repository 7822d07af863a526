"""``sync_dist=True`` on the compiled curve losses equals one process on the concatenated batch.

Starts 2 and 3 ``gloo`` processes on 127.0.0.1 (``tests/curve_loss_ddp_worker.py``; one
spawn per world size, every case inside it), each training a small float64 model in DDP
on an uneven shard (the last one without positives), and compares every step with a
single process on the concatenated batch, to 1e-10.

The convention, the 2x2 losses' (``test_distributed.py``): every rank's loss is the
global batch's loss, so the all-reduce's backward sums the ranks' (equal) gradients and
each rank's scores get ``world`` times their slice of the global gradient; DDP's mean over
ranks takes the factor back out, so the parameter gradients are the global ones and the
user multiplies by nothing.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ddp_launch import rank_logs, run_ranks
from script_loader import load_script

WORKER = Path(__file__).with_name("curve_loss_ddp_worker.py")
worker = load_script(WORKER, "metricc_curve_loss_ddp_worker")

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch built without the gloo backend")
TOL = 1e-10


@pytest.fixture(scope="module", params=[2, 3], ids=lambda w: f"world{w}")
def ranks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list]:
    world = request.param
    runs, outdir = run_ranks(WORKER, world, lambda: tmp_path_factory.mktemp(f"curve_loss_ddp{world}"))
    if all(r.returncode == 0 for r in runs):
        return world, [torch.load(outdir / f"rank{r}.pt") for r in range(world)]
    pytest.fail(f"distributed workers failed:\n{rank_logs(runs)}")


@functools.cache
def _reference(name: str) -> list:
    return worker.run_case(name, world=1, rank=0, ddp=False)


def test_the_last_shard_has_no_positives() -> None:
    for world in (2, 3):
        for step in range(worker.STEPS):
            _x, y, labels = worker.make_data(world, step)[-1]
            assert y.sum() == 0 and y.numel() > 0
            assert not bool((labels == worker.CLASSES - 1).any())


@pytest.mark.parametrize("name", list(worker.CASES))
def test_loss_and_gradients_equal_single_process(ranks: tuple[int, list], name: str) -> None:
    world, results = ranks
    ref = _reference(name)
    sizes = worker.SHARDS[world]
    for rank, got_all in enumerate(results):
        for step, (got, want) in enumerate(zip(got_all[name], ref, strict=True)):
            where = f"{name} world {world} rank {rank} step {step}"
            loss, score_grad, *param_grads = got
            ref_loss, ref_score_grad, *ref_param_grads = want
            assert abs(float(loss - ref_loss)) < TOL, where
            mine = ref_score_grad.split(sizes)[rank]
            torch.testing.assert_close(score_grad, world * mine, rtol=0, atol=TOL, msg=where)
            for p, q in zip(param_grads, ref_param_grads, strict=True):
                torch.testing.assert_close(p, q, rtol=0, atol=TOL, msg=where)
            # not vacuous: the loss moves the scores and the parameters (where no threshold meets
            # recall_at_precision's bound the gradient is tau-sized, about 6e-5 here: still far
            # above the tolerance the equalities above are checked to)
            assert float(mine.abs().max()) > 1e-5, where
            assert max(float(q.abs().max()) for q in ref_param_grads) > 1e-4, where


@pytest.mark.parametrize("name", [n for n, (_, _, o) in worker.CASES.items() if "memory_decay" in o])
def test_memory_changes_the_second_step(name: str) -> None:
    """With ``memory_decay`` the second step's loss pools the first batch's curve: it differs
    from the same loss without memory (so the synced memory above is really exercised)."""
    first, second = (step[0] for step in _reference(name))
    plain_first, plain_second = (step[0] for step in worker.run_case(
        name, world=1, rank=0, ddp=False, memory=False))
    assert abs(float(first - plain_first)) < TOL  # nothing remembered yet
    assert abs(float(second - plain_second)) > 1e-6
