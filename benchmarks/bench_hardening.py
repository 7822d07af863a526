"""CPU time of compile + check + loss + verify on the shapes that used to hang (issue 18).

    python benchmarks/bench_hardening.py            # every case, one process each
    python benchmarks/bench_hardening.py "mcc^f1"   # one formula or case name

Each case runs in a fresh process (so imports and caches do not carry over) and
prints the CPU time of each stage (``time.process_time``: robust to a busy
machine, unlike wall time), or the MetricError that refused it. ``*`` marks a
check() whose proofs stopped at the time budget (metricc.analysis.budget).
"""

from __future__ import annotations

import subprocess
import sys
import time
import warnings


def long_sum(n: int) -> str:
    """A sum of ``n`` terms (tests/test_hardening.py uses these shapes too)."""
    return " + ".join(f"{i}*TP" if i % 2 else f"TP/(FP+{i})" for i in range(n))


def chain(n: int) -> str:
    """``n`` bindings, each using the one before."""
    lines = ["a0 = TP/(TP+FP)"] + [f"a{i} = a{i - 1} + TP/(TP+FN+{i})" for i in range(1, n)]
    return "\n".join([*lines, f"a{n - 1}"])


def wide_min(n: int) -> str:
    """``min`` of ``n`` arguments."""
    return "min(" + ", ".join(f"TP/(TP+{i}*FP+1)" for i in range(n)) + ")"


CASES = {
    "f1": "f1",
    "mcc^f1": "mcc^f1",
    "min(mcc, f1, g_mean, cohen_kappa)": "min(mcc, f1, g_mean, cohen_kappa)",
    "3,000-term sum": long_sum(3000),
    "7,000-term sum": long_sum(7000),
    "min of 400 args": wide_min(400),
    "min of 6 args": wide_min(6),
    "100-line chain": chain(100),
    "200-line chain": chain(200),
    "log 300 deep": "log(" * 300 + "TP+1" + ")" * 300,
    "log 20 deep": "log(" * 20 + "TP+3" + ")" * 20,
    "exp 20 deep": "exp(" * 20 + "TP/(TP+FP)" + ")" * 20,
    "1/(1+...) 400 deep": "1/(1 + " * 400 + "TP" + ")" * 400,
}


def run_one(text: str) -> str:
    import metricc

    warnings.simplefilter("ignore")
    out = []
    start = time.process_time()
    try:
        t = time.process_time()
        m = metricc.compile(text)
        out.append(f"compile {time.process_time() - t:.2f}")
        t = time.process_time()
        report = m.check()
        out.append(f"check {time.process_time() - t:.2f}{'*' if report.budget_spent else ''}")
        t = time.process_time()
        m.loss()
        out.append(f"loss {time.process_time() - t:.2f}")
        t = time.process_time()
        ok = m.verify(raise_on_failure=False).ok
        out.append(f"verify {time.process_time() - t:.2f} ({'ok' if ok else 'FAILED'})")
    except metricc.MetricError as e:
        out.append(f"refused: {str(e).splitlines()[0][:90]}")
    return f"{', '.join(out)} | total {time.process_time() - start:.2f} s CPU"


def main(argv: list[str]) -> None:
    if len(argv) == 2 and argv[0] == "--one":
        import torch

        torch.set_num_threads(1)
        print(run_one(CASES.get(argv[1], argv[1])))
        return
    names = argv or list(CASES)
    for name in names:
        res = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True,
                             text=True, timeout=600)
        line = (res.stdout.strip().splitlines() or [res.stderr.strip()[-200:]])[-1]
        print(f"{name[:40]:40s} {line}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
