#!/usr/bin/env python
"""Evidence for the curve losses: every named curve metric trained as a loss, measured on itself.

On the development KEEL sets (``DEV_DATASETS`` of ``examples/imbalanced_tabular.py``; every
choice here was made on these sets only), stratified folds x seeds, one model per loss trained
by ``benchmarks/constraints_tabular.py``'s loop (same MLP, same initial weights and batch order
for every loss; each model trains on the fit part of its fold, 75 % of the training fold, and
is scored on the held-out fold). Losses:

* ``bce``; ``pos_weight`` (BCE with ``pos_weight`` = negatives / positives of the fit part);
  ``focal`` (gamma 2, Lin et al. 2017); ``pairwise`` (logistic loss over every positive x
  negative pair within the batch, the consistent pairwise AUC surrogate);
* for each named curve metric ``m`` of ``CURVE_METRICS`` (``auroc``, ``ap`` =
  ``average_precision``, ``partial_auroc``, ``recall_at_precision``, ``precision_at_recall``,
  ``best_f1``, at the library's default parameters): ``m``, ``metricc.compile(m).loss(
  from_logits=True, memory_decay=0.9)`` alone; ``bce+m``, added to BCE; ``warm m``, wrapped in
  ``metricc.WarmStart`` (BCE for the first ``warm_start`` share of the training steps, a
  linear blend over the next ``warm_blend`` share, then the metric loss alone);
* ablations (``--methods``; in the earlier run): ``bce+ap nomem`` (no memory) and
  ``bce+ap logit`` (``space="logit"``).
* ``libauc_aucm``: LibAUC's ``AUCMLoss(margin=1.0)`` on sigmoid scores with its optimiser
  ``PESG`` at PESG's defaults (SGD mode, lr 0.1, momentum 0.9, epoch_decay 2e-3, weight_decay
  1e-5, clip 1.0), ``update_regularizer(decay_factor=10)`` at 50 % and 75 % of the epochs (the
  LibAUC trainer's ``decay_epochs``); ``libauc_aucm adam``: ``PESG(mode="adam")`` at the
  harness's lr. ``libauc_ap``: ``APLoss`` (SOAP's moving averages per positive sample, indexed
  by the sample's row) with its optimiser ``SOAP(mode="adam")``; ``libauc_pauc``: the one-way
  partial AUC loss ``pAUC_CVaR_Loss(beta=0.1)`` (FPR up to 0.1, as ``partial_auroc``) with its
  optimiser ``SOPA(mode="adam")``; both at the harness's lr, on sigmoid scores. One network,
  loss and optimiser per (fold, seed) model, same initial weights, the harness's ordinary
  shuffled batches (not LibAUC's ``DualSampler``). Included only if ``import libauc`` works.
* ``imbl_smoothap`` (``imbalanced_losses.SmoothAPLoss``, Smooth-AP with its queue) and
  ``imbl_pauc`` (``PAUCAtBudgetLoss(alpha=0, beta=0.1)``), on logits, one loss (and queue) per
  model at the package's defaults. Included only if ``import imbalanced_losses`` works.

Every run is scored on every named curve metric with ``metricc.compile(name).score`` (exact,
every distinct score a threshold), checked against scikit-learn (AUROC, AP, partial AUROC,
best F1 from ``precision_recall_curve``) and torchmetrics (recall at precision, precision at
recall): a difference over 1e-6 stops the run. Each method is compared with BCE on the metric
it targets by a paired two-sided Wilcoxon signed-rank test over the folds x seeds of a set,
Holm-corrected over the sets.

    python benchmarks/curve_evidence.py --quick                # smoke run (seconds)
    python benchmarks/curve_evidence.py --datasets glass0 --out /tmp/a   # one set
    python benchmarks/curve_evidence.py --merge /tmp/a /tmp/b  # merge runs into docs/

It writes ``curve_evidence.md``, ``curve_evidence_runs.csv`` and ``curve_evidence.json`` to
``--out`` (default ``docs/``); the page also renders the earlier AUROC/AP run kept in
``docs/curve_evidence_earlier_runs.csv``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import constraints_tabular as ct  # noqa: E402  (puts examples/ on the path)
import operating_points as op  # noqa: E402
from imbalanced_tabular import DATASETS, DEV_DATASETS, BatchedMLP  # noqa: E402

import metricc  # noqa: E402

QUICK_SETS: tuple[str, ...] = ("glass0",)
#: Every named curve metric: the label of its losses and table -> its metricc name.
CURVE_METRICS: dict[str, str] = {
    "auroc": "auroc", "ap": "average_precision", "partial_auroc": "partial_auroc",
    "recall_at_precision": "recall_at_precision", "precision_at_recall": "precision_at_recall",
    "best_f1": "best_f1"}
BASELINES: tuple[str, ...] = ("bce", "pos_weight", "focal", "pairwise")
OURS: tuple[str, ...] = tuple(f"{p}{m}" for m in CURVE_METRICS for p in ("", "bce+", "warm "))
ABLATIONS: tuple[str, ...] = ("bce+ap nomem", "bce+ap logit")
LIBAUC: tuple[str, ...] = ("libauc_aucm", "libauc_aucm adam", "libauc_ap", "libauc_pauc")
IMBLOSS: tuple[str, ...] = ("imbl_smoothap", "imbl_pauc")
#: The metric (table) of each method that is not one of ``OURS``; baselines are in every table.
TARGETS: dict[str, str] = {"pairwise": "auroc", "libauc_aucm": "auroc",
                           "libauc_aucm adam": "auroc", "libauc_ap": "ap",
                           "libauc_pauc": "partial_auroc", "imbl_smoothap": "ap",
                           "imbl_pauc": "partial_auroc"}
FOCAL_GAMMA = 2.0
#: libauc.optimizers.PESG's own defaults (besides lr and mode, which Settings records).
PESG_DEFAULTS: dict[str, float] = {"momentum": 0.9, "epoch_decay": 2e-3, "weight_decay": 1e-5,
                                   "clip_value": 1.0}
#: A score differing from its independent reference by more than this stops the run.
SCORE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Settings:
    """What the evidence run varies; the MLP, optimiser and splits are ``ct.Config``'s."""

    epochs: int = 100
    folds: int = 5
    seeds: tuple[int, ...] = (0, 1, 2)
    memory_decay: float = 0.9  # this run's memory (the library's default is None: no memory)
    bins: int = 256
    warm_start: float = 0.2  # WarmStart's warmup_steps, a share of the training steps
    warm_blend: float = 0.2  # WarmStart's blend_steps, a share of the training steps
    aucm_margin: float = 1.0  # AUCMLoss's default
    pesg_lr: float = 0.1  # PESG's default lr, 10 x the harness's Adam lr (ct.Config.lr)
    pesg_decay_epochs: tuple[float, ...] = (0.5, 0.75)  # fractions of the epochs
    pauc_max_fpr: float = 0.1  # partial_auroc's default max_fpr, for the peers' pAUC losses

    def config(self) -> ct.Config:
        return ct.Config(epochs=self.epochs, folds=self.folds, seeds=self.seeds)

    def steps(self) -> int:
        """The training steps of one model: epochs x batches per epoch."""
        return self.epochs * max(1, round(1 / self.config().batch_fraction))


