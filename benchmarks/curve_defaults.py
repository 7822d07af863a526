#!/usr/bin/env python
"""A sweep of the curve losses' defaults on the development sets, then a held-out check.

For every named curve metric (``auroc``, ``ap`` = ``average_precision``, ``partial_auroc``,
``recall_at_precision``, ``precision_at_recall``, ``best_f1``) this trains the metric's loss
(``metricc.compile(name).loss(from_logits=True)``) over a small grid of its options and recipes,
on the development sets only (``DEV_DATASETS`` of ``examples/imbalanced_tabular.py``), with
``benchmarks/curve_evidence.py``'s training loop (``constraints_tabular.py``'s MLP, splits,
initial weights and batch order; imported, not copied). Each run is scored exactly with
``metricc.compile(name).score`` on its own metric (and checked against scikit-learn /
torchmetrics by curve_evidence's ``Scorer``); each config is compared with BCE by the paired
two-sided Wilcoxon signed-rank test over the folds x seeds of a set, Holm over the sets
(curve_evidence's ``compare``). The grid, one factor at a time around ``memory_decay=0.9``
(the setting of ``docs/curve_evidence.md``):

* the loss alone with ``memory_decay`` None (the library's default), 0.9 and 0.99;
* for the ``best()`` metrics (``recall_at_precision``, ``precision_at_recall``, ``best_f1``),
  ``tau`` 0.03 and 0.1 besides the default 0.01 (memory 0.9);
* the soft curve's grid: 64 and 1024 ``bins`` (default 256), kernel ``width`` 2 (default 1),
  ``space="logit"`` (default ``"probability"``) (memory 0.9);
* ``metricc.WarmStart`` with (warm-up, blend) shares of the training steps (0.2, 0.2) and
  (0.5, 0.3) (memory 0.9); for the ``best()`` metrics also (0.5, 0.3) with each tau;
* ``bce+``: BCE plus the metric loss, weight 1 each (memory None and 0.9).

The recipe per metric, by a rule fixed before the run: among the configs significantly worse
than BCE on no development set, the one with the highest mean of the metric over the sets; the
library's default config (alone, no memory, default tau) instead if it is eligible, within
0.005 of that mean and significantly worse than it on no set. If the recipe's mean is not above
BCE's, or it is significantly better than BCE on no set, the page says BCE is as good.

``--stage heldout`` then trains BCE and each metric's chosen recipe (read from the dev stage's
JSON), and the loss at the library's defaults, on held-out sets (``DATASETS`` not in
``DEV_DATASETS``; by default six KEEL sets drawn with ``np.random.default_rng(38)`` before this
stage ran) and reports each against BCE.

    python benchmarks/curve_defaults.py --quick --out /tmp/cd --results /tmp/cd  # seconds
    python benchmarks/curve_defaults.py --seeds 0 1          # the dev sweep
    python benchmarks/curve_defaults.py --stage heldout --seeds 0   # the held-out check

Writes ``curve_defaults_runs.csv.gz`` (one row per run: stage, set, config, metric, fold, seed,
score) and ``curve_defaults.json`` to ``--results`` (default ``benchmarks/results/``) and the
page ``curve_defaults.md`` to ``--out`` (default ``docs/``). ``--from-csv`` rewrites the page
from the kept runs.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import curve_evidence as ce  # noqa: E402  (puts examples/ on the path)
from imbalanced_tabular import DATASETS, DEV_DATASETS, KEEL_FILES  # noqa: E402

import metricc  # noqa: E402
from metricc.runtime.curve_loss import SmoothMax  # noqa: E402

CURVE_METRICS = ce.CURVE_METRICS
#: The metrics whose formula is a ``best()`` (the smooth maximum's ``tau`` acts on them).
BEST_METRICS: tuple[str, ...] = ("recall_at_precision", "precision_at_recall", "best_f1")
MEMORIES: tuple[float | None, ...] = (None, 0.9, 0.99)
TAUS: tuple[float, ...] = (0.03, 0.1)
WARMS: tuple[tuple[float, float], ...] = ((0.2, 0.2), (0.5, 0.3))
#: The soft curve's grid away from its defaults (256 bins, width 1, probability space).
GRIDS: tuple[tuple[str, Any], ...] = (("bins", 64), ("bins", 1024), ("width", 2.0),
                                      ("space", "logit"))
BASE_MEMORY = 0.9  # the factor sweeps' base, docs/curve_evidence.md's setting
#: A config within this much of the best mean (and not significantly worse) counts as as good.
NOISE = 0.005
DEFAULT_TAU = SmoothMax().tau  # the library's default, for the page
QUICK_SETS: tuple[str, ...] = ("glass0",)
#: Held-out sets drawn before the held-out stage ran: six of the KEEL sets not in DEV_DATASETS.
HELDOUT_DRAW = 38
HELDOUT_COUNT = 6
FIELDS = ["stage", "dataset", "config", "metric", "fold", "seed", "score"]


@dataclass(frozen=True)
class Recipe:
    """One config of one metric's loss: ``memory_decay``, ``tau`` (None: the default), an
    optional ``WarmStart`` (warm-up, blend) as shares of the training steps, ``bce`` added, and
    grid options (``bins``, ``width``, ``space``) away from their defaults."""

    metric: str
    memory: float | None = BASE_MEMORY
    tau: float | None = None
    warm: tuple[float, float] | None = None
    bce: bool = False
    grid: tuple[tuple[str, Any], ...] = ()  # CurveRelaxation options other than the default

    @property
    def label(self) -> str:
        parts = [f"bce+{self.metric}" if self.bce else self.metric, f"mem={self.memory}"]
        if self.tau is not None:
            parts.append(f"tau={self.tau:g}")
        if self.warm is not None:
            parts.append(f"warm={self.warm[0]:g}/{self.warm[1]:g}")
        parts += [f"{k}={v}" for k, v in self.grid]
        return " ".join(parts)

    @property
    def is_default(self) -> bool:
        """The library's defaults: the loss alone, no memory, default tau, no warm start."""
        return (self.memory is None and self.tau is None and self.warm is None and not self.bce
                and not self.grid)

    def row_loss(self, s: ce.Settings) -> ce.RowLoss:
        options: dict[str, Any] = {"memory_decay": self.memory, "bins": s.bins, **dict(self.grid)}
        if self.tau is not None:
            options["tau"] = self.tau
        curve: torch.nn.Module = metricc.compile(CURVE_METRICS[self.metric]).loss(
            from_logits=True, mode="multilabel", **options)
        if self.warm is not None:
            curve = metricc.WarmStart(curve, warmup_steps=round(self.warm[0] * s.steps()),
                                      blend_steps=round(self.warm[1] * s.steps()))
        return ce.RowLoss("bce" if self.bce else None, curve)

    def method(self) -> ce.Method:
        return ce.Method(self.label, lambda pw, d, s: self.row_loss(s))


