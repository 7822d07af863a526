"""The evidence examples: their smoke runs, and the batched trainer against plain PyTorch."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _load(name: str):
    return load_script(EXAMPLES / f"{name}.py")


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


def _focal(logits: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
    """Focal loss written from its definition, -(1 - p_t)^gamma log p_t, as a reference."""
    log_p, log_not_p = torch.nn.functional.logsigmoid(logits), torch.nn.functional.logsigmoid(-logits)
    p = torch.sigmoid(logits)
    return -(y * (1 - p) ** gamma * log_p + (1 - y) * p ** gamma * log_not_p).mean()


_RECIPES = {r.key: r for r in (*tabular.BASELINES, *tabular.METRIC_RECIPES, *tabular.CANDIDATES)}
_CHECKED = ("bce", "pos_weight", "focal", "mcc", "f1", "f1_memory", "f1_amp20", "f1_warm",
            "f1_plus_ce", "f1_batch20")


@pytest.fixture(scope="module")
def batched_run():
    """Every checked recipe trained at once, in float64, on ecoli1 (3 folds x 2 seeds)."""
    from sklearn.model_selection import StratifiedKFold

    torch.set_num_threads(1)
    X, y = tabular.load_keel("ecoli1")
    fit_sets = [tr for tr, _ in StratifiedKFold(3, shuffle=True, random_state=0).split(X, y)]
    cfg = tabular.Config(epochs=3, folds=3, seeds=(0, 1))
    recipes = [_RECIPES[k] for k in _CHECKED]
    probs = tabular.train_folds(X, y, fit_sets, cfg, 2, recipes, dtype=torch.float64)
    return X, y, fit_sets, cfg, recipes, probs


@pytest.mark.parametrize("key", _CHECKED)
def test_batched_training_equals_training_one_model_alone(batched_run, key):
    """Training R x F x S models at once (padded batches) = training each on its own.

    With stock PyTorch modules, BCEWithLogitsLoss (pos_weight), a focal loss written
    from its definition and one metricc loss module per model (its memory, warm start,
    BCE term and batch size as the recipe says). In float64: in float32 the two agree
    only to about 1e-4, because Adam turns rounding noise in gradients that are exactly
    zero in exact arithmetic (the bias in front of batch norm, weights of a feature
    constant in the fold) into full-size steps.
    """
    import metricc

    X, y, fit_sets, cfg, recipes, probs = batched_run
    r = _RECIPES[key]
    li, fi, si = recipes.index(r), 2, 1
    fit = fit_sets[fi]
    f64 = torch.float64
    # The same start: the batch's initial weights for this seed.
    net = tabular.BatchedMLP(X.shape[1], (2,), len(recipes), len(fit_sets), cfg.seeds, f64)
    model = _reference_model(net, li, fi, si, X.shape[1]).to(f64)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    mean, std = X[fit].mean(0), X[fit].std(0)
    std[std == 0] = 1.0  # ecoli1 has a feature that is constant in some folds
    xs = torch.as_tensor((X - mean) / std, dtype=f64)
    yt = torch.as_tensor(y, dtype=f64)
    pos_weight = torch.tensor((1 - y[fit]).sum() / y[fit].sum(), dtype=f64)
    bce = torch.nn.BCEWithLogitsLoss()
    metric = (metricc.compile(tabular.LOSS_FORMULAS[r.loss]).loss(
        from_logits=True, amplifier=r.amplifier, memory_decay=r.memory_decay)
        if r.loss in tabular.LOSS_FORMULAS else None)
    rng = np.random.default_rng([cfg.seeds[si], fi])
    n_batches = round(1 / (r.batch_fraction or cfg.batch_fraction))
    for epoch in range(cfg.epochs):
        for chunk in np.array_split(rng.permutation(fit), n_batches):
            logits = model(xs[chunk]).squeeze(-1)
            target = yt[chunk]
            if r.loss == "bce" or (metric is not None
                                   and epoch < round(r.warm_fraction * cfg.epochs)):
                loss = bce(logits, target)
            elif r.loss == "pos_weight":
                loss = torch.nn.BCEWithLogitsLoss(pos_weight=pos_weight)(logits, target)
            elif r.loss == "focal":
                loss = _focal(logits, target, r.gamma)
            else:
                loss = metric(logits, target) + r.ce_weight * bce(logits, target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        alone = torch.sigmoid(model(xs).squeeze(-1)).numpy()
    np.testing.assert_allclose(probs[li, fi, si], alone, rtol=1e-9, atol=1e-12)


def test_holm_matches_the_step_down_procedure():
    """Holm rejects p_(1..k) while p_(i) <= alpha / (m - i + 1): same as adjusted p <= alpha."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = rng.random(rng.integers(1, 12)) ** 3
        alpha = 0.05
        order = np.argsort(p)
        reject = np.zeros(len(p), bool)
        for i, j in enumerate(order):
            if p[j] > alpha / (len(p) - i):
                break
            reject[j] = True
        np.testing.assert_array_equal(tabular.holm(p) <= alpha, reject)