class RowLoss:
    """One loss for the training loop: ``row_losses(logits, y, w)`` gives one value per model.

    Rows are the ``F x S`` models of one loss (fold-major); ``w`` is 0 on padding. ``kind`` is
    a cross-entropy (``bce``, ``pos_weight``, ``focal``), ``pairwise``, or none; ``curve`` a
    metricc curve loss in ``multilabel`` mode (or a ``WarmStart`` around one), one column (and
    one pooled memory) per model.
    """

    def __init__(self, kind: str | None, curve: torch.nn.Module | None = None,
                 pos_weight: torch.Tensor | None = None) -> None:
        self.kind, self.curve, self.pos_weight = kind, curve, pos_weight

    def row_losses(self, logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor,
                   index: torch.Tensor | None = None) -> torch.Tensor:
        total = logits.new_zeros(logits.shape[0])
        if self.kind == "pairwise":
            total = total + pairwise_rows(logits, y, w)
        elif self.kind is not None:
            total = total + ce_rows(self.kind, logits, y, w, self.pos_weight)
        if self.curve is not None:
            # the multilabel macro mean over the R model columns, added to every row: the rows
            # then sum to R x mean = the sum of the per-model losses, each with weight 1 beside
            # its cross-entropy, and each model's gradient reaches only its own column. (The
            # earlier run also multiplied by R, so its bce+ losses weighed the curve term R
            # times: see docs/curve_evidence.md.) contiguous(): the runtime's histogram view()
            # fails on a transposed (non-contiguous) input.
            x, t, wt = (u.T.contiguous() for u in (logits, y, w))
            total = total + self.curve(x, t, weight=wt)
        return total


def ce_rows(kind: str, logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor,
            pos_weight: torch.Tensor | None) -> torch.Tensor:
    """The weighted batch mean of a cross-entropy loss per row."""
    pw = pos_weight.view(-1, 1) if kind == "pos_weight" and pos_weight is not None else None
    ce = F.binary_cross_entropy_with_logits(logits, y, reduction="none", pos_weight=pw)
    if kind == "focal":  # down-weight the easy examples by (1 - p_t)^gamma
        p = torch.sigmoid(logits)
        ce = ce * (1 - (p * y + (1 - p) * (1 - y))) ** FOCAL_GAMMA
    return (ce * w).sum(-1) / w.sum(-1)


