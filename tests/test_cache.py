"""The opt-in disk cache (metricc.analysis.cache): same results, JSON only, corrupt entries ignored."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import sympy
import torch

import metricc
import metricc.counts_metric
from metricc.analysis import cache
from metricc.library import METRICS

# 2x2 (named, with a root, a custom formula), K x K and curve metrics.
NAMES = ["f1", "mcc", "cohen_kappa", "(TP+TN)/(TP+2*FP+2*FN+TN)", "quadratic_kappa", "auroc"]


@pytest.fixture
def cache_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.setitem(cache._state, "dir", None)
    monkeypatch.setitem(cache._state, "off", False)
    cache.enable_cache(tmp_path)
    return tmp_path


def fresh(name: str) -> metricc.Metric:
    """A new Metric for ``name``, with nothing computed yet (compile's own cache bypassed)."""
    m = metricc.compile(name)
    return type(m)(m.formula, m.parameters, m.name, m.higher_is_better)


def results(m: metricc.Metric) -> dict[str, Any]:
    """Everything the cache may touch: check report (and its text), partials, kernels, loss and gradient."""
    report = m.check()
    out: dict[str, Any] = {"report": report, "text": str(report), "kernels": m.kernels_source}
    if m.statistic.name == "counts":
        out["gradient"] = m.gradient
    torch.manual_seed(0)
    if m.statistic.name == "matrix":
        x = torch.randn(16, 4, dtype=torch.float64, requires_grad=True)
        y = torch.arange(16) % 4
        loss = m.loss("linear", from_logits=True)
    else:
        x = torch.rand(32, dtype=torch.float64, requires_grad=True)
        y = (torch.arange(32) % 3 == 0).double()
        loss = m.loss()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = loss(x, y)
    value.backward()
    out["loss"], out["grad"] = value.detach(), x.grad
    return out


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize("name", NAMES)
def test_cached_compile_gives_identical_results(cache_in: Path, monkeypatch: pytest.MonkeyPatch,
                                                name: str) -> None:
    with monkeypatch.context() as off:
        off.setitem(cache._state, "off", True)
        reference = results(fresh(name))
        assert not list(cache_in.iterdir())  # off: nothing written
    first = results(fresh(name))  # computes and stores
    kinds = {p.name.split("-")[1] for p in cache_in.glob("metricc-*.json")}
    assert "check" in kinds and (metricc.compile(name).statistic.name != "counts" or "gradient" in kinds)
    m = fresh(name)
    # A hit: the check report comes from disk, not from the analysis.
    monkeypatch.setattr(type(m), "_run_check", lambda self: pytest.fail("check() recomputed"))
    monkeypatch.setattr(metricc.counts_metric, "check", lambda *a, **k: pytest.fail("check() recomputed"))
    second = results(m)
    assert_same(reference, first)
    assert_same(reference, second)


def test_corrupt_entries_are_ignored_and_rewritten(cache_in: Path) -> None:
    reference = results(fresh("mcc"))
    files = sorted(cache_in.glob("metricc-*.json"))
    assert len(files) == 2
    bad = ["{not json", json.dumps({"key": "x", "value": 1}), "",
           json.dumps({"key": json.loads(files[1].read_text())["key"],
                       "value": {"x": ["__import__", ["Symbol", "os", {}]]}})]
    for garbage in bad:
        for f in files:
            f.write_text(garbage)
        assert_same(reference, results(fresh("mcc")))
        for f in files:  # recomputed and written again, whole
            data = json.loads(f.read_text())
            assert data["key"][1] in ("check", "gradient")
            cache.decode(data["value"], fresh("mcc").expr)


def test_another_version_misses(cache_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results(fresh("f1"))
    before = set(cache_in.glob("metricc-*.json"))
    assert before
    calls = []
    real = metricc.counts_metric.check

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(metricc.counts_metric, "check", counting)
    fresh("f1").check()
    assert calls == []  # same version: a hit
    monkeypatch.setattr(cache, "code_version", lambda: "0.0.0-other")  # metricc edited or released
    fresh("f1").check()
    assert calls == [1]  # another version: computed again, stored under its own key
    assert len(set(cache_in.glob("metricc-*.json")) - before) == 2
    monkeypatch.setattr(sympy, "__version__", "0.0")
    fresh("f1").check()
    assert calls == [1, 1]  # another SymPy: a miss too
    assert cache.entry_key("check", "f1")[-2:] == ["metricc 0.0.0-other", "sympy 0.0"]


def test_off_by_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.setitem(cache._state, "dir", None)
    monkeypatch.setitem(cache._state, "off", False)
    assert cache.cache_dir() is None
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    assert cache.cache_dir() == tmp_path
    cache.disable_cache()
    assert cache.cache_dir() is None


def test_results_cut_short_are_not_stored(cache_in: Path) -> None:
    assert cache.cached("check", lambda: ("x",), lambda: (1, 2), keep=lambda r: False) == (1, 2)
    assert not list(cache_in.iterdir())
    assert cache.cached("check", lambda: ("x",), lambda: (1, 2)) == (1, 2)
    assert cache.cached("check", lambda: ("x",), lambda: pytest.fail("recomputed")) == (1, 2)
    assert cache.clear_cache() == 1 and not list(cache_in.glob("metricc-*.json"))


@pytest.mark.parametrize("tree", [
    ["__import__", ["Symbol", "os", {}]],  # a node outside the table
    ["Symbol", "x", {"__class__": True}],  # an assumption outside the table
    ["Symbol", "__import__('os').system('true')", {}],  # names are identifiers only
    ["Symbol", "lambda", {}],
    ["Integer", "1e9999"],
    ["Float", "1.0", "not a precision"],
    ["Dummy", "0"],  # a bound index with no expression to take it from
    "Add",
])
def test_decoding_refuses_what_the_table_lacks(tree: Any) -> None:
    with pytest.raises(cache.Undecodable):
        cache.decode({"x": tree})


def test_reports_decode_only_as_known_dataclasses() -> None:
    with pytest.raises(cache.Undecodable):
        cache.decode({"c": "Path", "a": {}})
    with pytest.raises(cache.Undecodable):  # a known class with a field missing
        cache.decode({"c": "Monotonicity", "a": {"count": "TP", "direction": "increasing"}})
    m = cache.decode({"c": "Monotonicity", "a": {"count": "TP", "direction": "increasing",
                                                  "method": "symbolic"}})
    assert str(m) == "increasing (symbolic)"


TP, FP, FN, TN = sympy.symbols("TP FP FN TN")
POSITIVE = sympy.Symbol("TP", positive=True)


@pytest.mark.parametrize("e", [TP / (TP + FP) + sympy.Rational(1, 3), sympy.sqrt(TP * TN) - 0.125 * FP,
                               sympy.log(POSITIVE + 1) + sympy.exp(-FN) + sympy.pi,
                               abs(TP - FP) + sympy.Min(TP, FN) + sympy.Max(FP, TN),
                               sympy.Float("0.1", 50) * TP])
def test_trees_round_trip(e: sympy.Expr) -> None:
    data = json.loads(json.dumps(cache.encode(e)))
    back = cache.decode(data)
    assert back == e and sympy.srepr(back) == sympy.srepr(e)


# --- the first loss() decides only the two moves, not the whole check() ----------------------

@pytest.mark.parametrize("name", list(METRICS))
def test_loss_warning_from_the_moves_alone_equals_the_full_check(name: str) -> None:
    from metricc.analysis.statistics import training_warning

    m = fresh(name)
    light = m._training_report()
    assert m._check is None  # the full report was not computed
    full = m.check()
    assert light.moves == full.moves and light.depends_on_predictions == full.depends_on_predictions
    for hib in (True, False):
        assert light.wrong_way(hib) == full.wrong_way(hib)
        assert training_warning(light, name, hib) == training_warning(full, name, hib)


def test_results_the_time_budget_cut_short_are_not_stored(cache_in: Path) -> None:
    from metricc.analysis.budget import limit

    m = fresh("mcc")
    with limit(0.0):  # every simplification and proof gives up at once
        cut = m.check()
        assert m.gradient["TP"] != 0
    assert cut.budget_spent
    assert not list(cache_in.glob("metricc-*.json"))
    full = fresh("mcc").check()  # a run with time proves more, and is stored
    assert not full.budget_spent and full != cut
    assert {p.name.split("-")[1] for p in cache_in.glob("metricc-*.json")} == {"check", "gradient"}
