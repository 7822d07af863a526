#!/usr/bin/env python
"""Which defaults let ``precision subject to recall >= x`` reach its constraint on the training set.

Issue 28.1. A setting of the constrained loss (relaxation, amplifier, ``multiplier_lr``,
``penalty``, ``memory_decay``, ``multiplier_rates``) is judged only on *training* data:

* **met**: the constraint holds on the whole training (fit) set with 0/1 predictions at the
  loss's decision threshold (probability 0.5, logit 0), the model in evaluation mode, as a
  deployed model would be judged;
* **collapsed**: training precision below ``COLLAPSE_RATIO`` times the positive base rate
  (the model predicts "positive" nearly at random, e.g. 75 % of samples);
* tie-breaker: training precision.

Two cases, nothing else (the held-out KEEL sets are never touched):

* ``synthetic``: the issue's ``make_classification(9000, weights=[.9, .1], class_sep=.8)``,
  a 20-32-1 MLP (ReLU), Adam 3e-3, batches of 512, one model per seed (a seed fixes the
  data, the initial weights and the batch order), target recall >= 0.8;
* ``keel``: the development KEEL sets with the harness of ``benchmarks/constraints_tabular.py``
  (its ``Config``, folds x seeds, targets 0.8 and 0.9).

Every run of every configuration tried is appended to ``--runs`` (one row per model), with
the per-epoch multiplier trace of the synthetic case in ``--trace`` (for the warning rule);
``--report`` rebuilds the per-configuration summary ``benchmarks/results/constrained_defaults.csv``
and ``docs/constrained_defaults.md`` from them. Reproduce the recorded search (1 thread, ``nice``)::

    nice -n 15 python benchmarks/constrained_defaults.py --case synthetic --grid coarse
    nice -n 15 python benchmarks/constrained_defaults.py --case keel --grid coarse
    nice -n 15 python benchmarks/constrained_defaults.py --case both --grid refine
    python benchmarks/constrained_defaults.py --report   # docs/constrained_defaults.md

``--only TAG ...`` runs the named configurations of the grid only.

``--feasible`` (issue 28.1) trains the chosen defaults (or ``--only``) once more, judging
every epoch's whole fit set with one ``metricc.decisions.BestFeasible`` per run
(and one ``BestFeasible(keep="latest")`` for the latest feasible pass); it
writes ``constrained_defaults_feasible.csv`` (per run) and ``constrained_defaults_passes.csv.gz``
(per epoch), which ``--report`` tabulates (final iterate against the kept pass)::

    nice -n 5 python benchmarks/constrained_defaults.py --feasible   # about 1 min, 1 thread
    python benchmarks/constrained_defaults.py --report
"""

from __future__ import annotations

import argparse
import csv
import gzip
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import constraints_tabular as ct  # noqa: E402

from metricc.decisions import BestFeasible  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
# precision < 1.25 x base rate: close to "all positive". The collapse of the case at
# today's defaults is 1.08x (precision 0.113, base rate 0.104, 92 % predicted positive); the
# hardest development set's genuine operating points (habarman, recall 0.9) are about 1.4x.
COLLAPSE_RATIO = 1.25


@dataclass(frozen=True)
class LossConfig:
    """The constrained loss's options under test (today's defaults, with memory off)."""

    relaxation: str = "anyloss"
    amplifier: float = 73.0
    multiplier_lr: float = 0.05
    penalty: float = 1.0
    memory_decay: float = 0.0
    multiplier_rates: str = "hard"
    # train for ``recall >= target + margin`` (judged at ``target``): the slack a user can give
    # today by writing a higher bound, measured because the multipliers settle *at* the bound
    margin: float = 0.0

    @property
    def tag(self) -> str:
        relax = f"anyloss{self.amplifier:g}" if self.relaxation == "anyloss" else self.relaxation
        return (f"{relax}_lr{self.multiplier_lr:g}_pen{self.penalty:g}_mem{self.memory_decay:g}_"
                f"{self.multiplier_rates}" + (f"_margin{self.margin:g}" if self.margin else ""))

    def loss(self, target: float) -> torch.nn.Module:
        opts: dict = {"from_logits": True, "multiplier_lr": self.multiplier_lr,
                      "penalty": self.penalty, "multiplier_rates": self.multiplier_rates}
        if self.relaxation == "anyloss":
            opts["amplifier"] = self.amplifier
        if self.memory_decay > 0:
            opts["memory_decay"] = self.memory_decay
        return ct.constrained(round(target + self.margin, 6)).loss(self.relaxation, **opts)


