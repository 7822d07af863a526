"""The soft curve (runtime/curve.py): against a dense float64 reference, gradcheck, its
limits as the grid refines, O(n + T) memory, pooling over batches and ranks.

The reference below builds the full ``n x (T + 2w)`` kernel matrix in plain torch and
lets autograd differentiate it: an independent implementation of the same definition.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from ddp_launch import rank_logs, run_ranks
from hypothesis import given, settings
from hypothesis import strategies as st
from script_loader import load_script
from sklearn.metrics import average_precision_score, roc_auc_score

from metricc.errors import MetricError
from metricc.runtime.curve import CurvePool, CurveRelaxation, SoftCurve, curve_pool, soft_curve, sync_curve

F64 = torch.float64


def soft_auroc(tp, fp, pos, neg):
    """The trapezoid under the soft ROC curve, closed at (0, 0)."""
    zero = tp.new_zeros((*tp.shape[:-1], 1))
    tpr, fpr = torch.cat((tp / pos[..., None], zero), -1), torch.cat((fp / neg[..., None], zero), -1)
    return ((fpr[..., :-1] - fpr[..., 1:]) * (tpr[..., :-1] + tpr[..., 1:])).sum(-1) / 2


def soft_ap(tp, fp, pos, neg):
    """``sum_k (R_k - R_{k+1}) P_k`` over the soft curve."""
    zero = tp.new_zeros((*tp.shape[:-1], 1))
    recall = torch.cat((tp / pos[..., None], zero), -1)
    return ((recall[..., :-1] - recall[..., 1:]) * tp / (tp + fp).clamp_min(1e-300)).sum(-1)


def reference_curve(s, y, w, relax, from_logits):
    lo, h = relax.grid()
    if relax.space == "probability":
        x = torch.sigmoid(s) if from_logits else s
    else:
        x = (s if from_logits else torch.log(s / (1 - s))).clamp(-relax.clip, relax.clip)
    u = (x - lo) / h
    T, wd = relax.bins, int(relax.width)
    j = torch.arange(-wd, T + wd, dtype=F64)
    K = torch.clamp(1 - (u[..., None] - j).abs() / wd, min=0) / wd
    # bins beyond the grid fold into its end bins
    K = torch.cat((K[..., :wd + 1].sum(-1, keepdim=True), K[..., wd + 1:T + wd - 1],
                   K[..., T + wd - 1:].sum(-1, keepdim=True)), -1)
    w = torch.ones_like(u) if w is None else (w if w.shape == u.shape else w[:, None].expand_as(u))
    hist_pos = ((y * w)[..., None] * K).sum(0)
    hist_neg = (((1 - y) * w)[..., None] * K).sum(0)
    tp, fp = (h.flip(-1).cumsum(-1).flip(-1) for h in (hist_pos, hist_neg))
    return tp, fp


def make_inputs(shape, from_logits, soft_labels, weighted, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(shape, generator=g) < 0.4).to(F64)
    if soft_labels:
        y = torch.rand(shape, generator=g, dtype=F64)
    s = torch.randn(shape, generator=g, dtype=F64) * 2 + y
    if not from_logits:
        s = torch.sigmoid(s)
    w = torch.rand(shape[:1], generator=g, dtype=F64) * 2 if weighted else None
    return s.requires_grad_(), y, w


CONFIGS = [(space, fl, width) for space in ("probability", "logit") for fl in (True, False) for width in (1, 3)]


@pytest.mark.parametrize(("space", "from_logits", "width"), CONFIGS)
@pytest.mark.parametrize("shape", [(40,), (30, 3)], ids=["binary", "multilabel"])
@pytest.mark.parametrize(("soft_labels", "weighted"), [(False, False), (False, True), (True, True)],
                         ids=["hard", "weighted", "soft_labels"])
def test_curve_and_backward_equal_the_dense_reference(space, from_logits, width, shape, soft_labels,
                                                      weighted) -> None:
    relax = CurveRelaxation(bins=12, width=width, space=space, clip=2.5)
    s, y, w = make_inputs(shape, from_logits, soft_labels, weighted)
    tp, fp, pos, neg = soft_curve(s, y, w, relax=relax, from_logits=from_logits)
    ref_tp, ref_fp = reference_curve(s, y, w, relax, from_logits)
    torch.testing.assert_close(tp, ref_tp, rtol=0, atol=1e-12)
    torch.testing.assert_close(fp, ref_fp, rtol=0, atol=1e-12)
    assert tp.shape == (*shape[1:], 12) and pos.shape == neg.shape == shape[1:]
    g = torch.Generator().manual_seed(1)
    a_tp, a_fp = torch.randn(tp.shape, generator=g, dtype=F64), torch.randn(fp.shape, generator=g, dtype=F64)
    (grad,) = torch.autograd.grad((a_tp * tp).sum() + (a_fp * fp).sum(), s)
    (ref_grad,) = torch.autograd.grad((a_tp * ref_tp).sum() + (a_fp * ref_fp).sum(), s)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)
    assert grad.abs().max() > 1e-3


@pytest.mark.parametrize(("space", "from_logits", "width"), CONFIGS)
def test_gradcheck_float64(space, from_logits, width) -> None:
    relax = CurveRelaxation(bins=7, width=width, space=space, clip=2.0)
    s, y, w = make_inputs((9, 2), from_logits, False, True, seed=3)

    def value(s: torch.Tensor) -> torch.Tensor:
        return soft_auroc(*soft_curve(s, y, w, relax=relax, from_logits=from_logits))

    assert torch.autograd.gradcheck(value, (s,))
    assert torch.autograd.gradcheck(lambda s: soft_curve(s, y, relax=relax, from_logits=from_logits)[:2], (s,))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 200), st.integers(2, 40), st.sampled_from([1, 2, 4]), st.integers(0, 2**31 - 1),
       st.sampled_from(["probability", "logit"]))
def test_curves_are_monotone_and_hold_all_the_weight(n, bins, width, seed, space) -> None:
    width = min(width, bins - 1)
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, generator=g, dtype=F64) * 5  # many beyond the clip range
    y = torch.rand(n, generator=g) < 0.3
    w = torch.rand(n, generator=g, dtype=F64)
    tp, fp, pos, neg = soft_curve(s, y, w, relax=CurveRelaxation(bins=bins, width=width, space=space),
                                  from_logits=True)
    assert (tp[1:] <= tp[:-1]).all() and (fp[1:] <= fp[:-1]).all() and (tp >= 0).all() and (fp >= 0).all()
    assert tp.dtype == F64 and tp.shape == (bins,)
    assert abs(float(pos) - float((w * y).sum())) < 1e-9 and abs(float(neg) - float((w * ~y).sum())) < 1e-9
    assert float(tp[0]) == float(pos) and float(fp[0]) == float(neg)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 300), st.integers(2, 64), st.integers(0, 2**31 - 1), st.sampled_from([1, 2]))
def test_soft_counts_differ_from_hard_ones_only_near_their_threshold(n, bins, seed, decimals) -> None:
    """With linear interpolation the soft step at ``t_k`` ramps over ``t_k +- h/2``: only
    scores that close to ``t_k`` may count differently from ``[s >= t_k]``."""
    g = torch.Generator().manual_seed(seed)
    s = torch.round(torch.rand(n, generator=g, dtype=F64), decimals=decimals)  # ties, grid hits
    y = torch.rand(n, generator=g) < 0.5
    relax = CurveRelaxation(bins=bins)
    tp, fp, _, _ = soft_curve(s, y, relax=relax, from_logits=False)
    h = relax.grid()[1]
    for k, t in enumerate(relax.thresholds().tolist()):
        near = (s - t).abs() < h / 2 + 1e-12
        assert abs(float(tp[k]) - int(((s >= t) & y).sum())) <= int((near & y).sum()) + 1e-9
        assert abs(float(fp[k]) - int(((s >= t) & ~y).sum())) <= int((near & ~y).sum()) + 1e-9


def test_columns_of_a_batch_equal_their_own_curves() -> None:
    s, y, w = make_inputs((50, 4), True, False, True, seed=5)
    relax = CurveRelaxation(bins=20, width=2)
    batch = soft_curve(s, y, w, relax=relax, from_logits=True)
    for c in range(4):
        one = soft_curve(s[:, c], y[:, c], w, relax=relax, from_logits=True)
        for a, b in zip(batch, one, strict=True):
            torch.testing.assert_close(a[c], b, rtol=0, atol=1e-12)


def test_the_soft_scores_converge_to_the_exact_ones_as_the_grid_refines() -> None:
    g = torch.Generator().manual_seed(0)
    n = 20000
    y = torch.rand(n, generator=g) < 0.1
    logits = torch.randn(n, generator=g, dtype=F64) + 1.5 * y
    exact_roc = roc_auc_score(y.numpy(), logits.numpy())
    exact_ap = average_precision_score(y.numpy(), logits.numpy())
    for space in ("probability", "logit"):
        errors = []
        for bins in (32, 128, 512, 2048):
            curve = soft_curve(logits, y, relax=CurveRelaxation(bins=bins, space=space), from_logits=True)
            errors.append((abs(float(soft_auroc(*curve)) - exact_roc), abs(float(soft_ap(*curve)) - exact_ap)))
        roc_err, ap_err = zip(*errors, strict=True)
        assert roc_err[-1] < 2e-4 and ap_err[-1] < 2e-3, (space, errors)
        assert roc_err[-1] < roc_err[0] / 4 and ap_err[-1] < ap_err[0] / 4, (space, errors)


def peak_bytes(step) -> int:
    """Peak of (allocated - freed) CPU bytes during ``step`` (as benchmarks/bench_loss.py)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
                     and e.device_type() == torch.autograd.DeviceType.CPU), key=lambda e: e.start_ns())
    current = peak = 0
    for e in events:
        current += e.nbytes()
        peak = max(peak, current)
    return peak