def pairwise_rows(logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Mean logistic loss ``log(1 + exp(-(s_i - s_j)))`` over positive i x negative j in the batch.

    A batch without a positive or a negative gives 0 for that row (no pair, no gradient).
    """
    pair = (y * w).unsqueeze(-1) * ((1 - y) * w).unsqueeze(-2)  # (R, B, B)
    diff = logits.unsqueeze(-1) - logits.unsqueeze(-2)
    return (F.softplus(-diff) * pair).sum((-1, -2)) / pair.sum((-1, -2)).clamp_min(1.0)


def split_name(name: str) -> tuple[str, str, str]:
    """``"warm ap"`` -> (``"warm "``, ``"ap"``, ``""``); ``"bce+ap nomem"`` -> (``"bce+"``,
    ``"ap"``, ``"nomem"``): the prefix, the metric label and the ablation of one of ours."""
    head, _, variant = name.partition(" ") if not name.startswith("warm ") else (name, "", "")
    prefix = next(p for p in ("warm ", "bce+", "") if head.startswith(p))
    return prefix, head[len(prefix):], variant


def curve_loss(name: str, s: Settings) -> RowLoss:
    """One of ``OURS + ABLATIONS``: metricc's curve loss in ``multilabel`` mode, one column
    (and one pooled memory) per model, fresh; ``bce+`` adds BCE, ``warm `` wraps it in
    ``metricc.WarmStart``."""
    prefix, label, variant = split_name(name)
    options = {"memory_decay": None if variant == "nomem" else s.memory_decay,
               "space": "logit" if variant == "logit" else "probability"}
    curve: torch.nn.Module = metricc.compile(CURVE_METRICS[label]).loss(
        from_logits=True, mode="multilabel", bins=s.bins, **options)
    if prefix == "warm ":
        curve = metricc.WarmStart(curve, warmup_steps=round(s.warm_start * s.steps()),
                                  blend_steps=round(s.warm_blend * s.steps()))
    return RowLoss("bce" if prefix == "bce+" else None, curve)


class AUCMRows:
    """LibAUC's ``AUCMLoss`` for one model (``Method.per_model``), as its docs use it: on
    sigmoid scores in [0, 1]; the batch's padding (weight 0) is dropped."""

    def __init__(self, margin: float) -> None:
        from libauc.losses import AUCMLoss

        self.fn = AUCMLoss(margin=margin, device=torch.device("cpu"))

    def row_losses(self, logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor,
                   index: torch.Tensor | None = None) -> torch.Tensor:
        keep = w[0] > 0
        return self.fn(torch.sigmoid(logits[0][keep]), y[0][keep]).view(1)


class IndexedRows:
    """A LibAUC loss with per-sample state (``APLoss``, ``pAUC_CVaR_Loss``) for one model: on
    sigmoid scores, with each sample's row in the data set as LibAUC's ``index``; padding is
    dropped, and a batch without a positive or a negative (which LibAUC asserts against, as
    its ``DualSampler`` never draws one) gives a zero loss."""

    def __init__(self, fn: torch.nn.Module) -> None:
        self.fn = fn

    def row_losses(self, logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor,
                   index: torch.Tensor | None = None) -> torch.Tensor:
        assert index is not None, "LibAUC's per-sample losses need the sample index"
        keep = w[0] > 0
        yk = y[0][keep]
        if yk.min() == yk.max():
            return (logits[0] * 0).sum().view(1)
        return self.fn(torch.sigmoid(logits[0][keep]), yk, index[0][keep].long()).view(1)


def libauc_indexed(name: str, n: int, n_pos: int, s: Settings) -> IndexedRows:
    from libauc.losses import APLoss, pAUC_CVaR_Loss

    cpu = torch.device("cpu")
    if name == "libauc_ap":
        return IndexedRows(APLoss(data_len=n, device=cpu))
    return IndexedRows(pAUC_CVaR_Loss(data_len=n, pos_len=n_pos, beta=s.pauc_max_fpr,
                                      device=cpu))


class ImblRows:
    """An ``imbalanced_losses`` ranking loss per model row (its own queue), on logits
    ``(N, 1)`` and 0/1 targets, padding dropped; one network serves every row."""

    def __init__(self, make: Callable[[], torch.nn.Module], rows: int) -> None:
        self.fns = [make() for _ in range(rows)]

    def row_losses(self, logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor,
                   index: torch.Tensor | None = None) -> torch.Tensor:
        out = []
        for r, fn in enumerate(self.fns):
            keep = w[r] > 0
            v = fn(logits[r][keep].unsqueeze(1), y[r][keep].long())
            out.append(v if torch.isfinite(v) else (logits[r] * 0).sum())
        return torch.stack(out)


def imbl(name: str, rows: int, s: Settings) -> ImblRows:
    import imbalanced_losses as il

    if name == "imbl_smoothap":
        return ImblRows(lambda: il.SmoothAPLoss(num_classes=1), rows)
    return ImblRows(lambda: il.PAUCAtBudgetLoss(num_classes=1, alpha=0.0,
                                                beta=s.pauc_max_fpr), rows)


def adam(params: list[torch.Tensor], loss: Any, s: Settings) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=s.config().lr)


def pesg(mode: str) -> Callable[[list[torch.Tensor], Any, Settings], torch.optim.Optimizer]:
    """``PESG`` over the network and the loss's a, b (alpha by its own ascent step)."""

    def make(params: list[torch.Tensor], loss: Any, s: Settings) -> torch.optim.Optimizer:
        from libauc.optimizers import PESG

        lr = s.pesg_lr if mode == "sgd" else s.config().lr
        return PESG(params, loss_fn=loss.fn, lr=lr, mode=mode, verbose=False,
                    device=torch.device("cpu"), **PESG_DEFAULTS)

    return make


def libauc_adam(kind: str) -> Callable[[list[torch.Tensor], Any, Settings], torch.optim.Optimizer]:
    """LibAUC's optimiser of a loss (``SOAP`` for AP, ``SOPA`` for the CVaR pAUC loss) in its
    Adam mode at the harness's lr, its other settings its defaults."""

    def make(params: list[torch.Tensor], loss: Any, s: Settings) -> torch.optim.Optimizer:
        from libauc.optimizers import SOAP, SOPA

        opt = SOAP if kind == "soap" else SOPA
        return opt(params, lr=s.config().lr, mode="adam", device=torch.device("cpu"))

    return make


def pesg_epoch(opt: Any, epoch: int, s: Settings) -> None:
    """The LibAUC trainer's ``decay_epochs``: lr / 10 and the reference point reset."""
    if epoch + 1 in {round(f * s.epochs) for f in s.pesg_decay_epochs}:
        opt.update_regularizer(decay_factor=10)


@dataclass(frozen=True)
class Method:
    """How one method trains: a factory for its loss and one for its optimiser.

    ``loss(pos_weight, data, s)`` gives a fresh loss with ``row_losses`` (``pos_weight``: one
    value per model it trains; ``data``: ``(rows in the data set, positives)``);
    ``optimizer(params, loss, s)`` the optimiser of its network. ``per_model``: one network,
    loss and optimiser per (fold, seed) model rather than one for all, for a loss whose state
    the optimiser updates (AUC-M's a, b, alpha belong to one model). ``on_epoch(optimizer,
    epoch, s)`` runs after each epoch.
    """

    name: str
    loss: Callable[[torch.Tensor, tuple[int, int], Settings], Any]
    optimizer: Callable[[list[torch.Tensor], Any, Settings], torch.optim.Optimizer] = adam
    per_model: bool = False
    on_epoch: Callable[[Any, int, Settings], None] | None = None


