#!/usr/bin/env python
"""Operating points on new data: precision at a recall target, with a plain or a confident threshold.

Issues 28.5 and 28.4. On the development KEEL sets, folds x seeds, targets
recall >= 0.8 and >= 0.9, with the model, splits and training of
``benchmarks/constraints_tabular.py`` (``ct.Config``, ``ct.splits``, ``ct.train_models``):

* methods (the losses): ``bce``; ``constrained``, ``metricc.compile("precision subject to
  recall >= t").loss(from_logits=True, **RECIPE)``, ``RECIPE`` the package's defaults for
  constrained losses (``CONSTRAINED_DEFAULTS``), written out;
  ``precision_at_recall``, ``metricc.compile("precision_at_recall", min_recall=t).loss(
  from_logits=True, memory_decay=0.9)``, the threshold-free curve objective at the operating
  point, and ``precision_at_recall_nomem``, the same without memory (an ablation); any other
  compiled metric with ``--metric-loss LABEL FORMULA`` (``{target}`` in the
  formula is replaced). A loss without ``row_losses`` (the curve losses) trains through
  ``PerModel``: one copy per model, called the ordinary way, ``loss(scores, target)``, on that
  model's mini-batch; a loss that does not build is skipped, and the report says why;
* threshold rules, each on the validation part of the training fold:

  - ``plain``: the highest threshold whose validation recall meets the target;
  - ``confident``: among thresholds whose recall meets the target with confidence 0.9, the
    best validation precision: the package's ``metricc.best_threshold(..., confidence=0.9)``
    (an exact one-sided Clopper-Pearson lower bound on the recall over the validation
    positives, fixed-sequence testing over thresholds);
  - ``at0.5``: the metric losses at their own decision threshold (probability 0.5), for
    reference;

* per set: the fraction of runs whose test recall meets the target, mean test recall and
  precision with standard deviations; paired Wilcoxon signed-rank tests of the precision over
  the runs of each metricc method against BCE and against the constrained loss (the
  Lagrangian) with the same rule (Holm-corrected over the sets).

    python benchmarks/operating_points.py            # the recorded run -> docs/operating_points.md
    python benchmarks/operating_points.py --quick    # smoke run (seconds), into a temporary folder
    # the same, one set per command (a shared machine), then one report:
    for d in glass0 habarman ...; do python benchmarks/operating_points.py --datasets $d --out /tmp/op/$d; done
    python benchmarks/operating_points.py --merge /tmp/op/glass0 /tmp/op/habarman ...

It writes ``operating_points.md`` (generated, no hand edits) and ``operating_points_runs.csv``
to ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import constraints_tabular as ct  # noqa: E402

import metricc  # noqa: E402
from metricc.runtime.constraint_defaults import CONSTRAINED_DEFAULTS  # noqa: E402

CONFIDENCE = 0.9
LOSS_FIELDS = ("amplifier", "memory_decay", "multiplier_lr", "penalty", "multiplier_rates")
TARGETS: tuple[float, ...] = ct.TARGETS
QUICK_SETS: tuple[str, ...] = ("glass0",)

#: The options of the constrained loss: the package's defaults (chosen by
#: benchmarks/constrained_defaults.py, docs/constrained_defaults.md), written out and
#: recorded in the report, so each run says what it trained with.
RECIPE: dict[str, Any] = {"relaxation": "anyloss", "memory_decay": 0.0, **{
    k: CONSTRAINED_DEFAULTS[k] for k in ("amplifier", "multiplier_lr", "penalty", "multiplier_rates")}}
#: The curve loss's options: memory over about 10 batches, as docs/curve_bias.md advises for
#: curve losses on small batches and as benchmarks/curve_evidence.py trains them.
CURVE_OPTIONS: dict[str, Any] = {"memory_decay": 0.9}
#: The references each metricc method's precision is paired against (same threshold rule).
REFERENCES: tuple[str, ...] = ("bce", "constrained")


# ------------------------------------------------------------------------ methods
@dataclass(frozen=True)
class Method:
    """A loss to train, one per target: ``build(target)`` gives ``"bce"`` or a metricc loss.

    ``build`` raising (e.g. a metric that does not compile yet) marks the method unavailable.
    ``per_target=False``: one model serves every target (BCE does not see the target).
    ``at_half``: the loss has a decision threshold of its own, probability 0.5 (the 2x2 losses;
    a threshold-free curve loss has none, so the ``at0.5`` rule does not apply to it).
    """

    name: str
    build: Callable[[float], ct.LossSpec]
    per_target: bool = True
    at_half: bool = True


def constrained_loss(target: float, recipe: dict[str, Any] | None = None) -> ct.LossSpec:
    opts = dict(RECIPE if recipe is None else recipe)
    relaxation = opts.pop("relaxation")
    if relaxation != "anyloss":
        opts.pop("amplifier", None)
    if not opts.get("memory_decay"):
        opts.pop("memory_decay", None)
    return ct.constrained(target).loss(relaxation, from_logits=True, **opts)


def metric_loss(formula: str, options: dict[str, Any] | None = None, **params: Any
                ) -> Callable[[float], ct.LossSpec]:
    """A method from any compiled metric: ``formula``/``params`` may contain ``{target}``;
    ``options`` go to ``loss()`` besides ``from_logits=True``."""

    def build(target: float) -> ct.LossSpec:
        text = formula.format(target=target)
        values = {k: (target if v == "{target}" else v) for k, v in params.items()}
        return metricc.compile(text, **values).loss(from_logits=True, **(options or {}))

    return build


class PerModel:
    """A loss without ``row_losses`` (a curve loss) in the batched harness.

    ``ct.train_models`` asks for one loss per model (``row_losses``); this keeps one copy of
    the loss per model, made on the first call, so that each model's state (a curve loss's
    memory) is its own, and calls each the ordinary way, ``loss(scores, target)``, on that
    model's mini-batch with the padding (weight 0) dropped.
    """

    def __init__(self, loss: torch.nn.Module) -> None:
        self.loss = loss
        self.copies: list[torch.nn.Module] = []

    def row_losses(self, logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if not self.copies:
            self.copies = [copy.deepcopy(self.loss) for _ in range(logits.shape[0])]
        keep = w > 0
        return torch.stack([fn(s[k], t[k]) for fn, s, t, k in zip(self.copies, logits, y, keep,
                                                                   strict=True)])


def trainable(loss: ct.LossSpec) -> ct.LossSpec:
    """``loss`` as ``ct.train_models`` takes it: ``"bce"``, a row loss, or a ``PerModel``."""
    return loss if loss == "bce" or hasattr(loss, "row_losses") else PerModel(loss)


def default_methods(recipe: dict[str, Any] | None = None) -> list[Method]:
    return [Method("bce", lambda t: "bce", per_target=False),
            Method("constrained", lambda t: constrained_loss(t, recipe)),
            Method("precision_at_recall", metric_loss("precision_at_recall", CURVE_OPTIONS,
                                                      min_recall="{target}"), at_half=False),
            # the ablation: the same curve loss on each batch alone (no memory)
            Method("precision_at_recall_nomem", metric_loss("precision_at_recall",
                                                            min_recall="{target}"), at_half=False)]


def available(methods: Sequence[Method]) -> tuple[list[Method], dict[str, str]]:
    """The methods whose losses build, and why each other one does not."""
    ok, skipped = [], {}
    for m in methods:
        try:
            m.build(TARGETS[0])
        except Exception as exc:
            skipped[m.name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            continue
        ok.append(m)
    return ok, skipped


# ---------------------------------------------------------------- threshold rules
def plain_threshold(p: np.ndarray, y: np.ndarray, target: float) -> tuple[float, bool]:
    """The highest threshold whose recall on ``(p, y)`` meets ``target`` (always exists)."""
    return ct.recall_threshold(p, y, target), True


def confident_threshold(p: np.ndarray, y: np.ndarray, target: float) -> tuple[float, bool]:
    """The confidence-0.9 rule: the package's ``metricc.best_threshold(..., confidence=0.9)``
    (Clopper-Pearson, fixed-sequence over thresholds; docs/constraints.md). When no threshold
    qualifies: the lowest score (every validation sample positive) and ``False``."""
    try:
        choice = metricc.best_threshold(ct.PRECISION, torch.as_tensor(p, dtype=torch.float64),
                                        torch.as_tensor(y), constraints=[f"recall >= {target}"],
                                        confidence=CONFIDENCE)
    except metricc.MetricError:  # no threshold qualifies
        return float(p.min()), False
    return float(choice.threshold), True


RULES: dict[str, Callable[[np.ndarray, np.ndarray, float], tuple[float, bool]]] = {
    "plain": plain_threshold, "confident": confident_threshold}


# --------------------------------------------------------------------------- runs
def run_dataset(name: str, cfg: ct.Config, methods: Sequence[Method]) -> list[dict]:
    from sklearn.metrics import roc_auc_score

    torch.set_num_threads(1)
    X, y = ct.DATASETS[name]()
    parts = ct.splits(y, cfg)
    slots: list[tuple[Method, float | None]] = []
    for m in methods:
        slots += [(m, t) for t in TARGETS] if m.per_target else [(m, None)]
    losses = [trainable(m.build(TARGETS[0] if t is None else t)) for m, t in slots]
    probs = ct.train_models(X, y, parts, cfg, losses)
    rows = []
    for li, (m, slot_target) in enumerate(slots):
        for target in (TARGETS if slot_target is None else (slot_target,)):
            rules = dict(RULES)
            if m.at_half and m.name != "bce":
                rules["at0.5"] = lambda p, yy, t: (0.5, True)
            for fi, (fit, val, te) in enumerate(parts):
                for si, seed in enumerate(cfg.seeds):
                    p = probs[li, fi, si]
                    # the model's ranking on the test fold: below 0.5, it ranks backwards
                    auroc = float(roc_auc_score(y[te], p[te]))
                    for rule, pick in rules.items():
                        t, qualified = pick(p[val], y[val], target)
                        prec, rec, npos = ct.scores(p[te], y[te], t)
                        rows.append({"dataset": name, "fold": fi, "seed": seed, "target": target,
                                     "method": m.name, "rule": rule, "threshold": t,
                                     "qualified": qualified, "precision": prec, "recall": rec,
                                     "met": rec >= target, "pred_pos": npos,
                                     "val_recall": ct.scores(p[val], y[val], t)[1],
                                     "fit_recall": ct.scores(p[fit], y[fit], t)[1],
                                     "test_auroc": auroc})
    return rows


# ------------------------------------------------------------------------- report
def _sel(rows: list[dict], **key: Any) -> list[dict]:
    out = [r for r in rows if all(r[k] == v for k, v in key.items())]
    return sorted(out, key=lambda r: (r["fold"], r["seed"]))


def holm(pvalues: Sequence[float]) -> list[float]:
    order = np.argsort(pvalues)
    adj, running = [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adj[i] = running
    return adj


def wilcoxon_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided paired Wilcoxon signed-rank p-value; 1 when every difference is 0."""
    from scipy.stats import wilcoxon

    d = np.asarray(a) - np.asarray(b)
    if np.all(np.abs(d) < 1e-12):
        return 1.0
    return float(wilcoxon(a, b, zero_method="zsplit").pvalue)


