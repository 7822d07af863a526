"""The evidence examples: their smoke runs, and the batched trainer against plain PyTorch."""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


def _run(script: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(EXAMPLES / script), *args, "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)


tabular = _load("imbalanced_tabular")


def test_keel_loader_reads_the_package_files():
    """The 17 KEEL sets load offline with the sizes KEEL publishes."""
    expected = {"ecoli1": (336, 7, 77), "habarman": (306, 3, 81), "yeast5": (1484, 8, 44),
                "cleveland_0_vs_4": (177, 13, 13), "shuttle_c0_vs_c4": (1829, 9, 123)}
    assert len(tabular.KEEL_FILES) == 17
    for name in tabular.KEEL_FILES:
        X, y = tabular.load_keel(name)
        assert X.dtype == np.float64 and np.isfinite(X).all()
        assert set(np.unique(y)) == {0, 1} and len(X) == len(y)
        if name in expected:
            assert (len(y), X.shape[1], int(y.sum())) == expected[name]
    X, y = tabular.DATASETS["breast_cancer_9pct"]()
    assert abs(y.mean() - 0.09) < 0.005


def _reference_model(net, li: int, fi: int, si: int, n_in: int) -> torch.nn.Sequential:
    """One model of the batch as ordinary ``nn.Linear``/``nn.BatchNorm1d`` layers."""
    w1, b1, gamma, beta = (p[li, fi, si].detach().clone() for p in net.layers[0])
    w2, b2 = (p[li, fi, si].detach().clone() for p in net.layers[1])
    model = torch.nn.Sequential(torch.nn.Linear(n_in, w1.shape[1]),
                                torch.nn.BatchNorm1d(w1.shape[1]), torch.nn.ReLU(),
                                torch.nn.Linear(w1.shape[1], 1))
    with torch.no_grad():
        model[0].weight.copy_(w1.T)
        model[0].bias.copy_(b1)
        model[1].weight.copy_(gamma)
        model[1].bias.copy_(beta)
        model[3].weight.copy_(w2.T)
        model[3].bias.copy_(b2)
    return model


@pytest.mark.parametrize("loss_name", ["bce", "f1"])
def test_batched_training_equals_training_one_model_alone(loss_name):
    """Training L x F x S models at once (padded batches) = training each on its own.

    In float64: in float32 the two agree only to about 1e-4, because Adam turns
    rounding noise in gradients that are exactly zero in exact arithmetic (the
    bias in front of batch norm, weights of a feature constant in the fold) into
    full-size steps.
    """
    from sklearn.model_selection import StratifiedKFold

    import metricc

    torch.set_num_threads(1)
    X, y = tabular.load_keel("ecoli1")
    splits = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    cfg = tabular.Config(epochs=3, folds=3, seeds=(0, 1))
    losses = ("bce", "mcc", "f1")
    f64 = torch.float64
    probs = tabular.train_folds(X, y, splits, cfg, losses, dtype=f64)
    li, fi, si = losses.index(loss_name), 2, 1
    tr, te = splits[fi]

    # The same model trained alone: same start, same batches, stock PyTorch modules.
    net = tabular.BatchedMLP(X.shape[1], cfg.hidden, len(losses), len(splits), cfg.seeds, f64)
    model = _reference_model(net, li, fi, si, X.shape[1]).to(f64)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    mean, std = X[tr].mean(0), X[tr].std(0)
    std[std == 0] = 1.0  # ecoli1 has a feature that is constant in some folds
    xs = torch.as_tensor((X - mean) / std, dtype=f64)
    yt = torch.as_tensor(y, dtype=f64)
    f1 = metricc.compile(tabular.LOSS_FORMULAS["f1"]).loss(from_logits=True)
    rng = np.random.default_rng([cfg.seeds[si], fi])
    for _ in range(cfg.epochs):
        for chunk in np.array_split(rng.permutation(tr), 20):
            logits = model(xs[chunk]).squeeze(-1)
            if loss_name == "bce":
                loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, yt[chunk])
            else:
                loss = f1(logits, yt[chunk])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        alone = torch.sigmoid(model(xs[te]).squeeze(-1)).numpy()
    np.testing.assert_allclose(probs[li, fi, si, te], alone, rtol=1e-9, atol=1e-12)


def test_tabular_quick_run(tmp_path):
    """The smoke run trains, cross-checks every score with scikit-learn, writes its report."""
    proc = _run("imbalanced_tabular.py", "--quick", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "results.md").read_text()
    assert "Smoke run" in report and "| F1 loss |" in report
    assert (tmp_path / "f1_difference.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with (tmp_path / "results_runs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    # 3 datasets x 3 folds x 2 seeds x 5 losses
    assert len(rows) == 3 * 3 * 2 * 5
    assert {r["loss"] for r in rows} == set(tabular.LOSSES)
    assert all(0.0 <= float(r["f1"]) <= 1.0 for r in rows)


def test_segmentation_quick_run(tmp_path):
    """The segmentation smoke run trains every loss and writes its table and figure."""
    proc = _run("segmentation_synthetic.py", "--quick", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "segmentation.md").read_text()
    assert "Smoke run" in report
    for label in ("BCE", "soft Dice (linear)", "Tversky 0.3/0.7 (linear)", "F1 (AnyLoss)"):
        assert f"| {label} |" in report
    png = (tmp_path / "segmentation_predictions.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_segmentation_data_is_about_two_percent_foreground():
    seg = _load("segmentation_synthetic")
    x, y = seg.make_images(200, seed=3)
    assert x.shape == y.shape == (200, 1, seg.SIZE, seg.SIZE)
    assert 0.015 < float(y.mean()) < 0.025
    assert bool((y.flatten(1).sum(1) > 0).all())  # every image has a shape
    x2, y2 = seg.make_images(200, seed=3)
    assert torch.equal(x, x2) and torch.equal(y, y2)


def test_development_sets_are_the_declared_random_draw():
    """The dev/held-out split is the seeded draw its comment states, and partitions the 20 sets."""
    draw = sorted(np.random.default_rng(15).choice(sorted(tabular.KEEL_FILES), 6,
                                                   replace=False).tolist())
    assert list(tabular.DEV_DATASETS) == draw
    assert set(tabular.DEV_DATASETS) | set(tabular.HELDOUT_DATASETS) == set(tabular.DATASETS)
    assert not set(tabular.DEV_DATASETS) & set(tabular.HELDOUT_DATASETS)