def method(name: str) -> Method:
    """The definition of one of ``BASELINES + OURS + ABLATIONS + LIBAUC + IMBLOSS``."""
    if name in BASELINES:
        return Method(name, lambda pw, d, s: RowLoss(name, pos_weight=pw))
    if name in OURS + ABLATIONS:
        return Method(name, lambda pw, d, s: curve_loss(name, s))
    if name in ("libauc_aucm", "libauc_aucm adam"):
        return Method(name, lambda pw, d, s: AUCMRows(s.aucm_margin),
                      pesg("adam" if name.endswith(" adam") else "sgd"), per_model=True,
                      on_epoch=pesg_epoch)
    if name in LIBAUC:
        return Method(name, lambda pw, d, s: libauc_indexed(name, *d, s),
                      libauc_adam("soap" if name == "libauc_ap" else "sopa"), per_model=True)
    if name in IMBLOSS:
        return Method(name, lambda pw, d, s: imbl(name, len(pw), s))
    raise SystemExit(f"unknown method {name!r}")


def make_losses(names: Sequence[str], pos_weight: torch.Tensor, s: Settings,
                data: tuple[int, int] = (0, 0)) -> list[Any]:
    """The fresh loss of each name, for all ``len(pos_weight)`` models at once."""
    return [method(n).loss(pos_weight, data, s) for n in names]


@dataclass
class Unit:
    """One network with its loss and optimiser, training models ``folds x seeds`` (slices)."""

    method: Method
    folds: slice
    seeds: slice
    net: BatchedMLP
    loss: Any
    opt: Any


def units_of(m: Method, n_in: int, pos_weight: torch.Tensor, s: Settings,
             data: tuple[int, int] = (0, 0)) -> list[Unit]:
    """``m``'s networks: one for every (fold, seed) model, or one each (``per_model``)."""
    cfg = s.config()
    groups = ([(slice(f, f + 1), slice(i, i + 1)) for f in range(cfg.folds)
               for i in range(len(cfg.seeds))] if m.per_model
              else [(slice(0, cfg.folds), slice(0, len(cfg.seeds)))])
    pw = pos_weight.view(cfg.folds, len(cfg.seeds))
    out = []
    for fs, ss in groups:
        net = BatchedMLP(n_in, cfg.hidden, 1, fs.stop - fs.start, cfg.seeds[ss])
        # PESG draws its reference point from torch's global generator: seed it per model
        torch.manual_seed(1000 * fs.start + ss.start)
        loss = m.loss(pw[fs, ss].reshape(-1), data, s)
        out.append(Unit(m, fs, ss, net, loss, m.optimizer(net.params, loss, s)))
    return out


def train(X: np.ndarray, y: np.ndarray, parts: Sequence[tuple[np.ndarray, ...]], s: Settings,
          methods: Sequence[Method], pos_weight: torch.Tensor) -> np.ndarray:
    """Probabilities ``(L, F, S, n)``: ``ct.train_models``'s loop (same standardisation,
    initial weights per seed, batch order per (seed, fold)), each method with its own
    optimiser; the losses also get each batch element's row in the data set."""
    cfg = s.config()
    xall = ct.standardised(X, parts)
    yall = torch.as_tensor(y, dtype=torch.float32)
    data = (len(y), int((y == 1).sum()))
    units = [u for m in methods for u in units_of(m, X.shape[1], pos_weight, s, data)]
    fold_ix = torch.arange(cfg.folds).view(-1, 1, 1)
    for epoch, batches in enumerate(ct.epoch_batches(parts, cfg)):
        for idx_t, w in batches:
            for u in units:
                idx, wu = idx_t[u.folds, u.seeds], w[u.folds, u.seeds]
                logits = u.net(xall[fold_ix[u.folds], idx], wu)[0]  # (F', S', B)
                size = idx.shape[-1]
                rows = u.loss.row_losses(logits.reshape(-1, size), yall[idx].reshape(-1, size),
                                         wu.reshape(-1, size), index=idx.reshape(-1, size))
                u.opt.zero_grad(set_to_none=True)
                rows.sum().backward()
                u.opt.step()
        for u in units:
            if u.method.on_epoch is not None:
                u.method.on_epoch(u.opt, epoch, s)
    probs = np.zeros((len(methods), cfg.folds, len(cfg.seeds), len(y)), dtype=np.float32)
    with torch.no_grad():
        for u in units:
            li = next(i for i, m in enumerate(methods) if m is u.method)
            probs[li, u.folds, u.seeds] = torch.sigmoid(u.net(xall[u.folds])[0]).numpy()
    return probs


def reference_score(label: str, y: np.ndarray, p: np.ndarray) -> float:
    """The independent reference of each named curve metric (scikit-learn, torchmetrics)."""
    from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score

    if label == "auroc":
        return float(roc_auc_score(y, p))
    if label == "ap":
        return float(average_precision_score(y, p))
    if label == "partial_auroc":
        return float(roc_auc_score(y, p, max_fpr=0.1))
    if label == "best_f1":
        prec, rec, _ = precision_recall_curve(y, p)
        f1 = np.where(prec + rec > 0, 2 * prec * rec / np.maximum(prec + rec, 1e-300), 0.0)
        return float(f1.max())
    from torchmetrics.functional.classification import (
        binary_precision_at_fixed_recall,
        binary_recall_at_fixed_precision,
    )

    pt, yt = torch.as_tensor(p), torch.as_tensor(y).long()
    if label == "recall_at_precision":
        return float(binary_recall_at_fixed_precision(pt, yt, min_precision=0.9)[0])
    return float(binary_precision_at_fixed_recall(pt, yt, min_recall=0.9)[0])