def versus(per: Sequence[list[dict]], base: Sequence[list[dict]]) -> dict[str, Any]:
    """Precision of one method against a reference, set by set, paired run by run."""
    prec = [np.mean([r["precision"] for r in s]) for s in per]
    bprec = [np.mean([r["precision"] for r in s]) for s in base]
    padj = holm([wilcoxon_p([r["precision"] for r in s], [r["precision"] for r in b])
                 for s, b in zip(per, base, strict=True)])
    pairs = list(zip(padj, prec, bprec, strict=True))
    return {"sets_precision_ge": int(sum(p >= b - 1e-12 for _, p, b in pairs)),
            "sets_better_p05": int(sum(a < 0.05 and p > b for a, p, b in pairs)),
            "sets_worse_p05": int(sum(a < 0.05 and p < b for a, p, b in pairs)),
            "mean_precision_diff": float(np.mean(prec) - np.mean(bprec)), "holm_p": padj}


def summarise(rows: list[dict], datasets: Sequence[str], methods: Sequence[str]) -> list[dict]:
    """One entry per (target, rule, method): means over sets, and ``versus`` each reference
    (``REFERENCES`` that ran, other than the method itself) with the same rule."""
    out = []
    for target in TARGETS:
        for rule in ("plain", "confident", "at0.5"):
            for m in methods:
                per = [_sel(rows, dataset=d, target=target, method=m, rule=rule) for d in datasets]
                if not all(per):
                    continue
                rec = [np.mean([r["recall"] for r in s]) for s in per]
                prec = [np.mean([r["precision"] for r in s]) for s in per]
                met = [r["met"] for s in per for r in s]
                entry: dict[str, Any] = {
                    "target": target, "rule": rule, "method": m,
                    "mean_recall": float(np.mean(rec)), "mean_precision": float(np.mean(prec)),
                    "met_fraction": float(np.mean(met)),
                    "sets_mean_recall_ge_target": int(sum(r >= target for r in rec)),
                    "qualified_fraction": float(np.mean([r["qualified"] for s in per for r in s])),
                    "inverted_fraction": float(np.mean([r["test_auroc"] < 0.5 for s in per
                                                        for r in s])),
                    "sets": len(datasets), "versus": {}}
                for ref in REFERENCES:
                    base = [_sel(rows, dataset=d, target=target, method=ref, rule=rule)
                            for d in datasets]
                    if ref != m and rule != "at0.5" and all(base):
                        entry["versus"][ref] = versus(per, base)
                out.append(entry)
    return out


