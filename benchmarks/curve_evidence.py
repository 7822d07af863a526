#!/usr/bin/env python
"""Evidence for the curve losses: metricc's AUROC and AP losses against BCE and the usual baselines.

On the development KEEL sets (``DEV_DATASETS`` of ``examples/imbalanced_tabular.py``; every
choice here was made on these sets only), stratified folds x seeds, one model per loss trained
by ``benchmarks/constraints_tabular.py``'s ``train_models`` (same MLP, same initial weights and
batch order for every loss; each model trains on the fit part of its fold, 75 % of the training
fold, and is scored on the held-out fold). Losses:

* ``bce``; ``pos_weight`` (BCE with ``pos_weight`` = negatives / positives of the fit part);
  ``focal`` (gamma 2, Lin et al. 2017); ``pairwise`` (logistic loss over every positive x
  negative pair within the batch, the consistent pairwise AUC surrogate);
* ``auroc``, ``ap``: ``metricc.compile("auroc" / "average_precision").loss(from_logits=True,
  memory_decay=0.9)`` alone, and added to BCE (``bce+auroc``, ``bce+ap``);
* ablations: ``bce+ap nomem`` (no memory, per-batch curve) and ``bce+ap logit``
  (``space="logit"``, the grid on logits clipped to [-8, 8]).

* ``libauc_aucm``: LibAUC's ``AUCMLoss(margin=1.0)`` on sigmoid scores, trained with its own
  optimiser, ``PESG`` at PESG's defaults (SGD mode, lr 0.1 = 10 x the harness's Adam lr,
  momentum 0.9, epoch_decay 2e-3, weight_decay 1e-5, clip 1.0), the regulariser reset with
  ``update_regularizer(decay_factor=10)`` at 50 % and 75 % of the epochs (the LibAUC
  trainer's ``decay_epochs``); ``libauc_aucm adam``: the same with ``PESG(mode="adam")`` at
  the harness's lr. One network, AUC-M loss (its own a, b, alpha) and PESG per (fold, seed)
  model, with the same initial weights and the harness's ordinary shuffled batches, not
  LibAUC's ``DualSampler``. Included only if ``import libauc`` works (not a dependency).

Each method is a loss factory and an optimiser factory (``Method``); all but AUC-M use Adam.
Test AUROC and AP are exact (scikit-learn). Each method is compared with BCE, and with the
README's recipe ``bce+ap``, by a paired two-sided Wilcoxon signed-rank test over the folds x
seeds of a set, Holm-corrected over the sets.

    python benchmarks/curve_evidence.py --quick                # smoke run (seconds)
    python benchmarks/curve_evidence.py --datasets glass0 --out /tmp/a   # one set (1.5-2 min CPU)
    python benchmarks/curve_evidence.py --merge /tmp/a /tmp/b  # merge runs into docs/

It writes ``curve_evidence.md`` and ``curve_evidence_runs.csv`` to ``--out`` (default ``docs/``).
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
BASELINES: tuple[str, ...] = ("bce", "pos_weight", "focal", "pairwise")
OURS: tuple[str, ...] = ("auroc", "ap", "bce+auroc", "bce+ap", "bce+ap nomem", "bce+ap logit")
LIBAUC: tuple[str, ...] = ("libauc_aucm", "libauc_aucm adam")
#: The references every method is paired against: BCE, and the README's recipe (bce + ap, memory).
REFERENCES: tuple[str, ...] = ("bce", "bce+ap")
FOCAL_GAMMA = 2.0
#: libauc.optimizers.PESG's own defaults (besides lr and mode, which Settings records).
PESG_DEFAULTS: dict[str, float] = {"momentum": 0.9, "epoch_decay": 2e-3, "weight_decay": 1e-5,
                                   "clip_value": 1.0}


@dataclass(frozen=True)
class Settings:
    """What the evidence run varies; the MLP, optimiser and splits are ``ct.Config``'s."""

    # the harness's defaults (ct.Config); the recorded run used these, one process per set
    epochs: int = 100
    folds: int = 5
    seeds: tuple[int, ...] = (0, 1, 2)
    memory_decay: float = 0.9
    bins: int = 256
    aucm_margin: float = 1.0  # AUCMLoss's default
    pesg_lr: float = 0.1  # PESG's default lr, 10 x the harness's Adam lr (ct.Config.lr)
    pesg_decay_epochs: tuple[float, ...] = (0.5, 0.75)  # fractions of the epochs

    def config(self) -> ct.Config:
        return ct.Config(epochs=self.epochs, folds=self.folds, seeds=self.seeds)