class Scorer:
    """``metricc.compile(name).score`` of every named curve metric, each checked against its
    reference; ``worst`` keeps the largest difference seen per metric."""

    def __init__(self) -> None:
        self.metrics = {k: metricc.compile(v) for k, v in CURVE_METRICS.items()}
        self.worst = dict.fromkeys(CURVE_METRICS, 0.0)

    def __call__(self, y: np.ndarray, p: np.ndarray, where: str) -> dict[str, float]:
        out = {}
        for k, m in self.metrics.items():
            v, ref = float(m.score(p, y)), reference_score(k, y, p)
            if not abs(v - ref) <= SCORE_TOLERANCE:
                raise SystemExit(f"{where}: metricc's {k} {v!r} differs from its reference {ref!r}")
            self.worst[k] = max(self.worst[k], abs(v - ref))
            out[k] = v
        return out


def run_dataset(name: str, s: Settings, names: Sequence[str], scorer: Scorer) -> list[dict]:
    torch.set_num_threads(1)
    X, y = DATASETS[name]()
    cfg = s.config()
    parts = ct.splits(y, cfg)
    pw = [float((y[fit] == 0).sum() / max((y[fit] == 1).sum(), 1)) for fit, _, _ in parts]
    pos_weight = torch.tensor(pw, dtype=torch.float32).repeat_interleave(len(cfg.seeds))
    probs = train(X, y, parts, s, [method(n) for n in names], pos_weight)
    rows = []
    for li, label in enumerate(names):
        for fi, (_, _, te) in enumerate(parts):
            for si, seed in enumerate(cfg.seeds):
                p = probs[li, fi, si, te]
                if not np.all(np.isfinite(p)):
                    raise SystemExit(f"{name}/{label}: non-finite test probabilities")
                rows.append({"dataset": name, "method": label, "fold": fi, "seed": seed,
                             **scorer(y[te], p, f"{name}/{label}/{fi}/{seed}")})
    return rows


def select(rows: list[dict], **key: object) -> list[dict]:
    """The rows matching ``key``, in (fold, seed) order, so that methods pair run by run."""
    out = [r for r in rows if all(r[k] == v for k, v in key.items())]
    return sorted(out, key=lambda r: (r["fold"], r["seed"]))


def compare(rows: list[dict], datasets: Sequence[str], methods: Sequence[str],
            keys: Sequence[str], refs: Sequence[str] = ("bce",)) -> dict:
    """Per (method, metric): per-set mean and sd, and against each reference that ran the
    per-set mean difference, the Holm-adjusted paired p and the tallies."""
    def vals(m: str, key: str, d: str) -> np.ndarray:
        return np.array([r[key] for r in select(rows, dataset=d, method=m)])

    out: dict = {}
    for m in methods:
        for key in keys:
            v = {d: vals(m, key, d) for d in datasets}
            entry: dict = {"sets": {d: {"mean": float(v[d].mean()), "sd": float(v[d].std())}
                                    for d in datasets},
                           "mean": float(np.mean([v[d].mean() for d in datasets])), "vs": {}}
            for ref in (r for r in refs if r in methods and r != m):
                diff = [float((v[d] - vals(ref, key, d)).mean()) for d in datasets]
                adj = op.holm([op.wilcoxon_p(v[d], vals(ref, key, d)) for d in datasets])
                sig = [(x, a) for x, a in zip(diff, adj, strict=True) if a < 0.05]
                entry["vs"][ref] = {"diff": diff, "p_holm": adj,
                                    "better": sum(x > 0 for x, _ in sig),
                                    "worse": sum(x < 0 for x, _ in sig),
                                    "higher_mean": sum(x > 0 for x in diff)}
            out[m, key] = entry
    return out


#: The mark of a cell whose paired test against each reference gives Holm p < 0.05.
MARKS: dict[str, str] = {"bce": "*", "bce+ap": "†"}


def _cell(c: dict, i: int, d: str) -> str:
    marks = "".join(MARKS[r] for r, v in c["vs"].items() if v["p_holm"][i] < 0.05)
    return f"{c['sets'][d]['mean']:.3f} ± {c['sets'][d]['sd']:.3f}{marks}"


def metric_table(cmp: dict, key: str, datasets: Sequence[str], methods: Sequence[str],
                 refs: Sequence[str] = ("bce",)) -> list[str]:
    refs = [r for r in refs if r in methods]
    lines = ["| loss | " + " | ".join(datasets) + " | mean | > BCE (mean) | "
             + " | ".join(f"sig. better / worse vs {r}" for r in refs) + " |",
             "|---|" + "---:|" * (len(datasets) + 2 + len(refs))]
    for m in methods:
        c = cmp[m, key]
        tally = f"{c['vs']['bce']['higher_mean']}/{len(datasets)}" if "bce" in c["vs"] else "—"
        sig = [f"{c['vs'][r]['better']} / {c['vs'][r]['worse']}" if r in c["vs"] else "—"
               for r in refs]
        lines.append(f"| {m} | " + " | ".join(_cell(c, i, d) for i, d in enumerate(datasets))
                     + f" | {c['mean']:.3f} | {tally} | " + " | ".join(sig) + " |")
    return lines


def table_methods(key: str, methods: Sequence[str]) -> list[str]:
    """The methods of one metric's table: the cross-entropies, then those that target it."""
    return [m for m in methods if m in ("bce", "pos_weight", "focal") or TARGETS.get(m) == key
            or (m in OURS + ABLATIONS and split_name(m)[1] == key)]


def _versus(cmp: dict, m: str, key: str) -> str:
    v = cmp[m, key]["vs"]["bce"]
    return (f"{cmp[m, key]['mean']:.3f} ({cmp[m, key]['mean'] - cmp['bce', key]['mean']:+.3f}; "
            f"{v['better']} / {v['worse']})")