def parse_label(label: str) -> Recipe:
    """The inverse of ``Recipe.label``."""
    head, *rest = label.split(" ")
    bce = head.startswith("bce+")
    kw: dict[str, Any] = {"metric": head[4:] if bce else head, "bce": bce}
    for part in rest:
        k, v = part.split("=")
        if k == "mem":
            kw["memory"] = None if v == "None" else float(v)
        elif k == "tau":
            kw["tau"] = float(v)
        elif k == "warm":
            a, b = v.split("/")
            kw["warm"] = (float(a), float(b))
        else:
            kw["grid"] = (*kw.get("grid", ()), (k, int(v) if k == "bins" else
                                                 float(v) if k == "width" else v))
    return Recipe(**kw)


def grid(metric: str) -> list[Recipe]:
    """The sweep of one metric, one factor at a time around ``memory_decay=0.9`` (plus the
    warm start with each tau, and BCE added to the loss at the library's defaults)."""
    out = [Recipe(metric, memory=m) for m in MEMORIES]
    if metric in BEST_METRICS:
        out += [Recipe(metric, tau=t) for t in TAUS]
    out += [Recipe(metric, grid=(g,)) for g in GRIDS]
    out += [Recipe(metric, warm=w) for w in WARMS]
    if metric in BEST_METRICS:
        out += [Recipe(metric, warm=WARMS[-1], tau=t) for t in TAUS]
    out += [Recipe(metric, bce=True, memory=None), Recipe(metric, bce=True)]
    return out