def test_memory_is_linear_in_n_and_independent_of_the_grid() -> None:
    n = 2_000_000
    g = torch.Generator().manual_seed(0)
    s = torch.randn(n, generator=g).requires_grad_()
    y = torch.rand(n, generator=g) < 0.1

    def step(bins: int) -> None:
        s.grad = None
        relax = CurveRelaxation(bins=bins)
        (1 - soft_auroc(*soft_curve(s, y, relax=relax, from_logits=True))).backward()

    peaks = {bins: peak_bytes(lambda bins=bins: step(bins)) for bins in (256, 8192)}
    # an n x T float32 tensor alone would be 2 GB at T = 256; this stays under ~50 bytes per score
    assert peaks[256] < 50 * n, peaks
    assert peaks[8192] < peaks[256] + 8192 * 64, peaks
    assert s.grad.abs().max() > 0


def test_memory_decay_pools_batches_with_gradient_through_the_current_one() -> None:
    relax = CurveRelaxation(bins=10, space="logit", clip=3.0)
    pool = CurvePool(sync_dist=False, process_group=None, memory_decay=0.5)
    s1, y1, _ = make_inputs((25,), True, False, False, seed=1)
    s2, y2, _ = make_inputs((25,), True, False, False, seed=2)
    c1 = soft_curve(s1, y1, relax=relax, from_logits=True)
    pool(c1)
    pooled = pool(soft_curve(s2, y2, relax=relax, from_logits=True))
    ref_tp, ref_fp = reference_curve(s2, y2, None, relax, True)
    want = (ref_tp + 0.5 * c1[0].detach(), ref_fp + 0.5 * c1[1].detach(),
            y2.sum() + 0.5 * y1.sum(), (1 - y2).sum() + 0.5 * (1 - y1).sum())
    for got, ref in zip(pooled, want, strict=True):
        torch.testing.assert_close(got, ref.to(F64), rtol=0, atol=1e-12)
    (grad,) = torch.autograd.grad(soft_auroc(*pooled), s2)
    (ref_grad,) = torch.autograd.grad(soft_auroc(*want), s2)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-13)
    assert pool.memory.dtype == F64 and not pool.memory.requires_grad
    pool.eval()  # evaluation neither reads nor updates the memory
    torch.testing.assert_close(pool(c1)[0], c1[0])
    pool.train()
    pool.reset()
    torch.testing.assert_close(pool(c1)[0], c1[0])
    assert curve_pool() is None
    with pytest.raises(MetricError, match="memory_decay"):
        curve_pool(memory_decay=2.0)
    with pytest.raises(MetricError, match="reset_memory"):
        pool(soft_curve(s2, y2, relax=CurveRelaxation(bins=11), from_logits=True))