TODAY = LossConfig()
#: The recommendation (issue 28.1), applied in benchmarks/operating_points.py's RECIPE.
CHOSEN = LossConfig(amplifier=10.0, multiplier_lr=0.2)
DECISION = (
    "**Chosen: `{tag}`** (AnyLoss amplifier 10, `multiplier_lr=0.2`, `penalty=1`, no memory, hard "
    "rates). Rule: the highest *met* on keel (180 runs), where a difference in *met* counts only if "
    "an exact McNemar test on the paired runs gives p < 0.05 (this tie rule was fixed after the "
    "grid was seen); then training precision; the synthetic case must be met on every seed. "
    "Against today's `anyloss73_lr0.05` on keel: 42 runs met only by the choice, 4 only by today's "
    "(p = 5e-9), training precision 0.763 vs 0.770 (Wilcoxon p = 0.23). `anyloss5_lr0.2` (13 vs 6, "
    "p = 0.17), `penalty=5` (14 vs 5, p = 0.06) and a 0.02 margin (15 vs 6, p = 0.08) meet a few "
    "more runs, not significantly, at lower precision (0.743, 0.725, 0.754; each p < 1e-4).")


def coarse_grid() -> list[LossConfig]:
    """One factor at a time around today's defaults, then the relaxation x step grid."""
    out = [TODAY]
    relaxations = [LossConfig(amplifier=a) for a in (20.0, 10.0, 5.0)] + [
        LossConfig(relaxation="sigmoid"), LossConfig(relaxation="linear")]
    for base in [TODAY, *relaxations]:
        for lr in (0.01, 0.05, 0.2):
            out.append(replace(base, multiplier_lr=lr))
    out += [replace(TODAY, multiplier_lr=0.5), LossConfig(amplifier=10.0, multiplier_lr=0.5)]
    out += [LossConfig(amplifier=10.0, margin=0.02), LossConfig(amplifier=10.0, multiplier_lr=0.2,
                                                                margin=0.02)]
    for base in (TODAY, LossConfig(amplifier=10.0)):
        out += [replace(base, penalty=0.0), replace(base, penalty=5.0),
                replace(base, memory_decay=0.9), replace(base, multiplier_rates="relaxed")]
    seen, uniq = set(), []
    for c in out:
        if c.tag not in seen:
            seen.add(c.tag)
            uniq.append(c)
    return uniq


def refine_grid() -> list[LossConfig]:
    """Around the coarse winner (amplifier 10, step 0.2): step, amplifier, memory, penalty, slack."""
    best = LossConfig(amplifier=10.0, multiplier_lr=0.2)
    return [replace(best, multiplier_lr=0.5), replace(best, multiplier_lr=0.1),
            replace(best, amplifier=20.0), replace(best, amplifier=5.0),
            LossConfig(relaxation="sigmoid", multiplier_lr=0.2), replace(best, memory_decay=0.9),
            replace(best, penalty=5.0), replace(best, penalty=0.0),
            replace(best, multiplier_rates="relaxed"), replace(best, margin=0.02)]