def heldout_references(metric: str) -> list[Recipe]:
    """Trained on the held-out sets beside the recipe: the loss at the library's defaults, and
    ``bce+`` at memory 0.9 (within 0.005 of BCE on the development sets in
    ``docs/curve_evidence.md``; added after the recipes' first held-out run)."""
    return [Recipe(metric, memory=None), Recipe(metric, bce=True)]


def heldout_sets() -> list[str]:
    keel = sorted(d for d in KEEL_FILES if d not in DEV_DATASETS)
    rng = np.random.default_rng(HELDOUT_DRAW)
    return sorted(str(d) for d in rng.choice(keel, HELDOUT_COUNT, replace=False))


def run_dataset(name: str, s: ce.Settings, recipes: Sequence[Recipe], scorer: ce.Scorer,
                stage: str) -> list[dict]:
    """BCE and every recipe on one set: one row per (config, metric it is scored on, run)."""
    torch.set_num_threads(1)
    X, y = DATASETS[name]()
    cfg = s.config()
    parts = ce.ct.splits(y, cfg)
    pos_weight = torch.ones(cfg.folds * len(cfg.seeds))  # no method here reads it
    methods = [ce.method("bce"), *(r.method() for r in recipes)]
    probs = ce.train(X, y, parts, s, methods, pos_weight)
    rows = []
    for li, m in enumerate(methods):
        keys = list(CURVE_METRICS) if m.name == "bce" else [parse_label(m.name).metric]
        for fi, (_, _, te) in enumerate(parts):
            for si, seed in enumerate(cfg.seeds):
                p = probs[li, fi, si, te]
                if not np.all(np.isfinite(p)):
                    raise SystemExit(f"{name}/{m.name}: non-finite test probabilities")
                scores = scorer(y[te], p, f"{name}/{m.name}/{fi}/{seed}")
                rows += [{"stage": stage, "dataset": name, "config": m.name, "metric": k,
                          "fold": fi, "seed": seed, "score": scores[k]} for k in keys]
    return rows


# --- statistics -----------------------------------------------------------------------------

def wide(rows: Sequence[dict], stage: str, metric: str) -> list[dict]:
    """curve_evidence's row format (``method``, one column per metric) for one stage/metric."""
    return [{"dataset": r["dataset"], "method": r["config"], "fold": r["fold"],
             "seed": r["seed"], metric: r["score"]}
            for r in rows if r["stage"] == stage and r["metric"] == metric]


def compare_metric(rows: Sequence[dict], stage: str, metric: str, datasets: Sequence[str],
                   configs: Sequence[str], refs: Sequence[str] = ("bce",)) -> dict:
    return ce.compare(wide(rows, stage, metric), datasets, ["bce", *configs], [metric], refs)


def choose(cmp: dict, metric: str, configs: Sequence[str]) -> str:
    """The rule of the module docstring: the best eligible mean, or the default within noise."""
    def worse(c: str) -> int:
        return int(cmp[c, metric]["vs"]["bce"]["worse"])

    eligible = [c for c in configs if worse(c) == 0] or list(configs)
    best = max(eligible, key=lambda c: cmp[c, metric]["mean"])
    default = next((c for c in eligible if parse_label(c).is_default), None)
    if default is not None and cmp[best, metric]["mean"] - cmp[default, metric]["mean"] <= NOISE:
        return default
    return best