def test_one_process_sync_is_the_identity_and_an_empty_batch_is_a_zero_curve() -> None:
    s = torch.zeros(0, requires_grad=True)
    tp, fp, pos, neg = soft_curve(s, torch.zeros(0), relax=CurveRelaxation(bins=4), from_logits=True)
    assert tp.tolist() == fp.tolist() == [0.0] * 4 and float(pos) == 0 and float(neg) == 0
    (tp.sum() + fp.sum()).backward()  # an empty shard still joins the backward
    assert s.grad.shape == (0,)
    curve = soft_curve(torch.tensor([0.3, 0.6]), torch.tensor([0, 1]), from_logits=False)
    assert all(torch.equal(a, b) for a, b in zip(sync_curve(curve), curve, strict=True))


def test_half_inputs_get_a_float64_curve_and_a_half_gradient() -> None:
    s = torch.randn(100, dtype=torch.float16).requires_grad_()
    y = torch.rand(100) < 0.5
    tp, *_ = soft_curve(s, y, from_logits=True)
    assert tp.dtype == F64
    soft_auroc(*soft_curve(s, y, from_logits=True)).backward()
    assert s.grad.dtype == torch.float16 and torch.isfinite(s.grad).all()


@pytest.mark.parametrize(("options", "match"), [
    ({"bins": 1}, "bins"), ({"bins": True}, "bins"), ({"bins": 256.0}, "bins"),
    ({"width": 1.5}, "width"), ({"width": 0}, "width"), ({"width": True}, "width"),
    ({"width": float("nan")}, "width"), ({"bins": 4, "width": 4}, "width"),
    ({"space": "logits"}, "did you mean 'logit'"), ({"space": 1}, "space"),
    ({"clip": 0.0}, "clip"), ({"clip": float("inf")}, "clip"), ({"clip": "8"}, "clip"),
])
def test_options_are_checked(options, match) -> None:
    with pytest.raises(MetricError, match=match):
        CurveRelaxation(**options)