def recommend(cmp: dict, key: str, methods: Sequence[str]) -> str:
    """The rule, stated before the run: recommend the variant of this metric's own loss with
    the highest mean among those above BCE's mean, significantly better on at least one set
    and significantly worse on none; else "BCE is as good" if some variant is significantly
    worse on no set; else "use BCE". A baseline or peer that passes the same rule is named."""
    ours = [m for m in methods if m in OURS and split_name(m)[1] == key]
    bce = cmp["bce", key]["mean"]

    def wins(m: str) -> bool:
        v = cmp[m, key]["vs"]["bce"]
        return cmp[m, key]["mean"] > bce and v["better"] > 0 and v["worse"] == 0

    good = [m for m in ours if wins(m)]
    others = [m for m in table_methods(key, methods) if m not in ours and m != "bce" and wins(m)]
    also = f" ({', '.join(others)} also beat{'s' if len(others) == 1 else ''} BCE by this rule)" \
        if others else ""
    if good:
        best = max(good, key=lambda m: cmp[m, key]["mean"])
        v, n = cmp[best, key]["vs"]["bce"], len(cmp[best, key]["sets"])
        return (f"**`{best}` ahead here** ({cmp[best, key]['mean'] - bce:+.3f} over BCE's mean; "
                f"significantly better on {v['better']}, worse on 0 of {n} sets: a small "
                "gain on these sets; the held-out check is curve_defaults.md)" + also)
    if any(cmp[m, key]["vs"]["bce"]["worse"] == 0 for m in ours):
        return "**BCE is as good** (no variant significantly better on any set)" + also
    return "**use BCE** (every variant significantly worse on some set)" + also


def summary(cmp: dict, methods: Sequence[str], n_sets: int) -> list[str]:
    variants = [p for p in ("", "warm ", "bce+") if any(m.startswith(p) for m in methods)]
    head = ["metric", "bce", "pos_weight", "focal",
            *(f"{p or 'alone'}".strip() for p in variants), "peers", "recommendation"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 2) + "---|"]
    for key in (k for k in CURVE_METRICS if ("bce", k) in cmp):
        cells = [f"{cmp['bce', key]['mean']:.3f}"]
        cells += [_versus(cmp, b, key) if b in methods else "—" for b in ("pos_weight", "focal")]
        cells += [_versus(cmp, f"{p}{key}", key) if f"{p}{key}" in methods else "—"
                  for p in variants]
        peers = [m for m in table_methods(key, methods) if m in TARGETS]
        cells.append("; ".join(f"{m} {_versus(cmp, m, key)}" for m in peers) or "—")
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {recommend(cmp, key, methods)} |")
    return [*lines, "", f"Cells: mean over the {n_sets} sets of the test metric named in the "
            "row, (difference from BCE's mean; sets significantly better / worse than BCE). "
            "The recommendation reads these sets only; what to use per metric, with the recipes "
            "checked on held-out sets, is [recipes.md](recipes.md) "
            "([curve_defaults.md](curve_defaults.md))."]


EARLIER = ROOT / "docs" / "curve_evidence_earlier_runs.csv"


def setup_line(meta: dict) -> str:
    s, datasets = meta["settings"], meta["datasets"]
    return (f"Chosen on the development sets only ({', '.join(datasets)}). Settings: "
            f"{json.dumps(s)}; MLP and optimiser as `benchmarks/constraints_tabular.py` "
            f"(hidden {list(ct.Config.hidden)}, Adam lr {ct.Config.lr}, 4 batches per epoch, "
            "the same initial weights and shuffled batches for every loss). "
            f"{s['folds'] * len(s['seeds'])} runs (folds x seeds) per set and loss; "
            f"{meta['cpu_seconds'] / 60:.1f} min of CPU time (one thread).")