def write_report(out: Path, rows: list[dict], meta: dict) -> None:
    datasets, methods, cfg = meta["datasets"], meta["methods"], meta["config"]
    runs = cfg["folds"] * len(cfg["seeds"])
    rule_note = "the package's `metricc.best_threshold(..., confidence=0.9)`"
    lines = [
        "# Operating points on new data: results", "",
        "Generated by `benchmarks/operating_points.py` (no hand edits). Reproduce with:", "",
        "```", meta["command"], "```", "",
        # ct.Config's loss fields belong to constraints_tabular.py; here the recipe sets them
        f"Harness: {json.dumps({k: v for k, v in cfg.items() if k not in LOSS_FIELDS})}. "
        f"Constrained-loss recipe: {json.dumps(meta['recipe'])}. "
        f"{runs} runs (folds x seeds) per set, method, rule and target; wall time "
        f"{meta['wall_seconds'] / 60:.1f} min on one CPU thread.", "",
        f"Threshold rules (picked on the validation part): **plain** = the highest threshold whose "
        f"validation recall meets the target; **confident** = {rule_note}: best validation "
        "precision among thresholds whose recall meets the target with confidence 0.9; "
        "**at0.5** = the loss's own threshold.", "",
    ]
    if meta["skipped"]:
        lines += ["Not run (the loss does not build in this version): " + "; ".join(
            f"`{k}` ({v})" for k, v in meta["skipped"].items()) + ".", ""]
    lines += ["Cells: fraction of runs with test recall >= target · mean test recall ± sd · "
              "mean test precision ± sd.", ""]
    for target in TARGETS:
        lines += [f"## Target recall >= {target}", ""]
        ran = {(x["method"], x["rule"]) for x in rows}
        cols = [(m, r) for r in ("plain", "confident", "at0.5") for m in methods if (m, r) in ran]
        lines += ["| set | " + " | ".join(f"{m} / {r}" for m, r in cols) + " |",
                  "|---|" + "---:|" * len(cols)]
        for d in datasets:
            cells = []
            for m, r in cols:
                s = _sel(rows, dataset=d, target=target, method=m, rule=r)
                rec, prec = np.array([x["recall"] for x in s]), np.array([x["precision"] for x in s])
                met = np.mean([x["met"] for x in s])
                cells.append(f"{met:.2f} · {rec.mean():.3f} ± {rec.std():.3f} · "
                             f"{prec.mean():.3f} ± {prec.std():.3f}")
            lines.append(f"| {d} | " + " | ".join(cells) + " |")
        lines.append("")
    summary = summarise(rows, datasets, methods)
    refs = [r for r in REFERENCES if r in methods]
    lines += ["## Means over the sets", "",
              "Mean recall / precision: mean over the sets of each set's mean. *met*: fraction of all "
              "runs whose test recall meets the target. *qualified*: fraction of runs where some "
              "threshold passed the rule. *inverted*: fraction of runs whose model ranks the test "
              "fold backwards (test AUROC < 0.5). *vs X*: against method X with the same rule, the "
              "difference of mean precision, the sets with mean precision >= X's, and the sets "
              "where a paired two-sided Wilcoxon signed-rank test of the precision over the runs "
              "(Holm over the sets) finds it better / worse at p < 0.05.", "",
              "| target | rule | method | test recall | met | sets recall >= target | test precision | "
              "qualified | inverted | " + " | ".join(f"vs {r}: diff, >=, better / worse"
                                                    for r in refs) + " |",
              "|---:|---|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(refs)]
    for s in summary:
        n = s["sets"]
        vs = [(f"{v['mean_precision_diff']:+.3f}, {v['sets_precision_ge']}/{n}, "
               f"{v['sets_better_p05']} / {v['sets_worse_p05']}") if (v := s["versus"].get(r))
              else "—" for r in refs]
        lines.append(f"| {s['target']} | {s['rule']} | {s['method']} | {s['mean_recall']:.3f} | "
                     f"{s['met_fraction']:.2f} | {s['sets_mean_recall_ge_target']}/{n} | "
                     f"{s['mean_precision']:.3f} | {s['qualified_fraction']:.2f} | "
                     f"{s['inverted_fraction']:.2f} | " + " | ".join(vs) + " |")
    lines.append("")
    (out / "operating_points.md").write_text("\n".join(lines), encoding="utf-8")
    (out / "operating_points_summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def write_outputs(out: Path, rows: list[dict], meta: dict) -> None:
    with (out / "operating_points_runs.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out / "operating_points_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    write_report(out, rows, meta)


def merge(folders: Sequence[Path], out: Path) -> int:
    """One report from per-set runs (each command stays short on a shared machine)."""
    rows: list[dict] = []
    metas = [json.loads((f / "operating_points_meta.json").read_text()) for f in folders]
    for f in folders:
        with (f / "operating_points_runs.csv").open(encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                for k in ("fold", "seed", "pred_pos"):
                    r[k] = int(r[k])
                for k in ("target", "threshold", "precision", "recall", "val_recall", "fit_recall",
                          "test_auroc"):
                    r[k] = float(r[k])
                r["qualified"], r["met"] = r["qualified"] == "True", r["met"] == "True"
                rows.append(r)
    first = metas[0]
    for m in metas[1:]:  # the parts must be one experiment
        assert {k: m[k] for k in ("config", "recipe", "methods")} == {
            k: first[k] for k in ("config", "recipe", "methods")}, "runs with different settings"
    first.pop("package_confidence", None)  # recorded by runs from before the stand-in went
    meta = {**first, "datasets": [d for m in metas for d in m["datasets"]],
            "wall_seconds": sum(m["wall_seconds"] for m in metas),
            "command": "\n".join([*(m["command"] for m in metas),
                                   "python benchmarks/operating_points.py --merge " + " ".join(
                                       str(f) for f in folders)])}
    out.mkdir(parents=True, exist_ok=True)
    write_outputs(out, rows, meta)
    print(f"merged {len(rows)} rows; wrote {out / 'operating_points.md'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 set, 2 folds, 1 seed, 2 epochs, into a temporary folder")
    ap.add_argument("--datasets", nargs="+", choices=list(ct.DATASETS))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--metric-loss", nargs=2, action="append", default=[], metavar=("LABEL", "FORMULA"),
                    help="another method: a compiled metric's loss; '{target}' in FORMULA is replaced")
    for key in ("amplifier", "multiplier_lr", "penalty", "memory_decay"):
        ap.add_argument(f"--{key.replace('_', '-')}", type=float, help=f"recipe {key} ({RECIPE[key]})")
    ap.add_argument("--relaxation", choices=("anyloss", "sigmoid", "linear"))
    ap.add_argument("--merge", nargs="+", type=Path, metavar="DIR",
                    help="no training: one report from the runs of earlier per-set runs' --out folders")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out or ROOT / "docs")
    recipe = {**RECIPE, **{k: v for k in (*RECIPE,) if (v := getattr(args, k, None)) is not None}}
    cfg = ct.Config()
    if args.quick:
        cfg = replace(cfg, epochs=2, folds=2, seeds=(0,))
    if args.epochs is not None:
        cfg = replace(cfg, epochs=args.epochs)
    out = args.out or (Path(tempfile.mkdtemp(prefix="operating_points_")) if args.quick
                       else ROOT / "docs")
    datasets = args.datasets or list(QUICK_SETS if args.quick else ct.DEV_SETS)
    methods, skipped = available(default_methods(recipe) + [
        Method(label, metric_loss(formula)) for label, formula in args.metric_loss])
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows: list[dict] = []
    for d in datasets:
        t1 = time.perf_counter()
        rows += run_dataset(d, cfg, methods)
        print(f"{d}: {time.perf_counter() - t1:.0f} s", flush=True)
    wall = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/operating_points.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a)
    meta = {"command": command.strip(), "wall_seconds": wall, "datasets": datasets,
            "methods": [m.name for m in methods], "skipped": skipped, "config": asdict(cfg),
            "recipe": recipe,
            "torch": torch.__version__}
    write_outputs(out, rows, meta)
    print(f"done in {wall / 60:.1f} min; wrote {out / 'operating_points.md'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