def test_options_are_normalised_to_plain_numbers() -> None:
    r = CurveRelaxation(bins=np.int64(64), width=2, clip=np.float32(6.0))
    assert type(r.bins) is int and type(r.width) is float and type(r.clip) is float
    assert r == CurveRelaxation(bins=64, width=2.0, clip=6.0) and r != CurveRelaxation(bins=64)
    assert hash(r) == hash(CurveRelaxation(bins=64, width=2.0, clip=6.0))
    assert pickle.loads(pickle.dumps(r)) == r
    assert repr(r) == "CurveRelaxation(bins=64, width=2.0, space='probability', clip=6.0)"
    with pytest.raises(AttributeError, match="immutable"):
        r.bins = 8
    t = r.thresholds()
    assert t.shape == (64,) and (t[1:] > t[:-1]).all()


@pytest.mark.parametrize(("call", "match"), [
    (lambda: soft_curve(torch.tensor([0.2, float("nan")]), torch.tensor([0, 1]), from_logits=True), "NaN"),
    (lambda: soft_curve(torch.tensor([0.2, 1.5]), torch.tensor([0, 1]), from_logits=False), "from_logits=True"),
    (lambda: soft_curve(torch.tensor([0.2, 0.5]), torch.tensor([0, 2]), from_logits=False), r"\[0, 1\]"),
    (lambda: soft_curve(torch.tensor([0.2, 0.5]), torch.tensor([0, 1, 1]), from_logits=False), "shape"),
    (lambda: soft_curve(torch.tensor([0.2, 0.5]), torch.tensor([0, 1]), torch.tensor([1.0, -1.0]),
                        from_logits=False), "weight"),
    (lambda: soft_curve(torch.tensor([0.2, 0.5]), torch.tensor([0, 1]), from_logits=1), "from_logits"),
    (lambda: soft_curve(torch.tensor([1, 0]), torch.tensor([0, 1]), from_logits=True), "floating"),
    (lambda: soft_curve(torch.zeros(2, 2, 2), torch.zeros(2, 2, 2), from_logits=True), "reshape"),
    (lambda: soft_curve(torch.zeros(2), torch.zeros(2), relax=256, from_logits=True), "CurveRelaxation"),
])
def test_bad_input_raises_metric_error(call, match) -> None:
    with pytest.raises(MetricError, match=match):
        call()


