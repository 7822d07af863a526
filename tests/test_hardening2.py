"""Hardening, round two (issue 26, points 5, 7, 8, 9): each test failed on the code before it."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# --- point 8: accepted extremes are finite, the rest refused up front -----------------------

def _finite_or_refused(make_loss, x: torch.Tensor, y: torch.Tensor, weight=None) -> str:  # type: ignore[no-untyped-def]
    """``"refused"`` (a MetricError) or ``"finite"``; a NaN/inf loss or gradient fails."""
    x = x.clone().requires_grad_()
    try:
        loss = make_loss()
        value = loss(x, y) if weight is None else loss(x, y, weight)
        value.backward()
    except MetricError:
        return "refused"
    assert bool(torch.isfinite(value).all()), value
    # A gradient past float32's range (1e38*TP/(TP+FP)) is +-inf, never NaN (docs/numerics.md)
    assert not bool(torch.isnan(x.grad).any()), x.grad
    return "finite"


X2 = torch.linspace(-3, 3, 16)
Y2 = (torch.arange(16) % 3 == 0).float()
XK = torch.linspace(-8, 8, 48).reshape(16, 3)
YK = torch.arange(16) % 3


@pytest.mark.parametrize("amplifier", [1e200, 1e38])
def test_an_amplifier_that_overflows_float32_is_refused(amplifier: float) -> None:
    with pytest.raises(MetricError, match=r"amplifier=.*outside \[0, 1e\+30\]"):
        metricc.compile("f1").loss(amplifier=amplifier, from_logits=True)


@pytest.mark.parametrize("metric,options", [("quadratic_kappa", {}), ("dice", {"mode": "multiclass"})])
def test_a_temperature_that_overflows_the_softmax_is_refused(metric: str, options: dict) -> None:
    with pytest.raises(MetricError, match=r"temperature=1e-45 is outside \[1e-30"):
        metricc.compile(metric).loss(temperature=1e-45, from_logits=True, **options)


def test_a_float32_weight_map_that_overflows_the_counts_is_refused() -> None:
    # validated in float64 (finite), summed in float32 (inf): the loss was NaN
    assert _finite_or_refused(lambda: metricc.compile("mcc").loss(from_logits=True), X2, Y2,
                              torch.full((16,), 1e38)) == "refused"
    assert _finite_or_refused(lambda: metricc.compile("mcc").loss(from_logits=True), X2.double(),
                              Y2.double(), torch.full((16,), 1e38, dtype=torch.float64)) == "finite"


@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
def test_a_loss_beyond_float32_is_refused_and_float64_computes_it(backward: str) -> None:
    m = metricc.compile("1e39*TP/(TP+FP)")
    x, y = torch.full((8,), 10.0), torch.ones(8)
    with pytest.raises(MetricError, match="beyond float32's range"):
        m.loss(from_logits=True, backward=backward)(x, y)
    value = m.loss(from_logits=True, backward=backward)(x.double(), y.double())
    assert math.isfinite(float(value)) and float(value) < -9e38


def _cpu_budget(seconds: float):  # type: ignore[no-untyped-def]
    """Assert one hypothesis example's CPU time (not wall clock: the machine is shared)."""
    import contextlib
    import time

    @contextlib.contextmanager
    def guard():  # type: ignore[no-untyped-def]
        start = time.process_time()
        yield
        assert time.process_time() - start < seconds

    return guard()


EXTREMES = settings(max_examples=25, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@EXTREMES
@given(amplifier=st.floats(1e-6, 1e300), temperature=st.floats(1e-320, 1e6),
       weight=st.floats(0, 1e300), exponent=st.sampled_from([0, 20, 38, 39, 150, 300]),
       double=st.booleans())
def test_extreme_accepted_options_never_give_nan(amplifier: float, temperature: float, weight: float,
                                                 exponent: int, double: bool) -> None:
    dt = torch.float64 if double else torch.float32
    x2, y2, xk = X2.to(dt), Y2.to(dt), XK.to(dt)
    w = torch.full((16,), weight, dtype=dt) if math.isfinite(float(torch.tensor(weight, dtype=dt))) \
        else None
    with _cpu_budget(60.0):
        _finite_or_refused(lambda: metricc.compile("f1").loss(amplifier=amplifier, from_logits=True),
                           x2, y2, w)
        _finite_or_refused(lambda: metricc.compile("quadratic_kappa").loss(
            temperature=temperature, from_logits=True), xk, YK)
        _finite_or_refused(lambda: metricc.compile("dice").loss(
            temperature=temperature, from_logits=True, mode="multiclass"), xk, YK)
        for backward in ("symbolic", "autograd"):
            _finite_or_refused(lambda b=backward: metricc.compile(f"1e{exponent}*TP/(TP+FP)").loss(
                from_logits=True, backward=b), x2, y2)