def default_vs_best(rows: Sequence[dict], metric: str, datasets: Sequence[str], default: str,
                    best: str) -> dict:
    """``best`` against ``default`` paired (used for the tie rule's significance)."""
    c = ce.compare(wide(rows, "dev", metric), datasets, [default, best], [metric], (default,))
    return c[best, metric]["vs"][default]


def choose_all(rows: Sequence[dict], datasets: Sequence[str]) -> dict[str, dict]:
    out = {}
    for metric in CURVE_METRICS:
        configs = [r.label for r in grid(metric)]
        cmp = compare_metric(rows, "dev", metric, datasets, configs)
        chosen = choose(cmp, metric, configs)
        default = next(c for c in configs if parse_label(c).is_default)
        best = max((c for c in configs if cmp[c, metric]["vs"]["bce"]["worse"] == 0),
                   key=lambda c: cmp[c, metric]["mean"], default=chosen)
        if chosen == default and best != default:  # the tie rule also needs "not sig. worse"
            if default_vs_best(rows, metric, datasets, default, best)["better"] > 0:
                chosen = best
        v = cmp[chosen, metric]["vs"]["bce"]
        out[metric] = {"recipe": chosen, "mean": cmp[chosen, metric]["mean"],
                       "bce": cmp["bce", metric]["mean"], "better": v["better"],
                       "worse": v["worse"], "bce_as_good": not (
                           cmp[chosen, metric]["mean"] > cmp["bce", metric]["mean"]
                           and v["better"] > 0)}
    return out


# --- the page -------------------------------------------------------------------------------

def _vs(cmp: dict, c: str, metric: str) -> str:
    v = cmp[c, metric]["vs"]["bce"]
    return (f"{cmp[c, metric]['mean']:.3f} ({cmp[c, metric]['mean'] - cmp['bce', metric]['mean']:+.3f};"
            f" {v['better']} / {v['worse']}; {v['higher_mean']}/{len(v['diff'])})")


def dev_section(rows: Sequence[dict], datasets: Sequence[str], chosen: dict) -> list[str]:
    lines = ["## Development sets: every config against BCE", "",
             "Cells: mean over the sets of the metric (difference from BCE's mean; sets "
             "significantly better / worse than BCE, paired Wilcoxon, Holm over the sets; sets "
             "whose mean is above BCE's). **Bold**: the recipe chosen by the rule.", ""]
    for metric in CURVE_METRICS:
        configs = [r.label for r in grid(metric)]
        cmp = compare_metric(rows, "dev", metric, datasets, configs)
        lines += [f"### {metric} (metricc `{CURVE_METRICS[metric]}`)", "",
                  "| config | " + " | ".join(datasets) + " | mean vs BCE |",
                  "|---|" + "---:|" * (len(datasets) + 1),
                  "| bce | " + " | ".join(f"{cmp['bce', metric]['sets'][d]['mean']:.3f}"
                                         for d in datasets)
                  + f" | {cmp['bce', metric]['mean']:.3f} |"]
        for c in configs:
            e = cmp[c, metric]
            p = e["vs"]["bce"]["p_holm"]
            name = f"**{c}**" if c == chosen[metric]["recipe"] else c
            lines.append(f"| {name} | " + " | ".join(
                f"{e['sets'][d]['mean']:.3f}{'*' if p[i] < 0.05 else ''}"
                for i, d in enumerate(datasets)) + f" | {_vs(cmp, c, metric)} |")
        lines.append("")
    return [*lines, "`*`: significantly different from BCE on that set (Holm p < 0.05).", ""]


def factor_pairs() -> list[tuple[str, Recipe, Recipe]]:
    """``(option=value, default config, alternative)`` for every library default swept."""
    pairs: list[tuple[str, Recipe, Recipe]] = []
    for metric in CURVE_METRICS:
        pairs += [(f"memory_decay={m}", Recipe(metric, memory=None), Recipe(metric, memory=m))
                  for m in MEMORIES[1:]]
        if metric in BEST_METRICS:
            pairs += [(f"tau={t:g}", Recipe(metric), Recipe(metric, tau=t)) for t in TAUS]
        pairs += [(f"{g[0]}={g[1]}", Recipe(metric), Recipe(metric, grid=(g,))) for g in GRIDS]
    return pairs


