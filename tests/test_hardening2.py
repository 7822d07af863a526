"""Hardening, round two (issue 26, points 5, 7, 8, 9): each test failed on the code before it."""

from __future__ import annotations

import pytest
import torch

import metricc
from metricc.errors import MetricError


@pytest.mark.parametrize("name", ["lambda", "eps", "torch", "K", "mx_size", "x0"])
def test_matrix_parameter_names_the_kernel_uses_are_refused(name: str) -> None:
    # These became arguments of the generated kernel: a SyntaxError, a duplicate argument,
    # or a shadowed torch / helper.
    with pytest.raises(MetricError, match="cannot name a K x K parameter"):
        metricc.compile(f"sum(i, j, {name}[i,j]*C[i,j])/n", **{name: torch.rand(3, 3)})


def test_an_ordinary_matrix_parameter_still_works() -> None:
    m = metricc.compile("sum(i, j, W[i,j]*C[i,j])/n", W=torch.eye(3))
    q = torch.eye(3)[[0, 1, 2, 1]]
    assert float(m.loss()(q, torch.tensor([0, 1, 2, 1]))) == pytest.approx(0.0, abs=1e-6)


# --- point 9: odd inputs get MetricErrors ---------------------------------------------------

QK = "quadratic_kappa"
Y3 = torch.tensor([0, 1, 2, 1])


def test_matrix_score_refuses_nan_scores() -> None:
    # argmax of a NaN row picked class 0, and the score came back 0.0
    with pytest.raises(MetricError, match="NaN"):
        metricc.compile(QK).score(torch.full((4, 3), float("nan")), Y3)


@pytest.mark.parametrize("k", [20000, 10**6])
def test_matrix_score_shares_the_class_limit(k: int) -> None:
    # 20000 allocated a 3.2 GB matrix, 10**6 asked torch for 8 TB
    from metricc.evaluate.counts import MAX_ONEHOT

    with pytest.raises(MetricError, match=f"the limit is {MAX_ONEHOT}"):
        metricc.compile(QK).score(torch.tensor([0, 1]), torch.tensor([0, 1]), num_classes=k)


def test_negative_num_classes_names_the_real_problem() -> None:
    with pytest.raises(MetricError, match="num_classes >= 2, got -1"):
        metricc.compile("f1").score(torch.tensor([0, 1]), torch.tensor([0, 1]), num_classes=-1,
                                    mode="multiclass")


@pytest.mark.parametrize("call", [
    lambda: metricc.compile(QK).value("abc"),
    lambda: metricc.compile(QK).value([[1, 2], [3]]),
    lambda: metricc.compile("f1").score([[0.1, 0.2], [0.3]], [1, 0]),
    lambda: metricc.compile(QK).score([[0.1, 0.2], [0.3]], [1, 0]),
    lambda: metricc.compile(QK).score("abc", [1, 0]),
])
def test_strings_and_ragged_lists_are_refused(call: object) -> None:
    with pytest.raises(MetricError, match="rectangular"):
        call()  # type: ignore[operator]


@pytest.mark.parametrize("call", [
    lambda: metricc.compile(QK).score(torch.rand(4, 3, device="meta"), Y3.to("meta")),
    lambda: metricc.compile(QK).value(torch.ones(3, 3, device="meta")),
    lambda: metricc.compile("f1").loss()(torch.rand(4, device="meta"), torch.ones(4, device="meta")),
    lambda: metricc.compile(QK).loss()(torch.rand(4, 3, device="meta"), Y3.to("meta")),
])
def test_meta_tensors_are_refused(call: object) -> None:
    with pytest.raises(MetricError, match="meta tensor"):
        call()  # type: ignore[operator]


@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
def test_unchecked_matrix_loss_names_an_out_of_range_target(backward: str) -> None:
    # validate_args=False reads no data; torch's index error is translated, not added to
    loss = metricc.compile(QK).loss(validate_args=False, backward=backward)
    with pytest.raises(MetricError, match=r"outside 0\.\.2"):
        loss(torch.rand(4, 3).softmax(-1), torch.tensor([0, 1, 5, 1]))


def test_cli_refuses_a_huge_option_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    from metricc.cli import main

    assert main(["compile", "f1", "--option", "amplifier=" + "+".join(["1"] * 60000)]) != 0
    err = capsys.readouterr().err
    assert "at most 1000 characters" in err and "Traceback" not in err


# --- point 5: DDP, empty shards and mismatched shapes (2 gloo ranks) ------------------------

def test_ddp_empty_shards_join_and_mismatched_shapes_fail_on_every_rank(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    import hardening_ddp_worker as worker
    from ddp_launch import run_ranks

    runs, folder = run_ranks(Path(worker.__file__), 2, lambda: tmp_path)
    assert all(r.returncode == 0 for r in runs), "\n".join(r.stdout[-2000:] for r in runs)
    saved = [torch.load(folder / f"rank{r}.pt") for r in range(2)]
    for name, (kind, metric, options) in worker.SCENARIOS.items():
        # rank 1's shard is empty: the synced loss is rank 0's alone, on both ranks
        _, ref, ref_grad = worker.run_loss(kind, metric, options, 0, sync=False)
        for rank in range(2):
            assert saved[rank][name][0] == "ok", (name, rank, saved[rank][name])
            assert torch.allclose(saved[rank][name][1], ref, rtol=1e-12, atol=1e-12), name
        # each rank's loss depends on rank 0's counts: its gradient is the sum over the two
        # ranks' (identical) losses, which DDP's average over the world turns back into ref_grad
        assert torch.allclose(saved[0][name][2], 2 * ref_grad, rtol=1e-10, atol=1e-12), name
        assert float(ref_grad.abs().max()) > 1e-3, name
    for name in ("mismatch_matrix", "mismatch_multiclass", "mismatch_stateful"):
        for rank in range(2):
            status, kind, message = saved[rank][name]
            assert (status, kind) == ("error", "MetricError"), (name, rank, message)
            assert "rank 0: " in message and "rank 1: " in message, message