def write_report(out: Path, rows: list[dict], meta: dict) -> None:
    datasets, methods, s = meta["datasets"], meta["methods"], meta["settings"]
    keys = [k for k in CURVE_METRICS if k in rows[0]]
    cmp = compare(rows, datasets, methods, keys)
    full = s["folds"] == 5 and len(s["seeds"]) == 3 and s["epochs"] == 100 \
        and len(datasets) == len(DEV_DATASETS)
    lines = [
        "# Curve losses: evidence on the development sets",
        "",
        "Generated by `benchmarks/curve_evidence.py` (no hand edits). Reproduce with:",
        "",
        "```", *meta["commands"], "```",
        "",
        setup_line(meta),
        "The harness's full settings (5 folds x 3 seeds x 100 epochs on all six development "
        "sets), not reduced." if full else "**A reduced run** (the CPU is shared): fewer folds, seeds, epochs or "
        "sets than the harness's 5 folds x 3 seeds x 100 epochs on all six development sets; "
        "still paired run by run. The AUROC/AP tables of the earlier full run are kept below.",
        "",
        "Every named curve metric is trained as a loss — alone (`m`), after a BCE warm start "
        f"(`warm m`: `metricc.WarmStart`, BCE for {s['warm_start']:.0%} of the training steps, "
        f"a linear blend over {s['warm_blend']:.0%}, then the metric loss alone) and added to "
        "BCE (`bce+m`) — and measured on its own metric, exactly: `metricc.compile(name).score` "
        "on the test scores, every distinct score a threshold, equal to scikit-learn's "
        "`roc_auc_score`, `average_precision_score`, `roc_auc_score(max_fpr=0.1)` and the best "
        "F1 of `precision_recall_curve`, and torchmetrics' `BinaryRecallAtFixedPrecision(0.9)` "
        "and `BinaryPrecisionAtFixedRecall(0.9)` (largest difference over every run: "
        + ", ".join(f"{k} {v:.1e}" for k, v in meta["score_check"].items()) + "). Default "
        "parameters: `partial_auroc` max_fpr 0.1, `recall_at_precision` min_precision 0.9, "
        "`precision_at_recall` min_recall 0.9. Peers: " + meta["libauc"] + "; "
        + meta["imbalanced_losses"] + ".",
        "",
        "Cells: exact test score, mean ± sd over the runs; `*`: the paired two-sided Wilcoxon "
        "signed-rank test against BCE over the runs, Holm-corrected over the sets, gives "
        "p < 0.05. *> BCE (mean)*: sets whose mean is above BCE's. Cross-entropy is consistent "
        "for these metrics' rankings, so any gain over it is a finite-sample effect.",
        "",
        "## Summary: each metric's own losses against BCE",
        "",
        *summary(cmp, methods, len(datasets)),
        "",
        f"Settings: the losses ran with memory_decay {s['memory_decay']} (the library's default "
        f"is None, no memory), {s['bins']} bins and the `best()` tau at its default; the "
        "WarmStart shares are this benchmark's choice (WarmStart has no default steps). The "
        "sweep of these defaults and of the warm-start schedule, and the recipe chosen per "
        "metric, is [curve_defaults.md](curve_defaults.md).",
        "",
    ]
    lines += warm_section(rows, datasets, methods, keys)
    for key in keys:
        lines += [f"## Test {key} (metricc `{CURVE_METRICS[key]}`)", "",
                  *metric_table(cmp, key, datasets, table_methods(key, methods)), ""]
    if any(m in methods for m in LIBAUC + IMBLOSS):
        lines += ["## The peers' losses", "", *peer_notes(s), ""]
    lines += earlier_section()
    (out / "curve_evidence.md").write_text("\n".join(lines), encoding="utf-8")
    (out / "curve_evidence.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def warm_section(rows: list[dict], datasets: Sequence[str], methods: Sequence[str],
                 keys: Sequence[str]) -> list[str]:
    """``warm m`` against ``m`` alone, paired run by run on ``m``'s own metric."""
    pairs = [k for k in keys if k in methods and f"warm {k}" in methods]
    if not pairs:
        return []
    lines = ["## The warm start against the loss alone", "",
             "`warm m` against `m` alone on the metric `m`: mean difference over the sets, and "
             "the sets where the paired Wilcoxon test (Holm over the sets) finds it "
             "significantly better / worse.", "",
             "| metric | alone | warm | warm − alone | sig. better / worse |",
             "|---|---:|---:|---:|---:|"]
    for k in pairs:
        c = compare(rows, datasets, [k, f"warm {k}"], [k], refs=(k,))
        v = c[f"warm {k}", k]["vs"][k]
        lines.append(f"| {k} | {c[k, k]['mean']:.3f} | {c[f'warm {k}', k]['mean']:.3f} | "
                     f"{c[f'warm {k}', k]['mean'] - c[k, k]['mean']:+.3f} | "
                     f"{v['better']} / {v['worse']} |")
    return [*lines, ""]


def peer_notes(s: dict) -> list[str]:
    return [
        f"`libauc_aucm` is `AUCMLoss(margin={s['aucm_margin']})` on sigmoid scores with `PESG` "
        f"at its defaults (SGD, lr {s['pesg_lr']}, "
        f"{', '.join(f'{k} {v:g}' for k, v in PESG_DEFAULTS.items())}), "
        "`update_regularizer(decay_factor=10)` after "
        f"{' and '.join(f'{round(f * 100)} %' for f in s['pesg_decay_epochs'])} of the epochs; "
        "`libauc_aucm adam` the same with `PESG(mode=\"adam\")` at the harness's Adam lr. "
        "`libauc_ap` is `APLoss` (margin 1, gamma 0.9, squared hinge) with `SOAP(mode=\"adam\")`, "
        f"`libauc_pauc` `pAUC_CVaR_Loss(beta={s['pauc_max_fpr']})` with `SOPA(mode=\"adam\")`, "
        "both at the harness's lr, on sigmoid scores, each sample's row in the data set as "
        "LibAUC's index; a batch without a positive or a negative gives them a zero loss. One "
        "network, loss and optimiser per fold and seed, from the same initial weights as every "
        "other loss, on the harness's ordinary shuffled batches: LibAUC's docs recommend its "
        "`DualSampler` (positives oversampled to a fixed share of each batch), which replaces "
        "the user's data pipeline; its losses may do better with it.",
        "",
        "`imbl_smoothap` is imbalanced-losses' `SmoothAPLoss(num_classes=1)` and `imbl_pauc` its "
        f"`PAUCAtBudgetLoss(num_classes=1, alpha=0, beta={s['pauc_max_fpr']})`, on logits, at "
        "the package's defaults (queue 1024, its temperatures), one loss and queue per model. "
        "imbalanced-losses has no loss for recall at a fixed precision, precision at a fixed "
        "recall or the best F1 (its `RecallAtQuantileLoss` is recall in a top-quantile alert "
        "region, a different target), and LibAUC none either; those tables race the "
        "cross-entropies only.",
    ]


