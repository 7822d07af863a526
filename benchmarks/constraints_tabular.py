#!/usr/bin/env python
"""Precision at a recall target: the constrained loss against BCE + a tuned threshold and the F1 loss.

On the development KEEL sets, for targets recall >= 0.8 and >= 0.9, four
trainings per (fold, seed), all the same MLP with the same initial weights and
batch order:

* ``bce``: BCE; the decision threshold is then picked on the validation part as
  the highest whose validation recall meets the target (baseline a);
* ``f1``: the unconstrained F1 loss at threshold 0.5 (baseline b);
* ``c80``, ``c90``: ``metricc.compile("precision subject to recall >= 0.8")``
  (and 0.9), ``loss(from_logits=True, memory_decay=...)``, used at its stated
  threshold 0.5, and also with the threshold re-picked on the validation part
  by ``best_threshold`` (precision subject to the recall target).

Stratified 5-fold cross-validation; in each training fold a stratified 25 %
validation part (the BCE threshold and the re-picked thresholds come from it;
every model trains on the other 75 %). Test scores are on the held-out fold.

    python benchmarks/constraints_tabular.py            # the recorded run (about 10 min, 1 core)
    python benchmarks/constraints_tabular.py --quick    # smoke run (seconds)

It writes ``constraints_results.md``, ``constraints_runs.csv`` and
``constraints_recall.png`` to ``--out`` (default ``docs/``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from imbalanced_tabular import DATASETS, DEV_DATASETS, BatchedMLP, minibatch  # noqa: E402

import metricc  # noqa: E402

# The project's development KEEL sets (examples/imbalanced_tabular.py declares the split
# before any experiment); every choice here was made on these sets only.
DEV_SETS: tuple[str, ...] = DEV_DATASETS
QUICK_SETS: tuple[str, ...] = ("glass0",)
TARGETS: tuple[float, ...] = (0.8, 0.9)
LOSSES: tuple[str, ...] = ("bce", "f1", *(f"c{round(100 * t)}" for t in TARGETS))

PRECISION = metricc.compile("precision")
RECALL = metricc.compile("recall")


@dataclass(frozen=True)
class Config:
    hidden: tuple[int, ...] = (16,)
    epochs: int = 100
    # chosen on the development sets by training recall alone (docs/constraints.md)
    lr: float = 1e-2
    batch_fraction: float = 0.25
    amplifier: float = 73.0
    memory_decay: float = 0.9
    multiplier_lr: float = 0.05
    penalty: float = 1.0
    multiplier_rates: str = "hard"
    folds: int = 5
    seeds: tuple[int, ...] = (0, 1, 2)
    validation: float = 0.25


def constrained(target: float) -> metricc.Metric:
    return metricc.compile(f"precision subject to recall >= {target}")


def splits(y: np.ndarray, cfg: Config) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(fit, validation, test) index arrays, one triple per fold."""
    from sklearn.model_selection import StratifiedKFold, train_test_split

    out = []
    outer = StratifiedKFold(cfg.folds, shuffle=True, random_state=0)
    for f, (tr, te) in enumerate(outer.split(np.zeros(len(y)), y)):
        fit, val = train_test_split(tr, test_size=cfg.validation, stratify=y[tr], random_state=f)
        out.append((np.sort(fit), np.sort(val), te))
    return out


#: One loss of a batched training: ``"bce"``, or a metricc loss module with ``row_losses``
#: (one confusion matrix, and for a constrained loss one set of multipliers, per model).
LossSpec = Any


def train(X: np.ndarray, y: np.ndarray, parts: Sequence[tuple[np.ndarray, ...]], cfg: Config
          ) -> np.ndarray:
    """Probabilities ``(L, F, S, n)`` on every sample, one model per (loss, fold, seed)."""
    f1 = metricc.compile("f1").loss(amplifier=cfg.amplifier, from_logits=True)
    cons = {f"c{round(100 * t)}": constrained(t).loss(
        amplifier=cfg.amplifier, from_logits=True, memory_decay=cfg.memory_decay,
        multiplier_lr=cfg.multiplier_lr, penalty=cfg.penalty,
        multiplier_rates=cfg.multiplier_rates) for t in TARGETS}
    specs = ["bce" if name == "bce" else f1 if name == "f1" else cons[name] for name in LOSSES]
    return train_models(X, y, parts, cfg, specs)