class RowLoss:
    """One loss for ``ct.train_models``: ``row_losses(logits, y, w)`` gives one value per model.

    Rows are the ``F x S`` models of one loss (fold-major); ``w`` is 0 on padding. ``kind`` is
    a cross-entropy (``bce``, ``pos_weight``, ``focal``), ``pairwise``, or none; ``curve`` a
    metricc curve loss in ``multilabel`` mode, one column (and one pooled memory) per model.
    """

    def __init__(self, kind: str | None, curve: torch.nn.Module | None = None,
                 pos_weight: torch.Tensor | None = None) -> None:
        self.kind, self.curve, self.pos_weight = kind, curve, pos_weight

    def row_losses(self, logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        total = logits.new_zeros(logits.shape[0])
        if self.kind == "pairwise":
            total = total + pairwise_rows(logits, y, w)
        elif self.kind is not None:
            total = total + ce_rows(self.kind, logits, y, w, self.pos_weight)
        if self.curve is not None:
            # multilabel macro mean over the model columns; times R gives one loss per model
            # summed, and each model's gradient reaches only its own column. contiguous():
            # the runtime's histogram view() fails on a transposed (non-contiguous) input.
            cols = [t.T.contiguous() for t in (logits, y, w)]
            total = total + self.curve(*cols) * logits.shape[0]
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


def curve_loss(name: str, s: Settings) -> RowLoss:
    """``auroc`` / ``ap`` (+ ``bce+``, `` nomem``, `` logit``): metricc's curve loss in
    ``multilabel`` mode, one column (and one pooled memory) per model, fresh."""
    base, _, variant = name.partition(" ")
    formula = "auroc" if base.endswith("auroc") else "average_precision"
    options = {"memory_decay": None if variant == "nomem" else s.memory_decay,
               "space": "logit" if variant == "logit" else "probability"}
    curve = metricc.compile(formula).loss(from_logits=True, mode="multilabel", bins=s.bins,
                                          **options)
    return RowLoss("bce" if base.startswith("bce+") else None, curve)


class AUCMRows:
    """LibAUC's ``AUCMLoss`` for one model (``Method.per_model``), as its docs use it: on
    sigmoid scores in [0, 1]; the batch's padding (weight 0) is dropped."""

    def __init__(self, margin: float) -> None:
        from libauc.losses import AUCMLoss

        self.fn = AUCMLoss(margin=margin, device=torch.device("cpu"))

    def row_losses(self, logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        keep = w[0] > 0
        return self.fn(torch.sigmoid(logits[0][keep]), y[0][keep]).view(1)


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


def pesg_epoch(opt: Any, epoch: int, s: Settings) -> None:
    """The LibAUC trainer's ``decay_epochs``: lr / 10 and the reference point reset."""
    if epoch + 1 in {round(f * s.epochs) for f in s.pesg_decay_epochs}:
        opt.update_regularizer(decay_factor=10)


@dataclass(frozen=True)
class Method:
    """How one method trains: a factory for its loss and one for its optimiser.

    ``loss(pos_weight, s)`` gives a fresh loss with ``row_losses`` (``pos_weight``: one value
    per model it trains); ``optimizer(params, loss, s)`` the optimiser of its network.
    ``per_model``: one network, loss and optimiser per (fold, seed) model rather than one for
    all, for a loss whose state the optimiser updates (AUC-M's a, b, alpha belong to one model).
    ``on_epoch(optimizer, epoch, s)`` runs after each epoch.
    """

    name: str
    loss: Callable[[torch.Tensor, Settings], Any]
    optimizer: Callable[[list[torch.Tensor], Any, Settings], torch.optim.Optimizer] = adam
    per_model: bool = False
    on_epoch: Callable[[Any, int, Settings], None] | None = None


def method(name: str) -> Method:
    """The definition of one of ``BASELINES + OURS + LIBAUC``."""
    if name in BASELINES:
        return Method(name, lambda pw, s: RowLoss(name, pos_weight=pw))
    if name in OURS:
        return Method(name, lambda pw, s: curve_loss(name, s))
    if name in LIBAUC:
        return Method(name, lambda pw, s: AUCMRows(s.aucm_margin),
                      pesg("adam" if name.endswith(" adam") else "sgd"), per_model=True,
                      on_epoch=pesg_epoch)
    raise SystemExit(f"unknown method {name!r}")


def make_losses(names: Sequence[str], pos_weight: torch.Tensor, s: Settings) -> list[Any]:
    """The fresh loss of each name, for all ``len(pos_weight)`` models at once."""
    return [method(n).loss(pos_weight, s) for n in names]


@dataclass
class Unit:
    """One network with its loss and optimiser, training models ``folds x seeds`` (slices)."""

    method: Method
    folds: slice
    seeds: slice
    net: BatchedMLP
    loss: Any
    opt: Any


def units_of(m: Method, n_in: int, pos_weight: torch.Tensor, s: Settings) -> list[Unit]:
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
        loss = m.loss(pw[fs, ss].reshape(-1), s)
        out.append(Unit(m, fs, ss, net, loss, m.optimizer(net.params, loss, s)))
    return out


def train(X: np.ndarray, y: np.ndarray, parts: Sequence[tuple[np.ndarray, ...]], s: Settings,
          methods: Sequence[Method], pos_weight: torch.Tensor) -> np.ndarray:
    """Probabilities ``(L, F, S, n)``: ``ct.train_models``'s loop (same standardisation,
    initial weights per seed, batch order per (seed, fold)), each method with its own
    optimiser."""
    cfg = s.config()
    xall = ct.standardised(X, parts)
    yall = torch.as_tensor(y, dtype=torch.float32)
    units = [u for m in methods for u in units_of(m, X.shape[1], pos_weight, s)]
    fold_ix = torch.arange(cfg.folds).view(-1, 1, 1)
    for epoch, batches in enumerate(ct.epoch_batches(parts, cfg)):
        for idx_t, w in batches:
            for u in units:
                idx, wu = idx_t[u.folds, u.seeds], w[u.folds, u.seeds]
                logits = u.net(xall[fold_ix[u.folds], idx], wu)[0]  # (F', S', B)
                size = idx.shape[-1]
                rows = u.loss.row_losses(logits.reshape(-1, size), yall[idx].reshape(-1, size),
                                         wu.reshape(-1, size))
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


def run_dataset(name: str, s: Settings, names: Sequence[str]) -> list[dict]:
    from sklearn.metrics import average_precision_score, roc_auc_score

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
                             "auroc": float(roc_auc_score(y[te], p)),
                             "ap": float(average_precision_score(y[te], p))})
    return rows


