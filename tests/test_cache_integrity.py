"""The disk cache does not trust its files (issue 36, point 6): an entry edited by hand, of the
wrong type, a FIFO, a link to a device or crafted huge numbers is never served and never
hangs the reader; the result is computed again. Each attack runs under a timeout guard."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sympy

import metricc
from metricc.analysis import cache

ROOT = Path(__file__).resolve().parents[1]
GUARD_SECONDS = 30.0


@pytest.fixture
def cache_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.setitem(cache._state, "dir", None)
    monkeypatch.setitem(cache._state, "off", False)
    folder = tmp_path / "cache"
    cache.enable_cache(folder)
    return folder


def guarded(fn: Callable[[], Any], unblock: Callable[[], None] = lambda: None) -> Any:
    """``fn()`` in a thread that must finish within GUARD_SECONDS (``unblock`` frees a hung one)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as e:  # reported below
            out.append(("raised", e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(GUARD_SECONDS)
    if t.is_alive():
        unblock()
        pytest.fail(f"the cache reader hung for {GUARD_SECONDS:.0f} s")
    status, value = out[0]
    if status == "raised":
        raise value
    return value


def fresh(name: str) -> metricc.Metric:
    m = metricc.compile(name)
    return type(m)(m.formula, m.parameters, m.name, m.higher_is_better)


def entry(folder: Path, kind: str) -> Path:
    (path,) = folder.glob(f"metricc-{kind}-*.json")
    return path


def sha256(key: list[str], value: Any) -> str:
    """The digest of an entry's content, computed here independently of the package."""
    text = json.dumps([key, value], sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def rewrite(path: Path, value: Any, *, digest: str = "same") -> None:
    """Replace the value of the entry at ``path``: ``digest`` "same" keeps the stored digest
    (an edit by hand), "valid" writes the digest of the new content."""
    data = json.loads(path.read_text())
    data["value"] = value
    if digest == "valid":
        data["sha256"] = sha256(data["key"], value)
    path.write_text(json.dumps(data))


def test_a_negated_partial_edited_by_hand_is_not_served(cache_in: Path) -> None:
    truth = fresh("f1").gradient
    path = entry(cache_in, "gradient")
    partials, simplified = cache.decode(json.loads(path.read_text())["value"])
    rewrite(path, cache.encode(({k: -v for k, v in partials.items()}, simplified)))
    assert guarded(lambda: fresh("f1").gradient) == truth
    assert guarded(lambda: fresh("f1").gradient) == truth  # rewritten: a hit now


def test_a_flipped_verdict_does_not_hide_the_wrong_way_warning(cache_in: Path) -> None:
    def warned() -> list[str]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            fresh("FP/(TP+FP)").loss()
        return [str(w.message) for w in seen if issubclass(w.category, metricc.MetricWarning)]

    first = warned()
    assert first and "FP/(TP+FP)" in first[0]
    path = entry(cache_in, "moves")
    flip = {"increasing": "decreasing", "decreasing": "increasing"}
    text = json.dumps(json.loads(path.read_text())["value"])
    for a, b in flip.items():
        text = text.replace(f'"{a}"', f'"@{b}"')
    rewrite(path, json.loads(text.replace('"@', '"')))
    assert guarded(warned) == first


@pytest.mark.parametrize("value", [
    {"c": "Monotonicity", "a": {"count": "TP", "direction": "increasing", "method": "symbolic"}},
    {"l": []},
    "a string",
    {"c": "MovesReport", "a": {"moves": {"d": []}, "higher_is_better": None, "budget_spent": False}},
])
def test_an_entry_of_the_wrong_type_is_recomputed(cache_in: Path, value: Any) -> None:
    truth = fresh("mcc").check()
    path = entry(cache_in, "check")
    rewrite(path, value, digest="valid")  # a consistent entry, of the wrong type
    assert str(guarded(lambda: fresh("mcc").check())) == str(truth)
    assert guarded(lambda: fresh("mcc").check()) == truth


def test_a_wrong_type_inside_a_report_is_recomputed(cache_in: Path) -> None:
    truth = fresh("mcc").check()
    path = entry(cache_in, "check")
    value = json.loads(path.read_text())["value"]
    value["a"]["sampled_range"] = {"t": ["low", "high"]}  # tuple[float, float] | None
    rewrite(path, value, digest="valid")
    assert guarded(lambda: fresh("mcc").check()) == truth


def test_a_fifo_is_not_read(cache_in: Path) -> None:
    truth = fresh("f1").check()
    path = entry(cache_in, "check")
    path.unlink()
    os.mkfifo(path)

    def unblock() -> None:  # a writer lets a blocked open() return
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)

    assert guarded(lambda: fresh("f1").check(), unblock) == truth
    assert path.is_file() and not path.is_symlink()  # rewritten as a regular file


def test_a_link_to_a_device_is_not_followed(tmp_path: Path) -> None:
    # In a child under a memory limit: reading /dev/zero to its end ends in MemoryError.
    code = f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, resource.RLIM_INFINITY))
        from pathlib import Path
        from metricc.analysis import cache
        folder = Path({str(tmp_path)!r})
        cache.enable_cache(folder)
        key = cache.entry_key("check", "x")
        path = cache._path(folder, key)
        path.symlink_to("/dev/zero")
        print(cache.cached("check", lambda: ("x",), lambda: "computed"))
        print(path.is_symlink())
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=120, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["computed", "False"]


