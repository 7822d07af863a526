"""Under torch.distributed: ``Metric.metric()`` and weighted ``sync_dist`` losses are global.

Starts 3 ``gloo`` processes (``tests/stateful_ddp_worker.py``) that work on
uneven shards and compares their results with one process on all the shards:
every rank's synced ``compute()`` exactly, and every rank's weighted loss
(weight maps, also with soft labels) and its input gradient, which is ``world``
times the single-process gradient of that shard (every rank's loss depends on
every rank's counts; DDP then averages over the ranks, see docs/distributed.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ddp_launch import rank_logs, run_ranks
from script_loader import load_script

WORKER = Path(__file__).with_name("stateful_ddp_worker.py")

worker = load_script(WORKER, "metricc_stateful_ddp_worker")

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch built without the gloo backend")


@pytest.mark.parametrize("world", [3])  # uneven shards; one more rank costs ~5 s of CPU
def test_synced_compute_equals_one_process_on_all_shards(world: int, tmp_path: Path) -> None:
    runs, _ = run_ranks(WORKER, world, lambda: tmp_path)
    assert all(r.returncode == 0 for r in runs), rank_logs(runs)
    reference = worker.run(world, list(range(world)))
    single = worker.run_losses(1, 0)
    for rank in range(world):
        saved = torch.load(tmp_path / f"rank{rank}.pt")
        got = saved["metrics"]
        assert got.keys() == reference.keys()
        for name, value in reference.items():
            assert torch.equal(got[name], value), (rank, name, got[name], value)
        lo = sum(worker.SHARDS[world][:rank])
        for name, (loss, grad) in saved["losses"].items():
            ref_loss, ref_grad = single[name]
            torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=1e-14)
            shard = ref_grad[lo:lo + worker.SHARDS[world][rank]]
            torch.testing.assert_close(grad, world * shard, rtol=1e-10, atol=1e-13)
    # the samplewise states hold one value per sample of every rank
    assert reference["binary_mcc_samplewise"].shape == (worker.STEPS * 9,)
    assert reference["multiclass_f1_none_samplewise"].shape == (worker.STEPS * 9, worker.C)