def select(rows: list[dict], **key: object) -> list[dict]:
    """The rows matching ``key``, in (fold, seed) order, so that methods pair run by run."""
    out = [r for r in rows if all(r[k] == v for k, v in key.items())]
    return sorted(out, key=lambda r: (r["fold"], r["seed"]))


def compare(rows: list[dict], datasets: Sequence[str], methods: Sequence[str]) -> dict:
    """Per (method, metric): per-set mean and sd, and against each reference that ran
    (``REFERENCES``) the per-set mean difference, the Holm-adjusted paired p and the tallies."""
    def vals(m: str, key: str, d: str) -> np.ndarray:
        return np.array([r[key] for r in select(rows, dataset=d, method=m)])

    out: dict = {}
    for m in methods:
        for key in ("auroc", "ap"):
            v = {d: vals(m, key, d) for d in datasets}
            entry: dict = {"sets": {d: {"mean": float(v[d].mean()), "sd": float(v[d].std())}
                                    for d in datasets},
                           "mean": float(np.mean([v[d].mean() for d in datasets])), "vs": {}}
            for ref in (r for r in REFERENCES if r in methods and r != m):
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


def metric_table(cmp: dict, key: str, datasets: Sequence[str], methods: Sequence[str]) -> list[str]:
    refs = [r for r in REFERENCES if r in methods]
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