def factor_section(rows: Sequence[dict], datasets: Sequence[str]) -> list[str]:
    """Each library default against its alternatives, paired, on every metric it acts on, and
    the rule's verdict on changing it."""
    lines = ["## The library's defaults against the alternatives", "",
             "Each alternative against the default it would replace, paired run by run on the "
             "metric's own score: mean difference over the sets, and the sets where it is "
             "significantly better / worse (Wilcoxon, Holm over the sets). `memory_decay` is "
             "compared with the library's None, the other options at memory 0.9.", "",
             "| alternative | metric | default config | alternative − default | sig. better / "
             "worse |", "|---|---|---|---:|---:|"]
    tally: dict[str, list[tuple[float, int, int]]] = {}
    for option, base, alt in factor_pairs():
        c = ce.compare(wide(rows, "dev", base.metric), datasets, [base.label, alt.label],
                       [base.metric], (base.label,))
        v = c[alt.label, base.metric]["vs"][base.label]
        d = c[alt.label, base.metric]["mean"] - c[base.label, base.metric]["mean"]
        tally.setdefault(option, []).append((d, v["better"], v["worse"]))
        lines.append(f"| {option} | {base.metric} | `{base.label}` | {d:+.3f} | "
                     f"{v['better']} / {v['worse']} |")
    lines += ["", "Rule, set before the results were read: a default changes only if the alternative has the "
              "higher mean on every metric it acts on, is significantly better on at least one "
              "set and significantly worse on none.", "",
              "| alternative | metrics with a higher mean | sig. better / worse sets (all metrics) "
              "| change the default? |", "|---|---:|---:|---|"]
    for option, t in tally.items():
        up, better, worse = sum(d > 0 for d, _, _ in t), sum(b for _, b, _ in t), \
            sum(w for _, _, w in t)
        change = up == len(t) and better > 0 and worse == 0
        lines.append(f"| {option} | {up}/{len(t)} | {better} / {worse} | "
                     f"{'**yes**' if change else 'no'} |")
    return [*lines, ""]


def summary_section(chosen: dict) -> list[str]:
    lines = ["## Summary: the recipe per metric", "",
             "| metric | recipe (dev) | recipe mean | BCE mean | difference | sig. better / "
             "worse sets | verdict |", "|---|---|---:|---:|---:|---:|---|"]
    for metric, c in chosen.items():
        d = c["mean"] - c["bce"]
        verdict = ("the recipe beats BCE (a small gain)" if not c["bce_as_good"] else
                   "BCE is better on average" if d < 0 else
                   "no significant gain: BCE is as good")
        lines.append(f"| {metric} | `{c['recipe']}` | {c['mean']:.3f} | {c['bce']:.3f} | "
                     f"{c['mean'] - c['bce']:+.3f} | {c['better']} / {c['worse']} | {verdict} |")
    return [*lines, ""]


def heldout_section(rows: Sequence[dict], chosen: dict, meta: dict) -> list[str]:
    sets = meta.get("heldout", {}).get("datasets", [])
    if not sets:
        return ["## Held-out sets", "", "Not run yet (`--stage heldout`).", ""]
    h = meta["heldout"]
    lines = ["## Held-out sets: the recipe against BCE", "",
             f"Sets {', '.join(sets)} (not development sets; drawn with "
             f"`np.random.default_rng({HELDOUT_DRAW})` from the held-out KEEL sets before this "
             f"stage ran); {h['settings']['folds']} folds x {len(h['settings']['seeds'])} "
             f"seed(s), {h['settings']['epochs']} epochs; {h['cpu_seconds'] / 60:.1f} min CPU.",
             "", "| metric | recipe | " + " | ".join(sets) + " | mean | BCE mean | difference |"
             " sig. better / worse | sets above BCE |",
             "|---|---|" + "---:|" * (len(sets) + 5)]
    for metric, c in chosen.items():
        configs = list(dict.fromkeys([c["recipe"], *(x.label for x in heldout_references(metric))]))
        if not all(any(r["stage"] == "heldout" and r["config"] == k for r in rows)
                   for k in configs):
            continue
        cmp = compare_metric(rows, "heldout", metric, sets, configs)
        for k in configs:
            lines.append(_heldout_row(cmp, metric, k, sets, k == c["recipe"]))
    return [*lines, "", "Cells: the config's mean (difference from BCE's); `*`: Holm p < 0.05. "
            "Beside each recipe: the loss at the library's defaults (`mem=None`, alone) and, as a "
            "reference, `bce+` at memory 0.9, added after the recipes' first held-out run "
            "(chosen by no rule: it tied BCE on the development sets).", ""]


