"""Threads and process state (issue 36, point 5): verify()/compile()/check() from several
threads at once give the single-threaded answers, a failure is never kept for the process,
and the analysis worker survives the thread that started it (no SIGPIPE death)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mpmath
import pytest

import metricc
from metricc.analysis import worker
from metricc.verify import relaxations

ROOT = Path(__file__).resolve().parents[1]
FORMULAS = ["2*TP/(2*TP+FP+FN)", "TP/(TP+FP)", "TP/(TP+FN)", "(TP+TN)/(TP+FP+FN+TN)"]


@pytest.fixture
def no_kept_class_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The class-wise relaxation checks not yet run in this process (they are kept once passed)."""
    if hasattr(relaxations, "_PASSED"):
        monkeypatch.setattr(relaxations, "_PASSED", {})
    else:  # the starting commit's lru_cache
        relaxations._class_checks.cache_clear()  # type: ignore[attr-defined]


def in_threads(jobs: list[Callable[[], Any]], timeout: float = 600.0) -> list[Any]:
    """Run ``jobs`` at once, one thread each; their results, or the exceptions they raised."""
    out: list[Any] = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = jobs[i]()
        except BaseException as e:  # reported by the test
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a thread hung"
    return out


def fresh(formula: str) -> metricc.Metric:
    """A new Metric (compile's own cache bypassed), nothing computed yet."""
    m = metricc.compile(formula)
    return type(m)(m.formula, m.parameters, m.name, m.higher_is_better)


def outcome(report: Any) -> list[tuple[str, bool]]:
    return [(c.name, c.ok) for c in report.checks]


def test_verify_from_four_threads_gives_the_single_threaded_answers(no_kept_class_checks: None) -> None:
    filters, dps = list(warnings.filters), mpmath.mp.dps
    got = in_threads([functools.partial(lambda f: fresh(f).verify(), f) for f in FORMULAS])
    for formula, report in zip(FORMULAS, got, strict=True):
        assert not isinstance(report, BaseException), f"{formula}: {report}"
        assert report.ok
    # nothing of the process changed: mpmath's precision, the warning filters
    assert mpmath.mp.dps == dps
    assert warnings.filters == filters
    # and the same checks, with the same verdicts, as one thread at a time
    for formula, report in zip(FORMULAS, got, strict=True):
        assert outcome(fresh(formula).verify()) == outcome(report)


def test_a_failed_verify_is_not_kept_for_the_process(no_kept_class_checks: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real = relaxations.symbolic_equal
    monkeypatch.setattr(relaxations, "symbolic_equal", lambda *a, **k: (False, "differs", None))
    with pytest.raises(metricc.VerificationError, match="softmax backward"):
        fresh("TP/(TP+FP)").verify(numeric=False)
    monkeypatch.setattr(relaxations, "symbolic_equal", real)
    report = fresh("TP/(TP+FP)").verify(numeric=False)  # computed again, not the kept failure
    assert report.ok
    assert any(c.name.startswith("softmax backward") and c.ok for c in report.checks)


def test_compile_and_check_from_threads_give_the_single_threaded_answers() -> None:
    # functions (log, exp, sqrt of a power) send the analysis through the worker
    formulas = ["log(1 + TP/(TP+FP))", "exp(-FP/(TP+FP+FN))", "(TP/(TP+FN))^0.37",
                "sqrt(TP*TN/((TP+FP)*(TN+FN)))"]

    def job(f: str) -> tuple[str, dict[str, Any]]:
        m = metricc.compile(f)
        m = type(m)(m.formula, m.parameters, m.name, m.higher_is_better)
        return str(m.check()), {k: str(v) for k, v in m.gradient.items()}

    got = in_threads([functools.partial(job, f) for f in formulas])
    for f, result in zip(formulas, got, strict=True):
        assert not isinstance(result, BaseException), f"{f}: {result!r}"
        assert result == job(f)


def run_script(code: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("METRICC_ANALYSIS_WORKER", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.skipif(not worker.AVAILABLE, reason="the analysis worker needs fork (Linux)")
def test_worker_outlives_the_thread_that_started_it_with_default_sigpipe() -> None:
    result = run_script("""
        import os, signal, threading, time
        import sympy
        import metricc
        from metricc.analysis import budget, worker
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as a shell pipeline's programs have it

        def first():
            metricc.compile("log(1 + TP/(TP+FP))").check()

        t = threading.Thread(target=first)
        t.start()
        t.join()
        started = worker.worker_pid()
        assert started is not None, "the check did not use the worker"
        time.sleep(0.5)  # PR_SET_PDEATHSIG would have killed it by now
        m = metricc.compile("exp(-FP/(TP+FP+FN))")
        print("check", m.check().monotonicity["TP"].direction, flush=True)
        print("same worker", worker.worker_pid() == started, flush=True)
        # a worker killed from outside between calls: replaced, not a SIGPIPE death
        os.kill(worker.worker_pid(), signal.SIGKILL)
        time.sleep(0.2)
        x = sympy.Symbol("x")
        print("factor", budget.bounded(sympy.factor, x**2 - 1, seconds=5.0), flush=True)
        print("restarted", worker.worker_pid() not in (None, started), flush=True)
    """)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-3000:])
    assert result.stdout.split("\n")[:4] == ["check increasing", "same worker True",
                                             "factor (x - 1)*(x + 1)", "restarted True"]