def write_report(out: Path, rows: list[dict], meta: dict) -> None:
    datasets, methods, s = meta["datasets"], meta["methods"], meta["settings"]
    cmp = compare(rows, datasets, methods)
    runs = s["folds"] * len(s["seeds"])
    lines = [
        "# Curve losses: evidence on the development sets",
        "",
        "Generated by `benchmarks/curve_evidence.py` (no hand edits). Reproduce with:",
        "",
        "```", *meta["commands"], "```",
        "",
        f"Chosen on the development sets only ({', '.join(datasets)}). Settings: "
        f"{json.dumps(s)}; MLP and optimiser as `benchmarks/constraints_tabular.py` "
        f"(hidden {list(ct.Config.hidden)}, Adam lr {ct.Config.lr}, 4 batches per epoch, "
        "the same initial weights and shuffled batches for every loss). "
        f"{runs} runs (folds x seeds) per set and loss; {meta['cpu_seconds'] / 60:.1f} min of CPU "
        "time (one thread). LibAUC: " + meta["libauc"] + ".",
        "",
        "Cells: exact test score (scikit-learn), mean ± sd over the runs; `*` (against BCE), "
        "`†` (against `bce+ap`, the README's recipe): the paired two-sided Wilcoxon signed-rank "
        "test over the runs, Holm-corrected over the sets, gives p < 0.05. *> BCE (mean)*: sets "
        "whose mean is above BCE's. Cross-entropy is AUC-consistent, so any gain over it is a "
        "finite-sample effect.",
        "",
    ]
    for key, title in (("auroc", "Test AUROC"), ("ap", "Test average precision")):
        lines += [f"## {title}", "", *metric_table(cmp, key, datasets, methods), ""]
    lines += ["## Reading", "", *reading(cmp, len(datasets)), ""]
    if any(m in methods for m in LIBAUC):
        lines += ["## LibAUC's AUC-M with PESG", "", *libauc_reading(cmp, s, len(datasets)), ""]
    (out / "curve_evidence.md").write_text("\n".join(lines), encoding="utf-8")
    (out / "curve_evidence.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def reading(cmp: dict, n_sets: int) -> list[str]:
    """The rule, stated before the run: recommend the metricc variant with the highest mean AP
    among those at least BCE's mean on both metrics and significantly worse on no set; else BCE.
    Every other method is described against BCE and the recipe, and never recommended here."""
    base = {k: cmp["bce", k]["mean"] for k in ("auroc", "ap")}
    ok = [m for m in OURS if (m, "ap") in cmp and all(
        cmp[m, k]["mean"] >= base[k] and cmp[m, k]["vs"]["bce"]["worse"] == 0
        for k in ("auroc", "ap"))]

    def line(m: str) -> str:
        parts = []
        for ref in (r for r in REFERENCES if r in cmp[m, "ap"]["vs"]):
            a, p = cmp[m, "auroc"]["vs"][ref], cmp[m, "ap"]["vs"][ref]
            parts.append(f"against {ref} mean AUROC {cmp[m, 'auroc']['mean'] - cmp[ref, 'auroc']['mean']:+.3f}, "
                         f"mean AP {cmp[m, 'ap']['mean'] - cmp[ref, 'ap']['mean']:+.3f}, significantly "
                         f"better / worse on {a['better']} / {a['worse']} sets (AUROC), "
                         f"{p['better']} / {p['worse']} (AP) of {n_sets}")
        return f"- {m}: " + "; ".join(parts)

    described = [m for m in (*OURS, *LIBAUC) if (m, "ap") in cmp]
    lines = [line(m) for m in described]
    if not ok:
        return [*lines, "", "Recommended on this evidence: **use BCE** (no metricc variant is at least "
                "BCE's mean on both metrics without a set where it is significantly worse)."]
    best = max(ok, key=lambda m: cmp[m, "ap"]["mean"])
    return [*lines, "", f"Recommended on this evidence: **{best}** (the rule: highest mean AP among "
            "the variants at least BCE's mean on both metrics and significantly worse on no set); "
            "differences this small are a tie with BCE, not a gain."]


def libauc_reading(cmp: dict, s: dict, n_sets: int) -> list[str]:
    """How AUC-M was run, and where it stands against BCE and the recipe, from the numbers."""
    out = [f"`libauc_aucm` is `AUCMLoss(margin={s['aucm_margin']})` (version v1, the class "
           "prior estimated per batch) on sigmoid scores, trained with `PESG` at its defaults "
           f"(SGD, lr {s['pesg_lr']}, {', '.join(f'{k} {v:g}' for k, v in PESG_DEFAULTS.items())}), "
           "`update_regularizer(decay_factor=10)` after "
           f"{' and '.join(f'{round(f * 100)} %' for f in s['pesg_decay_epochs'])} of the epochs; "
           "`libauc_aucm adam` the same with `PESG(mode=\"adam\")` at the harness's Adam lr. One "
           "network, loss (a, b, alpha) and PESG per fold and seed, from the same initial weights "
           "as every other loss. The batches are the harness's ordinary shuffled ones, the same as "
           "every other loss sees: LibAUC's docs recommend its `DualSampler` (positives "
           "oversampled to a fixed share of each batch), which the issue reports users dislike "
           "(it replaces their data pipeline); AUC-M may do better with it.", ""]
    for m in (x for x in LIBAUC if (x, "ap") in cmp):
        verdict = []
        for ref in (r for r in REFERENCES if r in cmp[m, "ap"]["vs"]):
            worse = {k: cmp[m, k]["vs"][ref]["worse"] for k in ("auroc", "ap")}
            better = {k: cmp[m, k]["vs"][ref]["better"] for k in ("auroc", "ap")}
            lower = all(cmp[m, k]["mean"] < cmp[ref, k]["mean"] for k in ("auroc", "ap"))
            w, b = any(worse.values()), any(better.values())
            word = ("is mixed against" if w and b else "loses to" if w else "beats" if b else
                    "is below, not significantly," if lower else "ties")
            verdict.append(f"{word} {ref} (significantly worse on {worse['auroc']} / "
                           f"{worse['ap']} of {n_sets} sets, better on {better['auroc']} / "
                           f"{better['ap']}, AUROC / AP)")
        out.append(f"- {m} " + "; it ".join(verdict) + ".")
    return out


FIELDS = ["dataset", "method", "fold", "seed", "auroc", "ap"]


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
        with (f / "curve_evidence_runs.csv").open(encoding="utf-8") as fh:
            rows += [{**r, "fold": int(r["fold"]), "seed": int(r["seed"]), "auroc": float(r["auroc"]),
                      "ap": float(r["ap"])} for r in csv.DictReader(fh)]
    if any(m["settings"] != metas[0]["settings"] or m["methods"] != metas[0]["methods"] for m in metas):
        raise SystemExit("cannot merge runs made with different settings or losses")
    meta = {**metas[0], "datasets": [d for m in metas for d in m["datasets"]],
            "commands": [c for m in metas for c in m["commands"]],
            "cpu_seconds": sum(m["cpu_seconds"] for m in metas)}
    meta["commands"].append("python benchmarks/curve_evidence.py --merge " + " ".join(map(str, folders)))
    write_outputs(out, rows, meta)
    print(f"merged {len(folders)} folders into {out / 'curve_evidence.md'}")
    return 0


def libauc_status() -> str:
    try:
        import libauc
    except ImportError:
        return "not importable in this environment, so AUC-M is not in the table"
    return (f"libauc {getattr(libauc, '__version__', '?')}, AUC-M with PESG per model, on the "
            "harness's ordinary shuffled batches (not LibAUC's DualSampler)")


def libauc_available() -> bool:
    try:
        import libauc  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 set, 2 folds, 1 seed, 3 epochs")
    ap.add_argument("--datasets", nargs="+", choices=list(DEV_DATASETS))
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--seeds", type=int, nargs="+")
    ap.add_argument("--merge", type=Path, nargs="+", help="folders of earlier runs to merge")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out)
    changes: dict = {"epochs": 3, "folds": 2, "seeds": (0,)} if args.quick else {}
    if args.epochs is not None:
        changes["epochs"] = args.epochs
    if args.seeds is not None:
        changes["seeds"] = tuple(args.seeds)
    s = Settings(**{**asdict(Settings()), **changes})
    datasets = args.datasets or list(QUICK_SETS if args.quick else DEV_DATASETS)
    methods = list(BASELINES + OURS + (LIBAUC if libauc_available() else ()))
    torch.set_num_threads(1)
    t0 = time.process_time()  # CPU time: the machine is shared, wall time would mislead
    rows: list[dict] = []
    for d in datasets:
        rows += run_dataset(d, s, methods)
        print(f"{d}: {time.process_time() - t0:.0f} s CPU", flush=True)
    command = "python benchmarks/curve_evidence.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a)
    meta = {"commands": [command.strip()], "cpu_seconds": time.process_time() - t0,
            "datasets": datasets, "methods": methods, "settings": asdict(s),
            "libauc": libauc_status(), "torch": torch.__version__}
    write_outputs(args.out, rows, meta)
    print(f"wrote {args.out / 'curve_evidence.md'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