WORKER = Path(__file__).with_name("curve_ddp_worker.py")
worker = load_script(WORKER, "metricc_curve_ddp_worker")


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend")
def test_two_ranks_equal_one_process_on_the_concatenated_batch(tmp_path_factory) -> None:
    runs, outdir = run_ranks(WORKER, 2, lambda: tmp_path_factory.mktemp("curve_ddp"))
    if not all(r.returncode == 0 for r in runs):
        pytest.fail(f"distributed workers failed:\n{rank_logs(runs)}")
    ranks = [torch.load(outdir / f"rank{r}.pt") for r in range(2)]
    sizes = worker.SHARDS[2]
    for name in worker.CASES:
        ref = worker.run_case(name, world=1, rank=0, ddp=False)
        for rank, results in enumerate(ranks):
            for step, (got, want) in enumerate(zip(results[name], ref, strict=True)):
                where = f"{name} rank {rank} step {step}"
                loss, score_grad, *param_grads = got
                ref_loss, ref_score_grad, *ref_param_grads = want
                assert abs(float(loss - ref_loss)) < 1e-10, where
                # each rank's scores get the global loss's gradient times the world size, which
                # DDP's mean over ranks takes back out: the parameter gradients are the global ones
                mine = ref_score_grad.split(sizes)[rank]
                torch.testing.assert_close(score_grad, 2 * mine, rtol=0, atol=1e-10, msg=where)
                for p, q in zip(param_grads, ref_param_grads, strict=True):
                    torch.testing.assert_close(p, q, rtol=0, atol=1e-10, msg=where)
                assert max(float(q.abs().max()) for q in ref_param_grads) > 1e-3, where


def test_benchmark_smoke_run(capsys) -> None:
    """``benchmarks/bench_curve.py --smoke`` end to end (the recorded run drops ``--smoke``)."""
    threads = torch.get_num_threads()
    try:
        bench = load_script(Path("benchmarks/bench_curve.py"))
        assert bench.main(["--smoke"]) == 0
    finally:
        torch.set_num_threads(threads)
    table = capsys.readouterr().out
    for name in ("BCEWithLogits", "soft AUROC", "soft AP", "soft AP, logit grid", "pairwise logistic",
                 "metricc AUROC", "metricc AP", "metricc AUROC (ovr, macro)", "CrossEntropy"):
        assert f"| {name} " in table, table
    # the soft losses run, and are finite: their peak memory is reported (8 rows, and the
    # optional peers' where they import)
    rows = (8 + 2 * (bench.AUCMLoss is not None) + (bench.torchsort is not None)
            + 2 * (bench.SmoothAPLoss is not None))
    assert table.count("| 5e+02 ") == rows and table.count("| 2e+03 ") == rows, table
    assert table.count("| 2x3x8x8 ") == 3 + (bench.MultiLabelAUCMLoss is not None), table


