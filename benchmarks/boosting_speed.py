#!/usr/bin/env python
"""Speed of metricc.boosting objectives against a NumPy logloss objective, and total fit times.

1. One objective call at ``--rows`` rows (default 10^6): metricc's F1 objective (binary) and
   QWK objective (5 classes, softprob) against the NumPy logloss / softmax objectives written
   as XGBoost's custom-objective demo writes them, all called as ``obj(margins, dtrain)`` on
   the same ``xgboost.DMatrix`` (labels read from it each call, as in a real round). One
   thread (torch and the libraries; NumPy's element-wise work is single-threaded), rounds
   interleaved (ours, theirs, ours, ...), the median of the per-round time ratios.
2. Total fit time, one thread: XGBoost (``hist``) and LightGBM, ``--fit-rows`` rows,
   ``--fit-rounds`` rounds, built-in ``binary:logistic``/``binary`` against the NumPy logloss
   objective and metricc's F1 objective.

    python benchmarks/boosting_speed.py                       # about a minute on one core
    python benchmarks/boosting_speed.py --rows 2000 --rounds 3 --fit-rows 500 --fit-rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import metricc  # noqa: E402


def logregobj(preds: np.ndarray, dtrain: Any) -> tuple[np.ndarray, np.ndarray]:
    """XGBoost's demo custom logistic objective (``demo/guide-python/custom_objective.py``)."""
    labels = dtrain.get_label()
    preds = 1.0 / (1.0 + np.exp(-preds))
    grad = preds - labels
    hess = preds * (1.0 - preds)
    return grad, hess


def softprob_obj(predt: np.ndarray, data: Any) -> tuple[np.ndarray, np.ndarray]:
    """XGBoost's demo softmax objective (``custom_softmax.py``), vectorised over rows."""
    labels = data.get_label().astype(np.int64)
    e = np.exp(predt - predt.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    grad = p.copy()
    grad[np.arange(len(labels)), labels] -= 1.0
    hess = np.maximum(2.0 * p * (1.0 - p), 1e-6)
    return grad, hess


def ratio(ours: Callable[[], Any], theirs: Callable[[], Any], rounds: int) -> tuple[float, float, float]:
    """Median of per-round time ratios ours/theirs (interleaved), and the median times (ms)."""
    ours()
    theirs()  # warm up
    r, a, b = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ours()
        t1 = time.perf_counter()
        theirs()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
        r.append((t1 - t0) / (t2 - t1))
    return statistics.median(r), 1e3 * statistics.median(a), 1e3 * statistics.median(b)


def call_table(rows: int, rounds: int) -> list[str]:
    import xgboost as xgb

    rng = np.random.default_rng(0)
    z = rng.normal(0, 2, rows)
    y = (rng.random(rows) < 0.1).astype(np.float64)
    d = xgb.DMatrix(np.zeros((rows, 1)), y, nthread=1)
    f1 = metricc.boosting.objective(metricc.compile("f1"))
    out = ["| objective call | rows | metricc (ms) | NumPy demo (ms) | median ratio |", "|---|---|---|---|---|"]
    r, a, b = ratio(lambda: f1.xgboost(z, d), lambda: logregobj(z, d), rounds)
    out.append(f"| F1 (binary) vs logloss | {rows} | {a:.1f} | {b:.1f} | {r:.2f} |")
    Z = rng.normal(0, 1, (rows, 5))
    d5 = xgb.DMatrix(np.zeros((rows, 1)), rng.integers(0, 5, rows), nthread=1)
    qwk = metricc.boosting.objective(metricc.compile("quadratic_kappa"))
    r, a, b = ratio(lambda: qwk.xgboost(Z, d5), lambda: softprob_obj(Z, d5), rounds)
    out.append(f"| QWK (5 classes) vs softmax | {rows} | {a:.1f} | {b:.1f} | {r:.2f} |")
    return out


def fit_table(rows: int, n_rounds: int) -> list[str]:
    import lightgbm as lgb
    import xgboost as xgb
    from sklearn.datasets import make_classification

    X, y = make_classification(rows, 20, weights=[0.9], random_state=0)
    f1 = metricc.boosting.objective(metricc.compile("f1"))
    out = ["| library | built-in logloss (s) | NumPy logloss objective (s) | metricc F1 objective (s) |",
           "|---|---|---|---|"]
    d = xgb.DMatrix(X, y, nthread=1)
    base = {"tree_method": "hist", "max_depth": 6, "eta": 0.1, "nthread": 1}
    times = []
    for params, obj in ((dict(base, objective="binary:logistic"), None),
                        (dict(base, base_score=0.0), logregobj), (dict(base, base_score=0.0), f1.xgboost)):
        t = time.perf_counter()
        xgb.train(params, d, n_rounds, obj=obj)
        times.append(time.perf_counter() - t)
    out.append("| XGBoost {} | {:.2f} | {:.2f} | {:.2f} |".format(xgb.__version__, *times))
    times = []
    lbase = {"num_leaves": 63, "learning_rate": 0.1, "num_threads": 1, "verbose": -1}
    for objective in ("binary", lambda p, ds: logregobj(p, ds), f1.lightgbm):
        t = time.perf_counter()
        lgb.train(dict(lbase, objective=objective), lgb.Dataset(X, y), n_rounds)
        times.append(time.perf_counter() - t)
    out.append("| LightGBM {} | {:.2f} | {:.2f} | {:.2f} |".format(lgb.__version__, *times))
    return out


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--fit-rows", type=int, default=100_000)
    p.add_argument("--fit-rounds", type=int, default=100)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    text = "\n".join([*call_table(a.rows, a.rounds), "", f"Fit time, {a.fit_rows} rows x 20 features, "
                      f"{a.fit_rounds} rounds, one thread:", "", *fit_table(a.fit_rows, a.fit_rounds)])
    print(text)
    return text


if __name__ == "__main__":
    main()