def test_nemenyi_critical_values_match_demsar_table():
    """q_0.05 of Demšar (2006), Table 5(a): 1.960 (k=2), 2.343 (3), 2.728 (5), 3.164 (10)."""
    import math

    for k, q in ((2, 1.960), (3, 2.343), (5, 2.728), (10, 3.164)):
        n = 20
        assert tabular.nemenyi_cd(k, n) / math.sqrt(k * (k + 1) / (6 * n)) == pytest.approx(
            q, abs=1e-3)


def test_chosen_recipe_is_what_the_development_run_selected():
    """CHOSEN in the script is the rule's pick recorded by the committed development run."""
    import json

    selection = ROOT / "docs" / "development" / "selection.json"
    assert json.loads(selection.read_text())["chosen"] == tabular.chosen_method()


def test_tabular_quick_run(tmp_path):
    """The smoke run trains, tunes thresholds, cross-checks every score with scikit-learn,
    runs the tests and writes its page, plot and runs."""
    import gzip

    proc = _run("imbalanced_tabular.py", "--quick", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "results.md").read_text()
    assert "Smoke run" in report and "| F1 loss, tuned |" in report
    assert "| BCE, tuned |" in report and "Critical difference" in report
    assert (tmp_path / "ranks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = gzip.decompress((tmp_path / "results_runs.csv.gz").read_bytes()).decode()
    rows = list(csv.DictReader(text.splitlines()))
    recipes = tabular.recipes_for("final")
    # 3 datasets x 2 widths x 2 folds x 1 seed x the recipes
    assert len(rows) == 3 * 2 * 2 * 1 * len(recipes)
    assert {r["recipe"] for r in rows} == {r.key for r in recipes}
    assert all(0.0 <= float(r[k]) <= 1.0 for r in rows for k in ("f1", "f1_tuned"))
    # --report-only rebuilds the same page from the saved runs.
    (tmp_path / "results.md").unlink()
    proc = _run("imbalanced_tabular.py", "--report-only", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "results.md").read_text() == report


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
    # The quick run shows learning: some loss finds foreground on the held-out images.
    ious = [float(line.split("IoU ")[1].split()[0]) for line in proc.stdout.splitlines()
            if ": IoU " in line]
    assert len(ious) == 4 and max(ious) > 0, proc.stdout


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


def test_tabular_dev_stage_quick_run(tmp_path):
    """The development stage runs the candidates and applies the declared selection rule."""
    import json

    proc = _run("imbalanced_tabular.py", "--stage", "dev", "--quick", "--datasets", "glass0",
                "--widths", "2", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "development.md").read_text()
    assert "Selection rule (declared before this run)" in page and "**Chosen: " in page
    selection = json.loads((tmp_path / "selection.json").read_text())
    scores = selection["scores"]
    assert len(scores) == 2 * (len(tabular.METRIC_RECIPES) + len(tabular.CANDIDATES))
    best = max(scores, key=scores.get)
    expected = best if scores[best] - scores["f1@0.5"] >= 0.005 else "f1@0.5"
    assert selection["chosen"] == expected
