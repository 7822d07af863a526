#!/usr/bin/env python
"""Evidence for metricc.boosting: metric objectives against the usual boosting recipes.

Binary, on the development KEEL sets (``DEV_DATASETS`` of ``examples/imbalanced_tabular.py``),
stratified folds x seeds; each model trains on 75 % of the training folds and picks its
number of rounds on the other 25 % (validation), then is scored on the held-out fold.
Contenders, for XGBoost and LightGBM alike (same trees: depth 3 / 8 leaves, learning rate
0.1, min 5 rows a leaf in LightGBM; same budget: the round count chosen from ROUNDS by the
validation value of the metric scored):

* ``logloss+thr``: the built-in logistic loss, decision threshold tuned on validation for
  the metric scored (every distinct validation probability tried);
* ``spw``: the built-in logistic loss with ``scale_pos_weight`` = negatives / positives,
  threshold 0.5;
* ``metricc``: ``metricc.boosting.objective`` of the metric scored (F1 or MCC), margin 0.

Focal loss is not offered by XGBoost or LightGBM (only third-party code), so it is left out.

Ordinal, on scikit-learn's diabetes set cut into 5 quintile grades
(``examples/ordinal_diabetes.py``'s ``load``), scored by quadratic weighted kappa:
``metricc`` (the QWK softprob objective, argmax), ``softmax`` (the built-in multiclass
objective, argmax) and ``regression+cuts`` (squared error on the grade, four cut points
optimised on validation by Nelder-Mead from 0.5, 1.5, 2.5, 3.5: the common recipe).

Each comparison is paired over datasets x folds x seeds (two-sided Wilcoxon signed-rank,
scipy, ties dropped) and reported with its wins, ties and losses.

    python benchmarks/boosting_evidence.py                 # a few minutes on 2 cores
    python benchmarks/boosting_evidence.py --quick         # smoke run (seconds)
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import metricc  # noqa: E402

ROUNDS = (25, 50, 100, 200)
QUICK_ROUNDS = (3, 6)


def _f1(tp: Any, fp: Any, fn: Any, tn: Any) -> Any:
    d = 2 * tp + fp + fn
    return np.where(d > 0, 2 * tp / np.maximum(d, 1e-300), 0.0)


def _mcc(tp: Any, fp: Any, fn: Any, tn: Any) -> Any:
    d = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return np.where(d > 0, (tp * tn - fp * fn) / np.maximum(d, 1e-300), 0.0)  # sklearn: 0


COUNT_METRICS = {"f1": _f1, "mcc": _mcc}


def _counts(y: np.ndarray, pred: np.ndarray) -> tuple[float, ...]:
    tp = float((pred * y).sum())
    fp = float((pred * (1 - y)).sum())
    fn = float(((1 - pred) * y).sum())
    return tp, fp, fn, len(y) - tp - fp - fn


def qwk(y: np.ndarray, pred: np.ndarray, k: int = 5) -> float:
    """Quadratic weighted kappa (scikit-learn's ``cohen_kappa_score(weights="quadratic")``)."""
    C = np.bincount(y * k + np.clip(pred, 0, k - 1), minlength=k * k).reshape(k, k).astype(float)
    i = np.arange(k)
    W = (i[:, None] - i[None, :]) ** 2.0
    expected = np.outer(C.sum(1), C.sum(0)) / C.sum()
    return float(1 - (W * C).sum() / (W * expected).sum())


def metric_fns() -> dict[str, Callable[..., float]]:
    """F1, MCC (0 where undefined, as scikit-learn) and QWK of hard labels, in NumPy."""
    out: dict[str, Callable[..., float]] = {
        name: (lambda y, p, f=f: float(f(*_counts(np.asarray(y), np.asarray(p)))))
        for name, f in COUNT_METRICS.items()}
    out["qwk"] = lambda y, p: qwk(np.asarray(y), np.asarray(p))
    return out


class Library:
    """Train once for the largest round count; margins after any smaller count."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fit(self, X: np.ndarray, y: np.ndarray, objective: Any, rounds: int,
            classes: int = 2, **extra: Any) -> Callable[[np.ndarray, int], np.ndarray]:
        if self.name == "xgboost":
            import xgboost as xgb

            params = {"max_depth": 3, "eta": 0.1, "nthread": 1, **extra}
            if classes > 2:
                params["num_class"] = classes
            if isinstance(objective, str):
                params["objective"] = objective
                obj = None
            else:
                params["base_score"] = 0.0
                obj = objective
            booster = xgb.train(params, xgb.DMatrix(X, y), rounds, obj=obj)
            return lambda Xt, r: booster.predict(xgb.DMatrix(Xt), iteration_range=(0, r),
                                                 output_margin=True)
        import lightgbm as lgb

        params = {"num_leaves": 8, "learning_rate": 0.1, "min_data_in_leaf": 5,
                  "num_threads": 1, "verbose": -1, "objective": objective, **extra}
        if classes > 2:
            params["num_class"] = classes
        lbooster = lgb.train(params, lgb.Dataset(X, y), rounds)
        return lambda Xt, r: lbooster.predict(Xt, num_iteration=r, raw_score=True)


def best_threshold(metric: str, y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """The validation-best threshold on scores ``p`` (every distinct score tried, all at once
    from cumulative counts) and its value."""
    order = np.argsort(-p, kind="stable")
    ps, ys = p[order], y[order].astype(float)
    last = np.r_[ps[1:] != ps[:-1], True]  # the end of each run of equal scores
    tp = np.cumsum(ys)[last]
    fp = np.cumsum(1 - ys)[last]
    pos = ys.sum()
    values = COUNT_METRICS[metric](tp, fp, pos - tp, len(y) - pos - fp)
    i = int(np.argmax(values))
    return float(ps[last][i]), float(values[i])


def binary_runs(lib: Library, X: np.ndarray, y: np.ndarray, split: tuple[Any, ...],
                rounds: tuple[int, ...]) -> list[dict[str, Any]]:
    fit, val, test = split
    fns = metric_fns()
    out = []
    pos = float(y[fit].sum())
    builtin = "binary:logistic" if lib.name == "xgboost" else "binary"
    models = {"logloss": lib.fit(X[fit], y[fit], builtin, rounds[-1]),
              "spw": lib.fit(X[fit], y[fit], builtin, rounds[-1],
                             scale_pos_weight=(len(fit) - pos) / pos)}
    for metric in ("f1", "mcc"):
        score = fns[metric]
        obj = metricc.boosting.objective(metricc.compile(metric))
        models[metric] = lib.fit(X[fit], y[fit], getattr(obj, lib.name), rounds[-1])
        for method, model in (("logloss+thr", models["logloss"]), ("spw", models["spw"]),
                              ("metricc", models[metric])):
            best = (-np.inf, 0, 0.0)
            for r in rounds:
                z = model(X[val], r)
                if method == "logloss+thr":
                    t, v = best_threshold(metric, y[val], z)  # on margins: same order
                else:
                    t, v = 0.0, score(y[val], (z >= 0).astype(int))
                best = max(best, (v, r, t))
            _, r, t = best
            test_value = score(y[test], (model(X[test], r) >= t).astype(int))
            out.append({"library": lib.name, "metric": metric, "method": method, "rounds": r,
                        "value": test_value})
    return out


def cut_points(y: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Cut points maximising validation QWK (Nelder-Mead from the half-integers)."""
    from scipy.optimize import minimize

    def loss(c: np.ndarray) -> float:
        return -qwk(y, np.searchsorted(np.sort(c), pred))

    return np.sort(minimize(loss, np.arange(4) + 0.5, method="Nelder-Mead",
                            options={"xatol": 1e-3, "maxiter": 300}).x)


def ordinal_runs(lib: Library, X: np.ndarray, y: np.ndarray, split: tuple[Any, ...],
                 rounds: tuple[int, ...]) -> list[dict[str, Any]]:
    fit, val, test = split
    k = int(y.max()) + 1
    obj = metricc.boosting.objective(metricc.compile("quadratic_kappa"))
    soft = "multi:softprob" if lib.name == "xgboost" else "multiclass"
    reg = "reg:squarederror" if lib.name == "xgboost" else "regression"
    models = {"metricc": (lib.fit(X[fit], y[fit], getattr(obj, lib.name), rounds[-1], k), True),
              "softmax": (lib.fit(X[fit], y[fit], soft, rounds[-1], k), True),
              "regression+cuts": (lib.fit(X[fit], y[fit], reg, rounds[-1]), False)}
    out = []
    for method, (model, argmax) in models.items():
        best: tuple[float, int, Any] = (-np.inf, 0, None)
        for r in rounds:
            z = model(X[val], r)
            cuts = None if argmax else cut_points(y[val], z)
            v = qwk(y[val], z.argmax(1) if argmax else np.searchsorted(cuts, z))
            best = max(best, (v, r, cuts), key=lambda b: b[0])
        _, r, cuts = best
        z = model(X[test], r)
        out.append({"library": lib.name, "metric": "qwk", "method": method, "rounds": r,
                    "value": qwk(y[test], z.argmax(1) if argmax else np.searchsorted(cuts, z))})
    return out


def splits(y: np.ndarray, folds: int, seeds: tuple[int, ...]) -> Any:
    from sklearn.model_selection import StratifiedKFold, train_test_split

    for seed in seeds:
        for fold, (train, test) in enumerate(StratifiedKFold(folds, shuffle=True, random_state=seed)
                                             .split(y, y)):
            fit, val = train_test_split(train, test_size=0.25, stratify=y[train], random_state=seed)
            yield seed, fold, (fit, val, test)


def summary(rows: list[dict[str, Any]]) -> list[str]:
    from scipy.stats import wilcoxon

    out = ["| library | metric | metricc vs | mean metricc | mean other | wins / ties / losses | "
           "Wilcoxon p |", "|---|---|---|---|---|---|---|"]
    key = ("dataset", "seed", "fold")
    for lib in dict.fromkeys(r["library"] for r in rows):
        for metric in dict.fromkeys(r["metric"] for r in rows):
            mine = {tuple(r[c] for c in key): r["value"] for r in rows
                    if (r["library"], r["metric"], r["method"]) == (lib, metric, "metricc")}
            others = dict.fromkeys(r["method"] for r in rows if r["metric"] == metric)
            for other in (o for o in others if o != "metricc"):
                theirs = {tuple(r[c] for c in key): r["value"] for r in rows
                          if (r["library"], r["metric"], r["method"]) == (lib, metric, other)}
                a = np.array([mine[k] for k in theirs])
                b = np.array([theirs[k] for k in theirs])
                d = a - b
                wins, ties, losses = int((d > 1e-12).sum()), int((abs(d) <= 1e-12).sum()), int((d < -1e-12).sum())
                p = float(wilcoxon(a, b).pvalue) if wins + losses > 0 else 1.0
                out.append(f"| {lib} | {metric} | {other} | {a.mean():.3f} | {b.mean():.3f} | "
                           f"{wins} / {ties} / {losses} | {p:.3g} |")
    return out


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--quick", action="store_true", help="one set, 2 folds, 1 seed, few rounds")
    ap.add_argument("--out", type=Path, default=None, help="folder for boosting_evidence.md/_runs.csv")
    ap.add_argument("--libraries", nargs="+", default=["xgboost", "lightgbm"])
    a = ap.parse_args(argv)
    from imbalanced_tabular import DATASETS, DEV_DATASETS
    from ordinal_diabetes import load

    t0 = time.time()
    datasets = DEV_DATASETS[:1] if a.quick else DEV_DATASETS
    folds, seeds = (2, (0,)) if a.quick else (3, (0, 1))
    rounds = QUICK_ROUNDS if a.quick else ROUNDS
    rows: list[dict[str, Any]] = []
    for name in datasets:
        X, y = DATASETS[name]()
        for seed, fold, split in splits(y, folds, seeds):
            for lib in a.libraries:
                for r in binary_runs(Library(lib), X, y, split, rounds):
                    rows.append({"dataset": name, "seed": seed, "fold": fold, **r})
    X, y = load()
    for seed, fold, split in splits(y, 2 if a.quick else 5, (0,) if a.quick else (0, 1)):
        for lib in a.libraries:
            for r in ordinal_runs(Library(lib), X, y, split, rounds):
                rows.append({"dataset": "diabetes_grades", "seed": seed, "fold": fold, **r})
    text = "\n".join([*summary(rows), "",
                      f"{len(rows)} runs in {time.time() - t0:.0f} s "
                      f"({'quick' if a.quick else 'full'} settings)."])
    print(text)
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "boosting_evidence.md").write_text(text + "\n", encoding="utf-8")
        with open(a.out / "boosting_evidence_runs.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return text


if __name__ == "__main__":
    main()