# ------------------------------------------------------------------ synthetic case
class PlainMLP:
    """``S`` independent 20-32-1 MLPs (ReLU, ``torch.nn.Linear`` initialisation), one per seed."""

    def __init__(self, n_in: int, hidden: int, seeds: Sequence[int]):
        self.params: list[torch.Tensor] = []
        gens = [torch.Generator().manual_seed(2000 + s) for s in seeds]
        for a, b in ((n_in, hidden), (hidden, 1)):
            bound = 1 / math.sqrt(a)
            for shape in ((a, b), (b,)):
                self.params.append(torch.stack([(torch.rand(*shape, generator=g) * 2 - 1) * bound
                                                for g in gens]).requires_grad_(True))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(S, B)`` of ``(S, B, d)`` inputs."""
        w1, b1, w2, b2 = self.params
        h = torch.relu(torch.einsum("sbd,sde->sbe", x, w1) + b1.unsqueeze(1))
        return (torch.einsum("sbd,sde->sbe", h, w2) + b2.unsqueeze(1)).squeeze(-1)


def rates(p: np.ndarray, y: np.ndarray, t: float = 0.5) -> tuple[float, float, float]:
    """0/1 (recall, precision, predicted-positive fraction) of ``p >= t``."""
    pred = p >= t
    tp = float((pred & (y == 1)).sum())
    return tp / max(1.0, float(y.sum())), tp / max(1.0, float(pred.sum())), float(pred.mean())


@dataclass
class JudgedRun:
    """One run of a :class:`PassJudge`: its identifying fields, target, index into an epoch's
    probabilities, fit-set indices and labels, a callable reading its multiplier now, and
    optionally a held-out part it never trains on (KEEL: the fold's validation part)."""

    meta: dict
    target: float
    index: tuple[int, ...]
    fit: np.ndarray
    y_fit: np.ndarray
    multiplier: Callable[[], float]
    held: np.ndarray | None = None
    y_held: np.ndarray | None = None


class PassJudge:
    """After every epoch, each run's whole-fit-set 0/1 rates at probability 0.5 (model in
    evaluation mode), judged by one :class:`BestFeasible` per run: the recipe "keep the best
    feasible training pass" (issue 28.1; TFCO keeps the best feasible iterate likewise), and
    by one ``BestFeasible(keep="latest")`` (the latest feasible pass, issue 28).
    The held-out rates are recorded only, never used to choose."""

    def __init__(self, runs: list[JudgedRun]):
        self.runs = runs
        self.judges = [BestFeasible(ct.constrained(r.target), threshold=0.5) for r in runs]
        self.latest = [BestFeasible(ct.constrained(r.target), threshold=0.5, keep="latest")
                       for r in runs]
        self.held: list[list[tuple[float, float]]] = [[] for _ in runs]
        self.rows: list[dict] = []

    def __call__(self, epoch: int, probs: np.ndarray) -> None:
        for run, judge, latest, held in zip(self.runs, self.judges, self.latest, self.held,
                                            strict=True):
            p = probs[run.index]
            res = judge.update(epoch + 1, p[run.fit], run.y_fit)
            latest.update(epoch + 1, p[run.fit], run.y_fit)
            rec, prec, pos = rates(p[run.fit], run.y_fit)
            met = res.feasible and res.value >= COLLAPSE_RATIO * float(run.y_fit.mean())
            h_rec, h_prec = (rates(p[run.held], run.y_held)[:2] if run.y_held is not None
                             else (math.nan, math.nan))
            held.append((h_rec, h_prec))
            self.rows.append({**run.meta, "target": run.target, "epoch": epoch + 1,
                              "recall": round(rec, 5), "precision": round(prec, 5),
                              "pred_pos": round(pos, 5), "feasible": int(res.feasible),
                              "met": int(met), "multiplier": round(run.multiplier(), 4),
                              "held_recall": round(h_rec, 5), "held_precision": round(h_prec, 5)})

    def summary(self, i: int) -> dict:
        """Run ``i``: how often and how early an epoch met the constraint, and four epochs one
        might keep: the final one, the one :class:`BestFeasible` kept, the latest met and the
        latest feasible one (kept by ``BestFeasible(keep="latest")``; ``{choice}_epoch`` from
        1, 0 for none; training and held-out rates of each)."""
        judge, latest, base = self.judges[i], self.latest[i], float(self.runs[i].y_fit.mean())
        hist = judge.history
        feas = [h.feasible for h in hist]
        # met: feasible and not collapsed (an early all-positive epoch is feasible, not met)
        met = [h.feasible and h.value >= COLLAPSE_RATIO * base for h in hist]
        out: dict = {"epochs_feasible": float(np.mean(feas)), "epochs_met": float(np.mean(met)),
                     "first_met": met.index(True) + 1 if any(met) else 0,
                     "last10_met": float(np.mean(met[-10:]))}
        choices = {"final": len(hist) - 1,
                   "kept": judge.best.step - 1 if judge.best is not None else -1,
                   "latest_met": max((e for e, m in enumerate(met) if m), default=-1),
                   "latest_feasible": latest.best.step - 1 if latest.best is not None else -1}
        for name, e in choices.items():
            ok = e >= 0
            out.update({f"{name}_epoch": e + 1, f"{name}_met": int(ok and met[e]),
                        f"{name}_recall": next(iter(hist[e].rates.values())) if ok else math.nan,
                        f"{name}_precision": hist[e].value if ok else math.nan,
                        f"held_{name}_recall": self.held[i][e][0] if ok else math.nan,
                        f"held_{name}_precision": self.held[i][e][1] if ok else math.nan})
        return out


def run_synthetic(cfg: LossConfig, seeds: Sequence[int], epochs: int, target: float = 0.8,
                  passes: list[dict] | None = None) -> tuple[list[dict], list[dict]]:
    """One row per seed (final training rates) and a per-epoch trace; with ``passes`` (a
    list), each epoch is also judged by a :class:`PassJudge`, whose per-epoch rows are
    appended to it and whose per-run summary joins each row."""
    from sklearn.datasets import make_classification

    data = [make_classification(9000, n_features=20, weights=[0.9, 0.1], class_sep=0.8,
                                random_state=s) for s in seeds]
    x = torch.as_tensor(np.stack([d[0] for d in data]), dtype=torch.float32)
    y = torch.as_tensor(np.stack([d[1] for d in data]), dtype=torch.float32)
    yn = y.numpy()
    net = PlainMLP(20, 32, seeds)
    opt = torch.optim.Adam(net.params, lr=3e-3)
    loss_fn = cfg.loss(target)
    rngs = [np.random.default_rng(s) for s in seeds]
    n, bs = x.shape[1], 512
    trace: list[dict] = []
    streak = np.zeros(len(seeds), dtype=int)  # epochs in a row: violated and multiplier up
    last_lam = np.zeros(len(seeds))
    judge = None if passes is None else PassJudge([JudgedRun(
        {"tag": cfg.tag, "case": "synthetic", "set": "make_classification", "fold": 0,
         "seed": seed}, target, (si,), np.arange(yn.shape[1]), yn[si],
        lambda si=si: float(loss_fn.multipliers.reshape(len(seeds), -1)[si, 0]))
        for si, seed in enumerate(seeds)])
    for epoch in range(epochs):
        perms = np.stack([r.permutation(n) for r in rngs])
        for k in range(0, n, bs):
            idx = torch.as_tensor(perms[:, k:k + bs])
            xb = torch.gather(x, 1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
            yb = torch.gather(y, 1, idx)
            opt.zero_grad(set_to_none=True)
            loss_fn.row_losses(net(xb), yb).sum().backward()
            opt.step()
        with torch.no_grad():
            p = torch.sigmoid(net(x)).numpy()
        if judge is not None:
            judge(epoch, p)
        lam = loss_fn.multipliers.reshape(len(seeds), -1)[:, 0].numpy().copy()
        for si, seed in enumerate(seeds):
            rec, prec, pos = rates(p[si], yn[si])
            violated = rec < target
            streak[si] = streak[si] + 1 if (violated and lam[si] > last_lam[si]) else 0
            trace.append({"config": cfg.tag, "seed": seed, "epoch": epoch + 1, "recall": round(rec, 4),
                          "precision": round(prec, 4), "pred_pos": round(pos, 4),
                          "multiplier": round(float(lam[si]), 4),
                          "streak": int(streak[si])})
        last_lam = lam
    rows = []
    for si, seed in enumerate(seeds):
        rec, prec, pos = rates(p[si], yn[si])
        base = float(yn[si].mean())
        rows.append({"case": "synthetic", "set": "make_classification", "fold": 0, "seed": seed,
                     "target": target, "fit_recall": rec, "fit_precision": prec,
                     "fit_pred_pos": pos, "base_rate": base,
                     "multiplier": float(loss_fn.multipliers.reshape(len(seeds), -1)[si, 0])})
    if judge is not None and passes is not None:
        passes += judge.rows
        for si, row in enumerate(rows):
            row.update(judge.summary(si))
    return rows, trace


# ------------------------------------------------------------------------ KEEL case
def keel_judge(cfg: LossConfig, name: str, y: np.ndarray, parts: Sequence[tuple[np.ndarray, ...]],
               harness: ct.Config, losses: Sequence[torch.nn.Module]) -> PassJudge:
    """One judged run per (target, fold, seed), in ``run_keel``'s row order."""
    def lam(li: int, fi: int, si: int) -> Callable[[], float]:
        return lambda: float(losses[li].multipliers.reshape(len(parts), len(harness.seeds),
                                                            -1)[fi, si, 0])
    return PassJudge([JudgedRun({"tag": cfg.tag, "case": "keel", "set": name, "fold": fi,
                                 "seed": seed}, target, (li, fi, si), fit, y[fit],
                                lam(li, fi, si), val, y[val])
                      for li, target in enumerate(ct.TARGETS)
                      for fi, (fit, val, _) in enumerate(parts)
                      for si, seed in enumerate(harness.seeds)])


def run_keel(cfg: LossConfig, datasets: Sequence[str], harness: ct.Config,
             passes: list[dict] | None = None) -> list[dict]:
    """Training-set rates at 0.5 of the constrained models of ``constraints_tabular``'s harness;
    ``passes`` as in :func:`run_synthetic`."""
    rows = []
    for name in datasets:
        X, y = ct.DATASETS[name]()
        parts = ct.splits(y, harness)
        losses = [cfg.loss(t) for t in ct.TARGETS]
        judge = None if passes is None else keel_judge(cfg, name, y, parts, harness, losses)
        probs = ct.train_models(X, y, parts, harness, losses, on_epoch_probs=judge)
        first = len(rows)
        for li, target in enumerate(ct.TARGETS):
            lam = losses[li].multipliers.reshape(len(parts), len(harness.seeds), -1)
            for fi, (fit, _, _) in enumerate(parts):
                for si, seed in enumerate(harness.seeds):
                    rec, prec, pos = rates(probs[li, fi, si, fit], y[fit])
                    rows.append({"case": "keel", "set": name, "fold": fi, "seed": seed,
                                 "target": target, "fit_recall": rec, "fit_precision": prec,
                                 "fit_pred_pos": pos, "base_rate": float(y[fit].mean()),
                                 "multiplier": float(lam[fi, si, 0])})
        if judge is not None and passes is not None:
            passes += judge.rows
            for i, row in enumerate(rows[first:]):
                row.update(judge.summary(i))
    return rows


def summarise(cfg: LossConfig, case: str, rows: list[dict], seconds: float, epochs: int) -> dict:
    rec = np.array([r["fit_recall"] for r in rows])
    prec = np.array([r["fit_precision"] for r in rows])
    base = np.array([r["base_rate"] for r in rows])
    tgt = np.array([r["target"] for r in rows])
    collapsed = prec < COLLAPSE_RATIO * base
    met = (rec >= tgt) & ~collapsed
    return {**asdict(cfg), "tag": cfg.tag, "case": case, "epochs": epochs, "runs": len(rows),
            "met_fraction": float(met.mean()), "collapsed_fraction": float(collapsed.mean()),
            "mean_fit_recall": float(rec.mean()), "min_fit_recall": float(rec.min()),
            "mean_excess": float((rec - tgt).mean()), "mean_fit_precision": float(prec.mean()),
            "max_multiplier": float(max(r["multiplier"] for r in rows)), "seconds": seconds}


def append_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    # the per-epoch trace is large: gzip members append, and read back as one file
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "at", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        if new:
            w.writeheader()
        w.writerows(rows)


# ------------------------------------------------------------------------- report
WARN_TOLERANCE = 0.02  # a violation smaller than this is noise around the bound, not a stall


def _read(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def config_table(runs: list[dict]) -> list[dict]:
    """Per (configuration, case): the criterion recomputed from every run (latest run of a tag)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["tag"], r["case"]), []).append(r)
    out = []
    for (tag, case), rs in groups.items():
        rec = np.array([float(r["fit_recall"]) for r in rs])
        prec = np.array([float(r["fit_precision"]) for r in rs])
        base = np.array([float(r["base_rate"]) for r in rs])
        tgt = np.array([float(r["target"]) for r in rs])
        collapsed = prec < COLLAPSE_RATIO * base
        met = (rec >= tgt) & ~collapsed
        out.append({"tag": tag, "case": case, "runs": len(rs), "met": float(met.mean()),
                    "met_within_0.01": float(((rec >= tgt - 0.01) & ~collapsed).mean()),
                    "collapsed": float(collapsed.mean()), "mean_recall": float(rec.mean()),
                    "min_recall": float(rec.min()), "mean_precision": float(prec.mean()),
                    "max_multiplier": max(float(r["multiplier"]) for r in rs)})
    return out


def stall_streaks(trace: list[dict]) -> dict[tuple[str, str], dict]:
    """Per (configuration, seed): the longest run of epochs with recall < target - tolerance and
    the multiplier rising, and how the run ended (met / short / collapsed)."""
    by: dict[tuple[str, str], list[dict]] = {}
    for r in trace:
        by.setdefault((r["config"], r["seed"]), []).append(r)
    out = {}
    for key, rs in by.items():
        rs.sort(key=lambda r: int(r["epoch"]))
        best = cur = 0
        first_long = None
        last = 0.0
        for r in rs:
            lam = float(r["multiplier"])
            cur = cur + 1 if float(r["recall"]) < 0.8 - WARN_TOLERANCE and lam > last else 0
            last = lam
            best = max(best, cur)
            if cur >= 20 and first_long is None:
                first_long = int(r["epoch"])
        end = rs[-1]
        collapsed = float(end["precision"]) < COLLAPSE_RATIO * 0.104
        # after a 10-epoch start (the first epochs of every run swing while the multiplier grows)
        ever_collapsed = any(float(r["pred_pos"]) > 0.5 for r in rs if int(r["epoch"]) > 10)
        outcome = ("collapsed" if collapsed else "met" if float(end["recall"]) >= 0.8 else "short")
        out[key] = {"longest": best, "first_20": first_long, "outcome": outcome,
                    "ever_over_half_positive": ever_collapsed, "final_recall": float(end["recall"])}
    return out


FEASIBLE_TITLE = "## The final iterate against the best feasible training pass"


def shown(path: Path) -> str:
    """``path`` as the page names it: relative to the repository when inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def feasible_section(rows: list[dict], source: str) -> list[str]:
    """Per (configuration, case, set): runs met by the final model against runs met by the
    epoch :class:`BestFeasible` kept (the best training precision among the epochs whose
    whole-fit-set recall meets the bound), and how the misses of the final model behaved."""
    latest = {(r["tag"], r["case"], r["set"], r["fold"], r["seed"], r["target"]): r for r in rows}
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in latest.values():
        for key in ((r["tag"], r["case"], r["set"]), (r["tag"], r["case"], "all")):
            groups.setdefault(key, []).append(r)
    out = [FEASIBLE_TITLE, "",
           "Generated by `python benchmarks/constrained_defaults.py --report` from "
           f"`{source}` (written by `--feasible`). After every epoch the whole fit set is scored "
           "at probability 0.5 (evaluation mode) and one `metricc.decisions.BestFeasible` "
           "per run judges that pass. An epoch is *met* when its recall meets the bound and its "
           f"precision is at least {COLLAPSE_RATIO} x the base rate (the search's criterion; the "
           "all-positive first epochs are feasible but collapsed). *final met*: the last epoch's "
           "model is; *kept met*: the pass `BestFeasible` kept (the highest training precision "
           "among the feasible epochs) is (the latest feasible pass, below, is the one "
           "`BestFeasible(keep=\"latest\")` keeps); *ever*: some epoch is; *epochs met*: the mean "
           "fraction of epochs that are (of the last 10 in brackets). Precision final / kept: "
           "means over the runs met both ways.", "",
           "| configuration | case | set | runs | final met | kept met | ever | epochs met "
           "(last 10) | first met epoch (median) | kept epoch (median) | precision final / kept |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (tag, case, name), rs in sorted(groups.items(), key=lambda kv: (
            kv[0][0], kv[0][1], kv[0][2] == "all", kv[0][2])):
        final = np.array([float(r["fit_recall"]) >= float(r["target"]) and float(
            r["fit_precision"]) >= COLLAPSE_RATIO * float(r["base_rate"]) for r in rs])
        kept = np.array([int(r["kept_met"]) == 1 for r in rs])
        first = [int(r["first_met"]) for r in rs if int(r["first_met"]) > 0]
        both = [r for r, f, k in zip(rs, final, kept, strict=True) if f and k]
        prec = (f"{np.mean([float(r['fit_precision']) for r in both]):.3f} / "
                f"{np.mean([float(r['kept_precision']) for r in both]):.3f}" if both else "—")
        em = np.mean([float(r["epochs_met"]) for r in rs])
        l10 = np.mean([float(r["last10_met"]) for r in rs])
        label = f"**{name}**" if name == "all" else name
        out.append(f"| `{tag}` | {case} | {label} | {len(rs)} | {int(final.sum())} "
                   f"({final.mean():.0%}) | {int(kept.sum())} ({kept.mean():.0%}) | "
                   f"{len(first)} | {em:.2f} ({l10:.2f}) | "
                   f"{np.median(first) if first else float('nan'):.0f} | "
                   f"{np.median([int(r['kept_epoch']) for r in rs]):.0f} | {prec} |")
    out += ["", *final_misses(list(latest.values())), *held_out(list(latest.values()))]
    secs = {(r["tag"], r["case"]): float(r["seconds"]) for r in latest.values()}
    out += ["Wall time of one configuration (all its runs, one CPU thread, per-epoch judging "
            "included): " + "; ".join(f"`{t}` {c} {v / 60:.1f} min"
                                      for (t, c), v in sorted(secs.items())) + ".", ""]
    return out


CHOICES = {"final": "final", "kept": "best feasible (`BestFeasible`)",
           "latest_met": "latest met",
           "latest_feasible": "latest feasible (`BestFeasible(keep=\"latest\")`)"}


def held_out(rows: list[dict]) -> list[str]:
    """Per configuration, on the KEEL validation parts (never trained on, never used to choose):
    the final epoch's 0/1 rates at 0.5 against the kept epoch's."""
    out = []
    for tag in sorted({r["tag"] for r in rows}):
        rs = [r for r in rows if r["tag"] == tag and r["case"] == "keel"]
        if not rs:
            continue
        def mean(k: str, rs: list[dict] = rs) -> float:
            return float(np.nanmean([float(r[k]) for r in rs]))
        ok = {k: np.array([float(r[f"held_{k}_recall"]) >= float(r["target"]) for r in rs])
              for k in CHOICES}
        out += [f"`{tag}`, four epochs one might keep per run, with their 0/1 rates at 0.5 on the "
                "whole fit set and on each fold's validation part (held out: no model trains on "
                "it; recorded, never used to choose):", "",
                "| epoch kept | training met | training precision | held-out recall | "
                "held-out precision | held-out recall >= bound | McNemar p against final |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for k, label in CHOICES.items():
            p = "—" if k == "final" else f"{mcnemar(ok[k], ok['final']):.2g}"
            out.append(f"| {label} | {sum(int(r[f'{k}_met']) for r in rs)} of {len(rs)} | "
                       f"{mean(f'{k}_precision'):.3f} | {mean(f'held_{k}_recall'):.3f} | "
                       f"{mean(f'held_{k}_precision'):.3f} | {int(ok[k].sum())} of {len(rs)} | "
                       f"{p} |")
        out.append("")
    return out


def mcnemar(a: np.ndarray, b: np.ndarray) -> float:
    """Exact two-sided McNemar p-value of paired 0/1 outcomes ``a`` and ``b``."""
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def final_misses(rows: list[dict]) -> list[str]:
    """Per configuration: the runs whose final model misses the bound, and whether they
    oscillate around it (feasible in some recent epochs) or never reach it."""
    out = []
    for tag in sorted({r["tag"] for r in rows}):
        miss = [r for r in rows if r["tag"] == tag and not (
            float(r["fit_recall"]) >= float(r["target"])
            and float(r["fit_precision"]) >= COLLAPSE_RATIO * float(r["base_rate"]))]
        if not miss:
            continue
        ever = sum(int(r["first_met"]) > 0 for r in miss)
        recent = sum(float(r["last10_met"]) > 0 for r in miss)
        gap = [float(r["target"]) - float(r["fit_recall"]) for r in miss
               if float(r["fit_recall"]) < float(r["target"])]
        short = (f"{len(gap)} short of the bound by {min(gap):.3f} to {max(gap):.3f} (median "
                 f"{np.median(gap):.3f}), {len(miss) - len(gap)} collapsed" if gap else
                 f"all {len(miss)} collapsed")
        sets = ", ".join(f"{k} {v}" for k, v in sorted(
            {n: sum(r["set"] == n for r in miss) for n in {r["set"] for r in miss}}.items()))
        out += [f"`{tag}`: {len(miss)} runs miss with the final model ({sets}); {ever} of them "
                f"met the bound in some epoch, {recent} in some of their last 10, on average in "
                f"{np.mean([float(r['last10_met']) for r in miss]):.0%} of their last 10 "
                f"epochs; at the end {short}.", ""]
    return out


def write_report(runs_csv: Path, trace_csv: Path, page: Path,
                 feasible_csv: Path | None = None) -> None:
    table = sorted(config_table(_read(runs_csv)), key=lambda r: (r["case"], -r["met"],
                                                                 -r["mean_precision"]))
    # the summary CSV is rebuilt from the runs (the criterion lives in one place: here)
    with (runs_csv.parent / "constrained_defaults.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
    lines = ["# Defaults of the constrained loss: the training-set search", "",
             "Generated by `python benchmarks/constrained_defaults.py --report` from "
             f"`{shown(runs_csv)}` (every configuration tried; no hand edits).", "",
             "Criterion (training data only): *met* = the constraint holds on the whole fit set with "
             "0/1 predictions at probability 0.5 (model in evaluation mode) and the model has not "
             f"collapsed (training precision >= {COLLAPSE_RATIO} x base rate); *within 0.01*: the "
             "same with 0.01 of slack. Tie-breaker: mean training precision. synthetic = "
             "`make_classification(9000, weights=[.9, .1], class_sep=.8)`, 20-32-1 MLP, Adam 3e-3, "
             "batches of 512, recall >= 0.8, one run per seed; keel = the six development sets with "
             "`benchmarks/constraints_tabular.py`'s harness, 5 folds x 3 seeds x targets 0.8/0.9.",
             ""]
    for case in ("synthetic", "keel"):
        rows = [r for r in table if r["case"] == case]
        if not rows:
            continue
        lines += [f"## {case}", "", "| configuration | runs | met | within 0.01 | collapsed | "
                  "mean recall | min recall | mean precision | max multiplier |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| `{r['tag']}` | {r['runs']} | {r['met']:.2f} | {r['met_within_0.01']:.2f} | "
                         f"{r['collapsed']:.2f} | {r['mean_recall']:.3f} | {r['min_recall']:.3f} | "
                         f"{r['mean_precision']:.3f} | {r['max_multiplier']:.2f} |")
        lines.append("")
    lines += ["## Decision", "", DECISION.format(tag=CHOSEN.tag), ""]
    if trace_csv.exists():
        streaks = stall_streaks(_read(trace_csv))
        lines += ["## The stall signal (synthetic case, per seed)", "",
                  "Longest run of epochs (18 steps each) in which the whole-set recall stayed below "
                  f"target - {WARN_TOLERANCE} while the multiplier rose, and how the run ended.", "",
                  "| configuration | seed | longest stall (epochs) | first reached 20 | final recall | "
                  "> 50 % positive after epoch 10 | outcome |", "|---|---:|---:|---:|---:|---|---|"]
        for (tag, seed), v in sorted(streaks.items()):
            lines.append(f"| `{tag}` | {seed} | {v['longest']} | {v['first_20'] or '—'} | "
                         f"{v['final_recall']:.3f} | {v['ever_over_half_positive']} | {v['outcome']} |")
        lines.append("")
    if feasible_csv is not None and feasible_csv.exists():
        lines += feasible_section(_read(feasible_csv), shown(feasible_csv))
    page.write_text("\n".join(lines), encoding="utf-8")


def replace_csv(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` to ``path``, keeping the rows of other (tag, case) already there."""
    done = {(r["tag"], r["case"]) for r in rows}
    old = [r for r in _read(path) if (r["tag"], r["case"]) not in done] if path.exists() else []
    opener = gzip.open if path.suffix == ".gz" else open
    path.parent.mkdir(parents=True, exist_ok=True)
    # older rows may lack newer columns (left empty) or hold retired ones (kept)
    fields = list(dict.fromkeys([*rows[0], *(k for r in old for k in r)]))
    with opener(path, "wt", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows([*old, *rows])


def run_feasible(cfg: LossConfig, cases: Sequence[str], args: argparse.Namespace,
                 harness: ct.Config) -> None:
    """``--feasible``: the runs of ``cfg`` with every epoch judged (:class:`PassJudge`)."""
    for case in cases:
        t0 = time.perf_counter()
        passes: list[dict] = []
        if case == "synthetic":
            rows = run_synthetic(cfg, args.synthetic_seeds, args.synthetic_epochs,
                                 passes=passes)[0]
        else:
            rows = run_keel(cfg, args.datasets, harness, passes=passes)
        seconds = time.perf_counter() - t0
        rows = [{"tag": cfg.tag, **r, "seconds": round(seconds, 1)} for r in rows]
        replace_csv(args.feasible_runs, rows)
        replace_csv(args.passes, passes)
        final = np.mean([r["fit_recall"] >= r["target"] and r["fit_precision"] >= COLLAPSE_RATIO
                         * r["base_rate"] for r in rows])
        print(f"{case:9s} {cfg.tag:45s} final met {final:.3f} kept met "
              f"{np.mean([r['kept_met'] for r in rows]):.3f} ever "
              f"{np.mean([r['first_met'] > 0 for r in rows]):.3f} {seconds:.0f}s", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=("synthetic", "keel", "both"), default="both")
    ap.add_argument("--grid", choices=("today", "coarse", "refine"), default="today")
    ap.add_argument("--only", nargs="+", help="run only these configuration tags")
    ap.add_argument("--synthetic-epochs", type=int, default=120)
    ap.add_argument("--synthetic-seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--keel-epochs", type=int, default=100)
    ap.add_argument("--datasets", nargs="+", default=list(ct.DEV_SETS))
    ap.add_argument("--runs", type=Path, default=RESULTS / "constrained_defaults_runs.csv")
    ap.add_argument("--trace", type=Path, default=RESULTS / "constrained_defaults_trace.csv.gz")
    ap.add_argument("--feasible", action="store_true",
                    help="judge every epoch's whole fit set with BestFeasible (the chosen defaults "
                         "unless --only); writes --feasible-runs and --passes")
    ap.add_argument("--feasible-runs", type=Path, default=RESULTS / "constrained_defaults_feasible.csv")
    ap.add_argument("--passes", type=Path,
                    default=RESULTS / "constrained_defaults_passes.csv.gz")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 set, 2 folds, 1 seed, 3 epochs (1 synthetic seed)")
    ap.add_argument("--page", type=Path, default=ROOT / "docs" / "constrained_defaults.md")
    ap.add_argument("--report", action="store_true", help="write docs/constrained_defaults.md and stop")
    args = ap.parse_args(argv)
    if args.report:
        write_report(args.runs, args.trace, args.page, args.feasible_runs)
        return 0
    torch.set_num_threads(1)
    harness = replace(ct.Config(), epochs=args.keel_epochs)
    if args.quick:
        harness = replace(harness, epochs=3, folds=2, seeds=(0,))
        args.synthetic_epochs, args.synthetic_seeds = 3, [0]
        args.datasets = list(ct.QUICK_SETS)
    grid = {"today": [TODAY], "coarse": coarse_grid(), "refine": refine_grid()}[args.grid]
    if args.only:  # any configuration of either grid, in the order given
        known = {c.tag: c for c in (*coarse_grid(), *refine_grid())}
        grid = [known[t] for t in args.only]
    cases = ("synthetic", "keel") if args.case == "both" else (args.case,)
    if args.feasible:
        for cfg in grid if args.only else [CHOSEN]:
            run_feasible(cfg, cases, args, harness)
        return 0
    for cfg in grid:
        for case in cases:
            t0 = time.perf_counter()
            if case == "synthetic":
                rows, trace = run_synthetic(cfg, args.synthetic_seeds, args.synthetic_epochs)
                append_csv(args.trace, trace)
                epochs = args.synthetic_epochs
            else:
                rows, epochs = run_keel(cfg, args.datasets, harness), args.keel_epochs
            s = summarise(cfg, case, rows, time.perf_counter() - t0, epochs)
            append_csv(args.runs, [{"tag": cfg.tag, **r} for r in rows])
            print(f"{case:9s} {cfg.tag:45s} met {s['met_fraction']:.2f} collapsed "
                  f"{s['collapsed_fraction']:.2f} recall {s['mean_fit_recall']:.3f} (min "
                  f"{s['min_fit_recall']:.3f}) precision {s['mean_fit_precision']:.3f} "
                  f"lam_max {s['max_multiplier']:.1f} {s['seconds']:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