def earlier_section(path: Path = EARLIER) -> list[str]:
    """The earlier full AUROC/AP run (5 folds x 3 seeds, 100 epochs, with the ablations and
    the README's recipe ``bce+ap`` as a second reference), rendered from its kept runs."""
    meta_path = path.with_name("curve_evidence_earlier.json")
    if not path.exists() or not meta_path.exists():
        return []
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    rows = read_runs(path)
    cmp = compare(rows, meta["datasets"], meta["methods"], ("auroc", "ap"), ("bce", "bce+ap"))
    lines = ["## From the earlier run: AUROC and AP, with its ablations (not rerun here)", "",
             f"Runs kept in `docs/{path.name}`, made with:", "", "```", *meta["commands"], "```",
             "", setup_line(meta), "LibAUC: " + meta["libauc"] + ". `†`: significantly "
             "different from `bce+ap` (Holm p < 0.05), `*` from BCE.", "",
             "**Read its `bce+` rows as BCE + 15 x the curve loss**: that run's training loop "
             "multiplied each model's curve term by the number of models per loss (5 folds x 3 "
             "seeds), a scaling slip fixed in this run, whose `bce+` losses weigh the curve term "
             "once. The losses without BCE are unaffected (Adam is invariant to the scale of the "
             "loss).", ""]
    for key, title in (("auroc", "Test AUROC"), ("ap", "Test average precision")):
        lines += [f"### {title} (earlier run)", "",
                  *metric_table(cmp, key, meta["datasets"], meta["methods"], ("bce", "bce+ap")),
                  ""]
    return lines


def read_runs(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [{k: (int(v) if k in ("fold", "seed") else v if k in ("dataset", "method")
                     else float(v)) for k, v in r.items()} for r in csv.DictReader(fh)]


FIELDS = ["dataset", "method", "fold", "seed", *CURVE_METRICS]


def write_outputs(out: Path, rows: list[dict], meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "curve_evidence_runs.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    write_report(out, rows, meta)


def merge(folders: Sequence[Path], out: Path) -> int:
    """Merge the runs of several ``--out`` folders (one data set each, say) into one report."""
    rows: list[dict] = []
    metas = []
    for f in folders:
        metas.append(json.loads((f / "curve_evidence.json").read_text(encoding="utf-8")))
        rows += read_runs(f / "curve_evidence_runs.csv")
    if any(m["settings"] != metas[0]["settings"] or m["methods"] != metas[0]["methods"] for m in metas):
        raise SystemExit("cannot merge runs made with different settings or losses")
    meta = {**metas[0], "datasets": [d for m in metas for d in m["datasets"]],
            "commands": [c for m in metas for c in m["commands"]],
            "cpu_seconds": sum(m["cpu_seconds"] for m in metas),
            "score_check": {k: max(m["score_check"][k] for m in metas) for k in CURVE_METRICS}}
    meta["commands"].append("python benchmarks/curve_evidence.py --merge " + " ".join(map(str, folders)))
    write_outputs(out, rows, meta)
    print(f"merged {len(folders)} folders into {out / 'curve_evidence.md'}")
    return 0


def libauc_status() -> str:
    try:
        import libauc
    except ImportError:
        return "LibAUC not importable in this environment, so its losses are not in the tables"
    return (f"libauc {getattr(libauc, '__version__', '?')} (AUC-M with PESG, APLoss with SOAP, "
            "pAUC_CVaR_Loss with SOPA, per model, on the harness's ordinary shuffled batches)")


def imbl_status() -> str:
    try:
        from importlib.metadata import version

        import imbalanced_losses  # noqa: F401
    except ImportError:
        return "imbalanced-losses not importable in this environment, so not in the tables"
    return (f"imbalanced-losses {version('imbalanced-losses')} (installed with "
            "`pip install --no-deps imbalanced-losses`; SmoothAPLoss, PAUCAtBudgetLoss)")


def available(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def libauc_available() -> bool:
    return available("libauc")


def default_methods() -> list[str]:
    return list(BASELINES + OURS + (LIBAUC if available("libauc") else ())
                + (IMBLOSS if available("imbalanced_losses") else ()))


def settings_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`Settings` fields a command line changes: ``--quick``'s small harness, then
    ``--epochs``, ``--folds`` and ``--seeds`` where given (this script's and ``curve_defaults.py``'s)."""
    changes: dict[str, Any] = {"epochs": 3, "folds": 2, "seeds": (0,)} if args.quick else {}
    for k in ("epochs", "folds"):
        if getattr(args, k) is not None:
            changes[k] = getattr(args, k)
    if args.seeds is not None:
        changes["seeds"] = tuple(args.seeds)
    return changes


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 set, 2 folds, 1 seed, 3 epochs")
    ap.add_argument("--datasets", nargs="+", choices=list(DEV_DATASETS))
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--folds", type=int)
    ap.add_argument("--seeds", type=int, nargs="+")
    ap.add_argument("--methods", nargs="+", help="a subset (default: every available method)")
    ap.add_argument("--merge", type=Path, nargs="+", help="folders of earlier runs to merge")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out)
    s = Settings(**{**asdict(Settings()), **settings_changes(args)})
    datasets = args.datasets or list(QUICK_SETS if args.quick else DEV_DATASETS)
    methods = args.methods or default_methods()
    if "bce" not in methods:
        raise SystemExit("--methods must include bce, the reference of every table")
    for m in methods:
        method(m)  # an unknown name stops here, before any training
    torch.set_num_threads(1)
    t0 = time.process_time()  # CPU time: the machine is shared, wall time would mislead
    rows: list[dict] = []
    scorer = Scorer()
    for d in datasets:
        rows += run_dataset(d, s, methods, scorer)
        print(f"{d}: {time.process_time() - t0:.0f} s CPU", flush=True)
    command = "python benchmarks/curve_evidence.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a)
    meta = {"commands": [command.strip()], "cpu_seconds": time.process_time() - t0,
            "datasets": datasets, "methods": methods, "settings": asdict(s),
            "libauc": libauc_status(), "imbalanced_losses": imbl_status(),
            "score_check": scorer.worst, "torch": torch.__version__}
    write_outputs(args.out, rows, meta)
    print(f"wrote {args.out / 'curve_evidence.md'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