def _heldout_row(cmp: dict, metric: str, config: str, sets: Sequence[str], recipe: bool) -> str:
    e, b = cmp[config, metric], cmp["bce", metric]
    v = e["vs"]["bce"]
    kind = "recipe" if recipe else "default" if parse_label(config).is_default else "reference"
    name = f"`{config}` ({kind})"
    return (f"| {metric} | {name} | " + " | ".join(
            f"{e['sets'][d]['mean']:.3f} ({e['sets'][d]['mean'] - b['sets'][d]['mean']:+.3f})"
            f"{'*' if v['p_holm'][i] < 0.05 else ''}" for i, d in enumerate(sets))
            + f" | {e['mean']:.3f} | {b['mean']:.3f} | {e['mean'] - b['mean']:+.3f} | "
            f"{v['better']} / {v['worse']} | {v['higher_mean']}/{len(sets)} |")


def write_page(out: Path, rows: Sequence[dict], meta: dict) -> str:
    dev = meta["dev"]
    datasets, s = dev["datasets"], dev["settings"]
    chosen = meta["chosen"]
    lines = [
        "# Curve losses: defaults and recipes chosen on the development sets",
        "",
        "Generated by `benchmarks/curve_defaults.py` (no hand edits). Reproduce with:",
        "",
        "```", *dev["commands"], *meta.get("heldout", {}).get("commands", []), "```",
        "",
        f"Development sets only ({', '.join(datasets)}) for every choice. Harness: "
        "`benchmarks/curve_evidence.py`'s loop (MLP hidden "
        f"{list(ce.ct.Config.hidden)}, Adam lr {ce.ct.Config.lr}, 4 batches per epoch, the same "
        "initial weights and batches for every loss); "
        f"{s['folds']} folds x {len(s['seeds'])} seed(s) = {s['folds'] * len(s['seeds'])} "
        f"paired runs per set and config, {s['epochs']} epochs, {s['bins']} bins; "
        f"{dev['cpu_seconds'] / 60:.1f} min of CPU time (one thread)."
        + ("" if len(s["seeds"]) >= 3 else " **Reduced seeds** (the CPU is shared): "
           f"{len(s['seeds'])} instead of the evidence run's 3."),
        "",
        "Each score is exact: `metricc.compile(name).score` on the test fold (checked against "
        "scikit-learn / torchmetrics, largest difference "
        f"{max(dev['score_check'].values()):.1e}). Configs (one factor at a time around "
        f"`memory_decay={BASE_MEMORY}`): `mem=` the loss's `memory_decay` (None is the library "
        "default), `tau=` the smooth maximum's temperature of the `best()` metrics (default "
        f"{DEFAULT_TAU}), `warm=a/b` `metricc.WarmStart` with BCE for a share a of the training "
        "steps and a linear blend over a share b, `bce+` BCE plus the metric loss (weight 1).",
        "",
        "Rule, fixed before the run: the recipe of a metric is the config with the highest mean "
        "over the development sets among those significantly worse than BCE on no set; the "
        f"library default (alone, `mem=None`) instead if it is eligible, within {NOISE} of that "
        "mean and significantly worse than it on no set. Where the recipe's mean is not above "
        "BCE's or it is significantly better than BCE on no set, the verdict says BCE is as "
        "good or better.",
        "",
        *summary_section(chosen),
        *heldout_section(rows, chosen, meta),
        *factor_section(rows, datasets),
        *dev_section(rows, datasets, chosen),
    ]
    text = "\n".join(lines)
    out.mkdir(parents=True, exist_ok=True)
    (out / "curve_defaults.md").write_text(text, encoding="utf-8")
    return text