def test_a_million_digit_number_does_not_hang_the_reader(cache_in: Path) -> None:
    truth = fresh("f1").check()
    path = entry(cache_in, "check")
    value = json.loads(path.read_text())["value"]
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # a program that turned Python's own guard off
    try:
        for bad in ({"i": "7" * 1_000_000}, {"x": ["Integer", "7" * 1_000_000]}):
            value["a"]["sampled_range"] = {"t": [bad, {"f": "1.0"}]}
            rewrite(path, value, digest="valid")
            assert guarded(lambda: fresh("f1").check()) == truth
        # a bare JSON number of a million digits
        path.write_text(path.read_text().replace('{"i": "7', '7').replace('7"}', "7"))
        assert guarded(lambda: fresh("f1").check()) == truth
    finally:
        sys.set_int_max_str_digits(limit)


@pytest.mark.parametrize("tree", [
    ["Pow", ["Integer", "2"], ["Integer", "1" + "0" * 3999]],  # one node, a hang to evaluate
    ["Float", "1.5", "100000000"],  # a precision of 10**8 bits
    ["Integer", "1" * 5000],
    ["Float", "1.5e" + "9" * 4000, "53"],
])
def test_numbers_past_the_bounds_do_not_decode(tree: Any) -> None:
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        with pytest.raises(cache.Undecodable):
            guarded(lambda: cache.decode({"x": tree}))
    finally:
        sys.set_int_max_str_digits(limit)


def test_an_oversized_entry_is_not_read(cache_in: Path) -> None:
    truth = fresh("f1").check()
    path = entry(cache_in, "check")
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data) + " " * (64 << 20))  # valid JSON, 64 MiB of padding
    assert guarded(lambda: fresh("f1").check()) == truth
    assert path.stat().st_size < 1 << 20  # rewritten


def test_the_cache_folder_expands_the_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    monkeypatch.setitem(cache._state, "dir", None)
    monkeypatch.setitem(cache._state, "off", False)
    monkeypatch.setenv(cache.ENV, "~/x")
    assert cache.cache_dir() == home / "x"
    assert cache.cached("check", lambda: ("k",), lambda: (1, 2)) == (1, 2)
    assert list((home / "x").glob("metricc-check-*.json"))
    assert cache.enable_cache("~/y") == home / "y"
    assert not (work / "~").exists()


def test_entries_round_trip_with_their_digest(cache_in: Path) -> None:
    assert cache.cached("check", lambda: ("k",), lambda: {"a": sympy.Rational(1, 3)}) == {"a": sympy.Rational(1, 3)}
    path = entry(cache_in, "check")
    data = json.loads(path.read_text())
    assert data["sha256"] == sha256(data["key"], data["value"])
    assert cache.cached("check", lambda: ("k",), lambda: pytest.fail("recomputed")) == {"a": sympy.Rational(1, 3)}