def standardised(X: np.ndarray, parts: Sequence[tuple[np.ndarray, ...]]) -> torch.Tensor:
    """``(F, n, d)`` float32: every sample scaled by the mean and deviation of fold ``f``'s
    training part."""
    xs = []
    for fit, _, _ in parts:
        mean, std = X[fit].mean(0), X[fit].std(0)
        std[std == 0] = 1.0
        xs.append((X - mean) / std)
    return torch.as_tensor(np.stack(xs), dtype=torch.float32)


def epoch_batches(parts: Sequence[tuple[np.ndarray, ...]], cfg: Config
                  ) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Per epoch, the minibatches ``(idx (F, S, B), weights)`` of every (fold, seed) model:
    the batch order depends on (seed, fold) only, so every loss sees the same batches."""
    n_batches = max(1, round(1 / cfg.batch_fraction))
    rngs = [[np.random.default_rng([s, f]) for s in cfg.seeds] for f in range(len(parts))]
    for _ in range(cfg.epochs):
        chunks = [[np.array_split(r.permutation(parts[f][0]), n_batches) for r in rngs[f]]
                  for f in range(len(parts))]
        yield [minibatch(chunks, k, torch.float32) for k in range(n_batches)]


def train_models(X: np.ndarray, y: np.ndarray, parts: Sequence[tuple[np.ndarray, ...]],
                 cfg: Config, losses: Sequence[LossSpec],
                 on_epoch: Callable[[int, Sequence[LossSpec]], None] | None = None,
                 on_epoch_probs: Callable[[int, np.ndarray], None] | None = None) -> np.ndarray:
    """Probabilities ``(L, F, S, n)`` on every sample for any list of losses.

    Every loss trains ``F x S`` models (same initial weights and batch order per seed
    across losses). ``on_epoch(epoch, losses)``, if given, runs after each epoch (e.g. to
    read the multipliers); ``on_epoch_probs(epoch, probs)`` gets, after each epoch, the
    probabilities ``(L, F, S, n)`` in evaluation mode (running batch-norm statistics, which
    that pass does not change, so the training is the same with or without it). Reused by
    ``benchmarks/operating_points.py`` and ``benchmarks/constrained_defaults.py``.
    """
    n_folds = len(parts)
    xall = standardised(X, parts)
    yall = torch.as_tensor(y, dtype=torch.float32)
    net = BatchedMLP(X.shape[1], cfg.hidden, len(losses), n_folds, cfg.seeds)
    opt = torch.optim.Adam(net.params, lr=cfg.lr)
    fold_ix = torch.arange(n_folds).view(-1, 1, 1)
    for epoch, batches in enumerate(epoch_batches(parts, cfg)):
        for idx_t, w in batches:
            size = idx_t.shape[-1]
            logits = net(xall[fold_ix, idx_t], w)  # (L, F, S, B)
            yb = yall[idx_t]
            total = logits.new_zeros(())
            for li, fn in enumerate(losses):
                if isinstance(fn, str):  # "bce"
                    bce = F.binary_cross_entropy_with_logits(logits[li], yb, reduction="none")
                    total = total + ((bce * w).sum(-1) / w.sum(-1)).sum()
                    continue
                # one confusion matrix (and, constrained, one set of multipliers) per model
                rows = fn.row_losses(logits[li].reshape(-1, size), yb.reshape(-1, size),
                                     w.reshape(-1, size))
                total = total + rows.sum()
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
        if on_epoch is not None:
            on_epoch(epoch, losses)
        if on_epoch_probs is not None:
            with torch.no_grad():
                on_epoch_probs(epoch, torch.sigmoid(net(xall)).numpy())
    with torch.no_grad():
        return torch.sigmoid(net(xall)).numpy()


def recall_threshold(p: np.ndarray, y: np.ndarray, target: float) -> float:
    """The highest threshold whose recall on ``(p, y)`` is at least ``target`` (baseline a)."""
    pos = np.sort(p[y == 1])[::-1]
    need = math.ceil(target * len(pos) - 1e-9)  # positives that must score >= t
    return float(pos[max(need, 1) - 1])


def scores(p: np.ndarray, y: np.ndarray, t: float) -> tuple[float, float, int]:
    pt, yt = torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(y)
    return (PRECISION.score(pt, yt, t, zero_division=0.0), RECALL.score(pt, yt, t),
            int((p >= t).sum()))


def run_dataset(name: str, cfg: Config) -> list[dict]:
    torch.set_num_threads(1)
    X, y = DATASETS[name]()
    parts = splits(y, cfg)
    probs = train(X, y, parts, cfg)
    rows = []
    for fi, (fit, val, te) in enumerate(parts):
        for si, seed in enumerate(cfg.seeds):
            for target in TARGETS:
                tag = f"c{round(100 * target)}"
                pb = probs[LOSSES.index("bce"), fi, si]
                pc = probs[LOSSES.index(tag), fi, si]
                pf = probs[LOSSES.index("f1"), fi, si]
                m = constrained(target)
                t_c = m.best_threshold(pc[val], y[val]).threshold
                for method, p, t in (
                    ("bce_tuned", pb, recall_threshold(pb[val], y[val], target)),
                    ("f1_loss", pf, 0.5),
                    ("constrained", pc, 0.5),
                    ("constrained_tuned", pc, t_c),
                ):
                    prec, rec, npos = scores(p[te], y[te], t)
                    # training-data recall: what the settings were chosen by (never test data)
                    fit_rec = scores(p[fit], y[fit], t)[1]
                    rows.append({"dataset": name, "fold": fi, "seed": seed, "target": target,
                                 "method": method, "threshold": t, "precision": prec,
                                 "recall": rec, "pred_pos": npos, "fit_recall": fit_rec})
    return rows


METHODS = ("constrained", "constrained_tuned", "bce_tuned", "f1_loss")
LABELS = {"constrained": "constrained loss @ 0.5", "constrained_tuned":
          "constrained loss, re-picked threshold", "bce_tuned": "(a) BCE, validation threshold",
          "f1_loss": "(b) F1 loss @ 0.5"}


def _get(rows: list[dict], d: str, target: float, method: str, key: str) -> np.ndarray:
    sel = sorted((r for r in rows if r["dataset"] == d and r["target"] == target
                  and r["method"] == method), key=lambda r: (r["fold"], r["seed"]))
    return np.array([r[key] for r in sel])


def write_report(out: Path, rows: list[dict], meta: dict) -> None:
    datasets, cfg = meta["datasets"], meta["config"]
    runs = cfg["folds"] * len(cfg["seeds"])
    lines = [
        "# Precision at a recall target: results",
        "",
        "Generated by `benchmarks/constraints_tabular.py` (no hand edits). Reproduce with:",
        "",
        "```",
        meta["command"],
        "```",
        "",
        f"Settings: {json.dumps(cfg)}. {runs} runs (folds x seeds) per data set, method and "
        f"target; wall time {meta['wall_seconds'] / 60:.1f} min on one CPU thread.",
        "",
        "Cells: test recall / test precision, mean ± standard deviation over the runs. "
        "**Within 0.03**: how many sets have a mean test recall within 0.03 of the target. "
        "**Precision >= (a)**: on how many sets the mean test precision is at least (a)'s.",
        "",
    ]
    summary = []
    for target in TARGETS:
        lines += [f"## Target recall >= {target}", "",
                  "| data set | " + " | ".join(LABELS[m] for m in METHODS) + " |",
                  "|---|" + "---:|" * len(METHODS)]
        for d in datasets:
            cells = []
            for m in METHODS:
                r, p = _get(rows, d, target, m, "recall"), _get(rows, d, target, m, "precision")
                cells.append(f"{r.mean():.3f} ± {r.std():.3f} / {p.mean():.3f} ± {p.std():.3f}")
            lines.append(f"| {d} | " + " | ".join(cells) + " |")
        within = ["**within 0.03**"]
        better = ["**precision >= (a)**"]
        for m in METHODS:
            rec = [_get(rows, d, target, m, "recall").mean() for d in datasets]
            prec = [_get(rows, d, target, m, "precision").mean() for d in datasets]
            base = [_get(rows, d, target, "bce_tuned", "precision").mean() for d in datasets]
            n_within = int(sum(abs(r - target) <= 0.03 for r in rec))
            n_reached = int(sum(r >= target - 0.03 for r in rec))
            n_better = int(sum(p >= b for p, b in zip(prec, base, strict=True)))
            within.append(f"{n_within}/{len(datasets)}")
            better.append(f"{n_better}/{len(datasets)}")
            summary.append({"target": target, "method": m, "within": n_within,
                            "reached": n_reached,
                            "precision_ge_a": n_better, "sets": len(datasets),
                            "mean_recall": float(np.mean(rec)),
                            "mean_precision": float(np.mean(prec)),
                            "mean_fit_recall": float(np.mean(
                                [_get(rows, d, target, m, "fit_recall").mean()
                                 for d in datasets]))})
        lines += ["| " + " | ".join(within) + " |", "| " + " | ".join(better) + " |", ""]
    lines += ["## Means over the sets", "", *summary_table(summary)]
    lines += ["", "![test recall and precision per data set](constraints_recall.png)", ""]
    (out / "constraints_results.md").write_text("\n".join(lines), encoding="utf-8")
    (out / "constraints_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    write_plot(out / "constraints_recall.png", rows, datasets)
    update_docs_page(out / "constraints.md", summary, meta)


def summary_table(summary: list[dict]) -> list[str]:
    out = ["| target | method | training recall | test recall | test precision | sets within "
           "0.03 | sets >= target - 0.03 | sets with precision >= (a) |",
           "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for s in summary:
        n = s["sets"]
        out.append(f"| {s['target']} | {LABELS[s['method']]} | {s['mean_fit_recall']:.3f} | "
                   f"{s['mean_recall']:.3f} | {s['mean_precision']:.3f} | {s['within']}/{n} | "
                   f"{s['reached']}/{n} | {s['precision_ge_a']}/{n} |")
    return out


def update_docs_page(page: Path, summary: list[dict], meta: dict) -> None:
    """Rewrite the generated block of ``docs/constraints.md`` (between its markers), if any."""
    start, end = "<!-- generated by benchmarks/constraints_tabular.py -->", "<!-- end generated -->"
    if not page.exists() or start not in page.read_text(encoding="utf-8"):
        return
    text = page.read_text(encoding="utf-8")
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    cfg = meta["config"]
    block = [
        start,
        "",
        f"`{meta['command']}` ({len(meta['datasets'])} sets: {', '.join(meta['datasets'])}; "
        f"{cfg['folds']} folds x {len(cfg['seeds'])} seeds; {meta['wall_seconds'] / 60:.1f} min "
        "on one CPU thread). Mean over the sets of each set's mean test score; a set counts as "
        "*within 0.03* when its mean test recall is, and as *precision >= (a)* when its mean "
        "test precision is at least that of (a):",
        "",
        *summary_table(summary),
        "",
        end,
    ]
    page.write_text(head + "\n".join(block) + tail, encoding="utf-8")


def write_plot(path: Path, rows: list[dict], datasets: Sequence[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(TARGETS), figsize=(10, 4.2), dpi=90, sharey=True)
    markers = {"constrained": "o", "constrained_tuned": "D", "bce_tuned": "s", "f1_loss": "^"}
    for ax, target in zip(np.atleast_1d(axes), TARGETS, strict=True):
        for m in METHODS:
            rec = [_get(rows, d, target, m, "recall").mean() for d in datasets]
            prec = [_get(rows, d, target, m, "precision").mean() for d in datasets]
            ax.scatter(rec, prec, marker=markers[m], label=LABELS[m], alpha=0.8, s=28)
        ax.axvspan(target - 0.03, target + 0.03, color="grey", alpha=0.15)
        ax.axvline(target, color="black", linewidth=0.8)
        ax.set_xlabel("mean test recall (one point per data set)")
        ax.set_title(f"target recall >= {target}", fontsize=10)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("mean test precision")
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 set, 2 folds, 1 seed, 3 epochs")
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS))
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    for field in ("epochs", "memory_decay", "multiplier_lr", "penalty", "batch_fraction", "lr"):
        ap.add_argument(f"--{field.replace('_', '-')}", type=float)
    ap.add_argument("--multiplier-rates", choices=("hard", "relaxed"))
    args = ap.parse_args(argv)
    cfg = Config()
    changes = {k: (int(v) if k == "epochs" else v) for k in
               ("epochs", "memory_decay", "multiplier_lr", "penalty", "batch_fraction", "lr",
                "multiplier_rates")
               if (v := getattr(args, k)) is not None}
    if args.quick:
        changes = {"epochs": 3, "folds": 2, "seeds": (0,), **changes}
    cfg = Config(**{**asdict(cfg), **changes})
    datasets = args.datasets or list(QUICK_SETS if args.quick else DEV_SETS)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows: list[dict] = []
    for d in datasets:
        t1 = time.perf_counter()
        rows += run_dataset(d, cfg)
        print(f"{d}: {time.perf_counter() - t1:.0f} s", flush=True)
    wall = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/constraints_tabular.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a)
    meta = {"command": command.strip(), "wall_seconds": wall, "datasets": datasets,
            "config": asdict(cfg), "torch": torch.__version__}
    with (args.out / "constraints_runs.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    write_report(args.out, rows, meta)
    print(f"done in {wall / 60:.1f} min; wrote {args.out / 'constraints_results.md'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