def test_scores_at_the_top_of_the_grid_and_probabilities_past_it() -> None:
    """A logit whose sigmoid rounds to 1 sits on the last grid point (u = T - 1, clamped into the
    last bin with fraction 1): its curve and gradient equal the dense reference. Probabilities
    outside [0, 1] (unchecked with validate_args=False) count at the grid's ends, as 0 and 1."""
    relax = CurveRelaxation(bins=9)
    s = torch.tensor([40.0, 17.0, 0.3, -2.0, -40.0, 1.0], dtype=F64, requires_grad=True)
    y = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0], dtype=F64)
    tp, fp, _, _ = soft_curve(s, y, relax=relax, from_logits=True)
    ref = reference_curve(s, y, None, relax, True)
    torch.testing.assert_close((tp, fp), ref, rtol=0, atol=1e-12)
    (g,) = torch.autograd.grad(soft_auroc(tp, fp, tp[0], fp[0]), s)
    (want,) = torch.autograd.grad(soft_auroc(*ref, ref[0][0], ref[1][0]), s)
    torch.testing.assert_close(g, want, rtol=1e-9, atol=1e-15)
    p = torch.tensor([1.5, 1.0, 0.4, -0.2, 0.0, 0.7], dtype=F64)
    hard = y.bool()  # SoftCurve itself: soft_curve() refuses them, the loss with validate_args=False not
    clipped = SoftCurve.apply(p.clamp(0, 1), hard, None, relax, False, True)
    assert all(torch.equal(a, b) for a, b in zip(SoftCurve.apply(p, hard, None, relax, False, True)[:2],
                                                 clipped[:2], strict=True))


@pytest.mark.parametrize("space", ["probability", "logit"])
@pytest.mark.parametrize("from_logits", [True, False])
@pytest.mark.parametrize("shape", [(203,), (41, 3), (0,), (0, 3)])
def test_the_chunked_histogram_equals_the_whole_batch_one(space: str, from_logits: bool, shape: tuple[int, ...],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """0/1 labels without weights build the histogram a chunk at a time (CPU, eager): with
    chunks of 16 elements (the last one short) the curve and the gradient equal those of the
    whole-batch path (soft labels 0.0/1.0 as floats take it), scores at the top grid point included."""
    from metricc.runtime import curve as curve_module

    gen = torch.Generator().manual_seed(11)
    s = torch.randn(shape, generator=gen, dtype=F64) * 3
    if not from_logits:
        s = torch.sigmoid(s)
    s.view(-1)[:3] = 40.0 if from_logits else 1.0  # the last grid point (probability space)
    y = torch.rand(shape, generator=gen) < 0.4
    relax = CurveRelaxation(bins=9, space=space, clip=4.0)
    up = torch.randn(2, *((shape[1],) if len(shape) > 1 else ()), 9, generator=gen, dtype=F64)
    out = []
    for chunk, hard in ((16, True), (1 << 16, False)):
        monkeypatch.setattr(curve_module, "CHUNK", chunk)
        x = s.clone().requires_grad_(True)
        tp, fp, p, n = SoftCurve.apply(x, y if hard else y.double(), None, relax, from_logits, hard)
        ((tp * up[0]).sum() + (fp * up[1]).sum()).backward()
        out.append((torch.stack([tp, fp]), p, n, x.grad))
    for a, b in zip(*out, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
