"""``CurveStatefulMetric``: a curve formula as a ``torchmetrics.Metric``, exact and binned.

Several batches (with tied scores) against torchmetrics' own metrics and scikit-learn on
the concatenated data, multilabel and multiclass averages, ``ignore_index``, an ``O(T)``
binned state, the errors, and 2 ``gloo`` ranks against one process. torchmetrics forms
its curves in float32, so it is matched to float32 rounding (``F32``); scikit-learn, in
float64, to ``1e-12``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torchmetrics.classification as tmc
from ddp_launch import rank_logs, run_ranks
from script_loader import load_script
from sklearn.metrics import average_precision_score, roc_auc_score

from metricc.errors import MetricError, MetricWarning
from metricc.evaluate.curve_stateful import CurveStatefulMetric
from metricc.language.parse import parse

F32 = 2e-6
BATCHES = (40, 25, 61)


def _metric(text: str, values: dict | None = None, **kw) -> CurveStatefulMetric:
    return CurveStatefulMetric(parse(text).expr, values, **kw)


def _batches(seed: int, cols: int = 0, kind: str = "binary") -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in BATCHES:
        shape = (n,) if not cols else (n, cols)
        if kind == "multiclass":
            y = torch.randint(cols, (n,), generator=g)
            logits = torch.randn(n, cols, generator=g, dtype=torch.float64)
            logits[torch.arange(n), y] += 1.0
            s = torch.softmax((logits * 4).round() / 4, -1)  # tied rows
        else:
            y = (torch.rand(shape, generator=g) < 0.3).long()
            # tied scores below the grid's top point 1 (where torchmetrics' binned AUROC drops area)
            s = ((torch.rand(shape, generator=g, dtype=torch.float64) + 0.4 * y) / 1.4 * 19).round() / 20
        out.append((s.float(), y))  # float32, as torchmetrics computes: a score on a grid point counts alike
    return out


def _run(metric, batches):
    for s, y in batches:
        metric.update(s, y)
    return metric.compute()


@pytest.mark.parametrize("thresholds", [None, 11, 100])
def test_binary_auroc_and_ap_over_batches_equal_torchmetrics_and_sklearn(thresholds) -> None:
    batches = _batches(1)
    s, y = (torch.cat(t) for t in zip(*batches, strict=True))
    for text, theirs, sk in (("auroc", tmc.BinaryAUROC, roc_auc_score),
                             ("average_precision", tmc.BinaryAveragePrecision, average_precision_score)):
        got = _run(_metric(text, thresholds=thresholds), batches)
        want = _run(theirs(thresholds=thresholds), [(a.float(), b) for a, b in batches])
        assert got.dtype == torch.float64 and got.shape == ()
        assert abs(float(got) - float(want)) < F32, (text, got, want)
        if thresholds is None:
            assert abs(float(got) - sk(y.numpy(), s.numpy())) < 1e-12


def test_binned_on_scores_at_grid_points_is_the_exact_value_also_at_the_top() -> None:
    # every score a grid point (some at 1, the top one): the binned curve is the exact curve,
    # as the binned points end at "nothing predicted positive" (torchmetrics' binned AUROC
    # leaves the area to that point out)
    s = torch.tensor([1.0, 1.0, 0.9, 0.5, 0.5, 0.1, 0.0, 1.0], dtype=torch.float64)
    y = torch.tensor([1, 0, 1, 0, 1, 0, 0, 1])
    for text, sk in (("auroc", roc_auc_score), ("average_precision", average_precision_score)):
        got = _run(_metric(text, thresholds=11), [(s, y)])
        assert abs(float(got) - sk(y.numpy(), s.numpy())) < 1e-12, text


def test_the_binned_state_is_o_t_whatever_the_batches() -> None:
    m = _metric("auroc", thresholds=50)
    for s, y in _batches(2) * 3:
        m.update(s, y)
    (state,) = (getattr(m, name) for name in m._defaults)
    assert state.shape == (2, 1, 51) and state.dtype == torch.int64
    assert int(state.sum()) == 3 * sum(BATCHES)


@pytest.mark.parametrize(("text", "theirs", "kw"), [
    ("recall_at_precision", tmc.BinaryRecallAtFixedPrecision, {"min_precision": 0.5}),
    ("precision_at_recall", tmc.BinaryPrecisionAtFixedRecall, {"min_recall": 0.7}),
    ("recall_at_precision", tmc.BinaryRecallAtFixedPrecision, {"min_precision": 0.999}),  # none reach it
])
def test_operating_points_equal_torchmetrics(text, theirs, kw) -> None:
    batches = _batches(3)
    got = _run(_metric(text, kw), batches)
    want, _ = _run(theirs(**kw), [(a.float(), b) for a, b in batches])
    assert abs(float(got) - float(want)) < F32, (got, want)


@pytest.mark.parametrize("average", ["macro", "weighted", "micro", "none"])
@pytest.mark.parametrize("thresholds", [None, 21])
def test_multilabel_averages_equal_torchmetrics(average, thresholds) -> None:
    batches = _batches(4, cols=3)
    batches[1][1][:5, 0] = -1  # ignored elements
    for text, theirs in (("auroc", tmc.MultilabelAUROC), ("average_precision", tmc.MultilabelAveragePrecision)):
        got = _run(_metric(text, mode="multilabel", num_labels=3, average=average, thresholds=thresholds,
                           ignore_index=-1), batches)
        want = _run(theirs(num_labels=3, average=average, thresholds=thresholds, ignore_index=-1),
                    [(a.float(), b) for a, b in batches])
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want.double().numpy(), rtol=0, atol=F32)


@pytest.mark.parametrize("average", ["macro", "weighted", "none"])
@pytest.mark.parametrize("thresholds", [None, 21])
def test_multiclass_one_vs_rest_equals_torchmetrics_and_sklearn(average, thresholds) -> None:
    batches = _batches(5, cols=4, kind="multiclass")
    for text, theirs in (("auroc", tmc.MulticlassAUROC), ("average_precision", tmc.MulticlassAveragePrecision)):
        got = _run(_metric(text, mode="multiclass", num_classes=4, average=average, thresholds=thresholds),
                   batches)
        want = _run(theirs(num_classes=4, average=average, thresholds=thresholds),
                    [(a.float(), b) for a, b in batches])
        np.testing.assert_allclose(got.numpy(), want.double().numpy(), rtol=0, atol=F32)
    if thresholds is None and average != "none":
        s, y = (torch.cat(t) for t in zip(*batches, strict=True))
        got = _run(_metric("auroc", mode="multiclass", num_classes=4, average=average), batches)
        assert abs(float(got) - roc_auc_score(y.numpy(), s.numpy(), multi_class="ovr", average=average)) < 1e-12


def test_multiclass_ignore_index_and_logits() -> None:
    batches = _batches(6, cols=3, kind="multiclass")
    logits = [(torch.log(s), y) for s, y in batches]
    logits[0][1][:4] = 9
    ours = _run(_metric("auroc", mode="multiclass", num_classes=3, ignore_index=9, from_logits=True), logits)
    theirs = _run(tmc.MulticlassAUROC(num_classes=3, ignore_index=9), [(a.float(), b) for a, b in logits])
    assert abs(float(ours) - float(theirs)) < F32


def test_an_undefined_column_warns_and_is_left_out_of_the_macro_average() -> None:
    s = torch.tensor([[0.1, 0.2], [0.9, 0.3], [0.4, 0.8]], dtype=torch.float64)
    y = torch.tensor([[0, 0], [1, 0], [0, 0]])  # column 1 has no positive
    m = _metric("auroc", mode="multilabel", num_labels=2)
    m.update(s, y)
    with pytest.warns(MetricWarning, match=r"column\(s\) \[1\].*leaves them out"):
        assert float(m.compute()) == 1.0  # column 0 alone


@pytest.mark.parametrize(("make", "match"), [
    (lambda: _metric("auroc", mode="binray"), "did you mean 'binary'"),
    (lambda: _metric("auroc", average="macor"), "did you mean 'macro'"),
    (lambda: _metric("auroc", mode="multiclass"), "needs num_classes"),
    (lambda: _metric("auroc", mode="multilabel", num_classes=3, num_labels=4), "name the same thing"),
    (lambda: _metric("recall_at_precision"), "without values"),
    (lambda: _metric("auroc", thresholds=1), "at least 2"),
])
def test_bad_options_raise_at_construction(make, match) -> None:
    with pytest.raises(MetricError, match=match):
        make()


@pytest.mark.filterwarnings("ignore:The ``compute`` method")  # torchmetrics' note on compute before update
def test_bad_batches_and_an_empty_compute_raise() -> None:
    m = _metric("auroc", thresholds=10)
    with pytest.raises(MetricError, match="before any update"):
        m.compute()
    with pytest.raises(MetricError, match="probabilities"):
        m.update(torch.tensor([0.5, 1.5]), torch.tensor([0, 1]))
    with pytest.raises(MetricError, match="0 and 1"):
        m.update(torch.tensor([0.5, 0.5]), torch.tensor([0, 2]))
    with pytest.raises(MetricError, match="shape"):
        m.update(torch.tensor([[0.5, 0.5]]), torch.tensor([0]))
    with pytest.raises(MetricError, match="NaN"):
        m.update(torch.tensor([0.5, float("nan")]), torch.tensor([0, 1]))


WORKER = Path(__file__).with_name("curve_stateful_ddp_worker.py")


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend")
def test_two_ranks_equal_one_process_on_all_shards(tmp_path: Path) -> None:
    worker = load_script(WORKER, "metricc_curve_stateful_ddp_worker")
    runs, folder = run_ranks(WORKER, 2, lambda: tmp_path)
    assert all(r.returncode == 0 for r in runs), rank_logs(runs)
    reference = worker.run(2, [0, 1])
    for rank in range(2):
        got = torch.load(folder / f"rank{rank}.pt")
        for name, value in reference.items():
            assert torch.equal(got[name], value), (rank, name, got[name], value)


def test_clone_pickle_and_reset_keep_the_formula_and_empty_the_state() -> None:
    import pickle

    m = _metric("recall_at_precision", {"min_precision": 0.5}, thresholds=20)
    m.update(torch.tensor([0.9, 0.2, 0.7]), torch.tensor([1, 0, 0]))
    for copy in (m.clone(), pickle.loads(pickle.dumps(m))):
        assert float(copy.compute()) == float(m.compute()) == 1.0
    m.reset()
    assert int(m.hist.sum()) == 0