# --- files ----------------------------------------------------------------------------------

def read_runs(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
        return [{**r, "fold": int(r["fold"]), "seed": int(r["seed"]), "score": float(r["score"])}
                for r in csv.DictReader(fh)]


def write_runs(path: Path, rows: Sequence[dict]) -> None:
    """The runs as gzipped CSV (about 7,600 rows for the full sweep); ``mtime=0`` keeps the
    file's bytes a function of its rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows({**r, "score": f"{r['score']:.6f}"} for r in rows)
    path.write_bytes(gzip.compress(text.getvalue().encode("utf-8"), mtime=0))


def main(argv: Sequence[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 set, 2 folds, 1 seed, 3 epochs")
    ap.add_argument("--stage", choices=("dev", "heldout"), default="dev")
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS))
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--folds", type=int)
    ap.add_argument("--seeds", type=int, nargs="+")
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--from-csv", action="store_true", help="rewrite the page from the kept runs")
    args = ap.parse_args(argv)
    runs_path = args.results / "curve_defaults_runs.csv.gz"
    meta_path = args.results / "curve_defaults.json"
    rows = read_runs(runs_path)
    meta: dict = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.exists() else {}
    if args.from_csv:
        return write_page(args.out, rows, meta)
    s = replace(ce.Settings(), memory_decay=BASE_MEMORY, **ce.settings_changes(args))
    if args.stage == "dev":
        datasets = [d for d in (args.datasets or (QUICK_SETS if args.quick else DEV_DATASETS))]
        if any(d not in DEV_DATASETS for d in datasets):
            raise SystemExit("the dev stage runs on DEV_DATASETS only")
        recipes = [r for m in CURVE_METRICS for r in grid(m)]
    else:
        if "chosen" not in meta:
            raise SystemExit("run the dev stage first: the held-out stage trains its recipes")
        datasets = list(args.datasets or (heldout_sets()[:1] if args.quick else heldout_sets()))
        if any(d in DEV_DATASETS for d in datasets):
            raise SystemExit("the held-out stage runs on sets outside DEV_DATASETS only")
        recipes = list(dict.fromkeys([*(parse_label(c["recipe"]) for c in meta["chosen"].values()),
                                      *(x for m in CURVE_METRICS for x in heldout_references(m))]))
    torch.set_num_threads(1)
    t0 = time.process_time()  # CPU time: the machine is shared, wall time would mislead
    scorer = ce.Scorer()
    new: list[dict] = []
    for d in datasets:
        new += run_dataset(d, s, recipes, scorer, args.stage)
        print(f"{args.stage} {d}: {time.process_time() - t0:.0f} s CPU", flush=True)
    command = "python benchmarks/curve_defaults.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a)
    info = {"commands": [command.strip()], "cpu_seconds": time.process_time() - t0,
            "datasets": datasets, "settings": asdict(s), "score_check": scorer.worst,
            "torch": torch.__version__}
    if args.stage == "dev":
        rows, meta = new, {"dev": info}  # a new sweep drops the earlier runs and choices
        meta["chosen"] = choose_all(rows, datasets)
    else:
        rows = [r for r in rows if r["stage"] == "dev"] + new
        meta["heldout"] = info
    write_runs(runs_path, rows)
    meta_path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    text = write_page(args.out, rows, meta)
    print(f"wrote {args.out / 'curve_defaults.md'}, {runs_path}")
    return text


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
    raise SystemExit(0)
