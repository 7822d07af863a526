"""``sync_dist=True`` on group losses equals one process on the concatenated batch.

Two ``gloo`` processes on 127.0.0.1 (``tests/groups_ddp_worker.py``) train a small float64
model in DDP on uneven shards (the last one has no member of group 2), compared with a single
process on the concatenated batch to 1e-10: the loss, each rank's score gradient (``world``
times its slice of the global one: the 2 x 2 losses' convention), the parameter gradients
after DDP's mean, and the multipliers of a constraint (the same step on every rank).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ddp_launch import rank_logs, run_ranks
from script_loader import load_script

WORKER = Path(__file__).with_name("groups_ddp_worker.py")
worker = load_script(WORKER, "metricc_groups_ddp_worker")

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch built without the gloo backend")
TOL = 1e-10


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list:
    runs, outdir = run_ranks(WORKER, 2, lambda: tmp_path_factory.mktemp("groups_ddp"))
    if all(r.returncode == 0 for r in runs):
        return [torch.load(outdir / f"rank{r}.pt") for r in range(2)]
    pytest.fail(f"distributed workers failed:\n{rank_logs(runs)}")


@functools.cache
def _reference(name: str) -> list:
    return worker.run_case(name, world=1, rank=0, ddp=False)


def test_the_last_shard_misses_a_group() -> None:
    for step in range(worker.STEPS):
        assert not bool((worker.make_data(2, step)[-1][2] == worker.GROUPS - 1).any())


@pytest.mark.parametrize("name", list(worker.CASES))
def test_loss_gradients_and_multipliers_equal_single_process(results: list, name: str) -> None:
    ref = _reference(name)
    sizes = worker.SHARDS[2]
    for rank, got_all in enumerate(results):
        for step, (got, want) in enumerate(zip(got_all[name], ref, strict=True)):
            where = f"{name} rank {rank} step {step}"
            loss, score_grad, *rest = got
            ref_loss, ref_score_grad, *ref_rest = want
            assert abs(float(loss - ref_loss)) < TOL, where
            mine = ref_score_grad.split(sizes)[rank]
            torch.testing.assert_close(score_grad, 2 * mine, rtol=0, atol=TOL, msg=where)
            for p, q in zip(rest, ref_rest, strict=True):
                torch.testing.assert_close(p, q, rtol=0, atol=TOL, msg=where)
            assert float(mine.abs().max()) > 1e-6, where
