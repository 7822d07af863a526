"""CPU time of compile + check + loss + verify on the shapes that used to hang (issues 18, 26).

    python benchmarks/bench_hardening.py            # every case, one process each
    python benchmarks/bench_hardening.py "mcc^f1"   # one formula or case name
    python benchmarks/bench_hardening.py --help     # this text and the case names

Each case runs in a fresh process (so imports and caches do not carry over) and
prints the CPU time of each stage: this process plus the analysis worker
(metricc.analysis.worker), robust to a busy machine, unlike wall time; or the
MetricError that refused it. ``*`` marks a check() whose proofs stopped at the
time budget (metricc.analysis.budget). The last lines give the slowest accepted
formula of each family, and the largest memory (resident) of either process.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's metricc, not an installed one


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


def product_chain(n: int) -> str:
    """``n`` bindings, each a product with the one before."""
    lines = ["a0 = TP/(TP+FP)"] + [f"a{i} = a{i - 1} * (TP+{i})/(n+{i})" for i in range(1, n)]
    return "\n".join([*lines, f"a{n - 1}"])


NAMED = ["f1", "mcc", "g_mean", "cohen_kappa", "balanced_accuracy", "fowlkes_mallows", "markedness",
         "informedness"]

#: Family of each case (the summary gives the slowest accepted one of each).
FAMILIES = {"fractional power": ["^0.343", "^0.2401", "^0.117649", "nested ^0.7", "sum ^0.7",
                                 "40-digit exponent", "mcc^f1"],
            "integer power": ["n^30/(n+1)^30", "^100"],
            "exp": ["exp(82.98603/(n+1)) + TN^3", "exp 20 deep"],
            "named metrics": ["f1", "(mcc - kappa)/(mcc + kappa + 3)", "min(mcc, f1, g_mean, cohen_kappa)"],
            "long sum": ["120-term sum", "170-term sum", "57 square roots", "37 abs terms", "33 log terms",
                         "57 powers ^0.7", "64 exp terms", "24 named metrics", "3,000-term sum",
                         "7,000-term sum"],
            "min/max": ["min of 400 args", "min of 6 args"],
            "binding chain": ["75-line chain", "100-line chain", "200-line chain", "15-line product chain",
                              "100-line product chain"],
            "nesting": ["log 300 deep", "log 20 deep", "1/(1+...) 400 deep"],
            "K x K": ["quadratic_kappa", "min(multiclass_mcc, quadratic_kappa)",
                      "min of three K x K metrics"],
            "curve": ["auroc", "precision_at_recall", "partial_auroc"]}

CASES = {
    "^0.343": "(TP/(TP+FP))^0.343",
    "^0.2401": "(TP/(TP+FP))^0.2401",
    "^0.117649": "(TP/(TP+FP))^0.117649",
    "nested ^0.7": "(TP/(TP+FP))^0.7^0.7",
    "sum ^0.7": "((TP/(TP+FP))^0.7 + (TP/(TP+FN))^0.7)^0.7",
    "40-digit exponent": "(TP/(TP+FP))^0.1234567890123456789012345678901234567891",
    "n^30/(n+1)^30": "(n)^30/(n+1)^30",
    "^100": "(TP/(TP+FP+1))^100",
    "exp(82.98603/(n+1)) + TN^3": "exp(82.98603/(n+1)) + TN^3",
    "(mcc - kappa)/(mcc + kappa + 3)": "(mcc - cohen_kappa)/(mcc + cohen_kappa + 3)",
    "15-line product chain": product_chain(15),
    "100-line product chain": product_chain(100),
    "f1": "f1",
    "mcc^f1": "mcc^f1",
    "min(mcc, f1, g_mean, cohen_kappa)": "min(mcc, f1, g_mean, cohen_kappa)",
    "120-term sum": long_sum(120),
    "170-term sum": long_sum(170),
    "57 square roots": " + ".join(f"sqrt(TP/(TP+FP+{i}))" for i in range(1, 58)),
    "37 abs terms": " + ".join(f"abs(TP - {i}*FP)/(TP+FN+{i})" for i in range(1, 38)),
    "33 log terms": " + ".join(f"log(TP+{i}*FN+1)*FP/(n+{i})" for i in range(1, 34)),
    "57 powers ^0.7": " + ".join(f"(TP/(TP+FP+{i}))^0.7" for i in range(1, 58)),
    "64 exp terms": " + ".join(f"exp(-FP/(TP+{i}))" for i in range(1, 65)),
    "24 named metrics": " + ".join(f"{NAMED[i % 8]}*{i + 1}/(TP+{i + 1})" for i in range(24)),
    "3,000-term sum": long_sum(3000),
    "7,000-term sum": long_sum(7000),
    "min of 400 args": wide_min(400),
    "min of 6 args": wide_min(6),
    "100-line chain": chain(100),
    "75-line chain": chain(75),
    "200-line chain": chain(200),
    "log 300 deep": "log(" * 300 + "TP+1" + ")" * 300,
    "log 20 deep": "log(" * 20 + "TP+3" + ")" * 20,
    "exp 20 deep": "exp(" * 20 + "TP/(TP+FP)" + ")" * 20,
    "1/(1+...) 400 deep": "1/(1 + " * 400 + "TP" + ")" * 400,
    "quadratic_kappa": "quadratic_kappa",
    "min(multiclass_mcc, quadratic_kappa)": "min(multiclass_mcc, quadratic_kappa)",
    "min of three K x K metrics": "min(multiclass_mcc, quadratic_kappa, linear_kappa)",
    "auroc": "auroc",
    "precision_at_recall": "precision_at_recall",
    "partial_auroc": "partial_auroc",
}


def cpu() -> float:
    """CPU seconds of this process, its reaped children and the live analysis worker."""
    from metricc.analysis.worker import worker_cpu

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + worker_cpu()


def run_one(text: str) -> str:
    import metricc
    from metricc.analysis.worker import shutdown

    warnings.simplefilter("ignore")
    out = []
    start = cpu()
    def stage(text: str) -> None:  # one line per stage: a timeout still shows the stages done
        out.append(text)
        print(f"{', '.join(out)} | so far {cpu() - start:.2f} s CPU", flush=True)

    try:
        t = cpu()
        m = metricc.compile(text)
        stage(f"compile {cpu() - t:.2f}")
        t = cpu()
        report = m.check()
        stage(f"check {cpu() - t:.2f}{'*' if getattr(report, 'budget_spent', False) else ''}")  # K x K: no budget flag
        t = cpu()
        m.loss()
        stage(f"loss {cpu() - t:.2f}")
        t = cpu()
        ok = m.verify(raise_on_failure=False).ok
        stage(f"verify {cpu() - t:.2f} ({'ok' if ok else 'FAILED'})")
    except metricc.MetricError as e:
        out.append(f"refused: {str(e).splitlines()[0][:90]}")
    total = cpu() - start
    shutdown()  # reaps the worker: its peak memory lands in RUSAGE_CHILDREN
    mb = max(resource.getrusage(r).ru_maxrss for r in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) // 1024
    return f"{', '.join(out)} | total {total:.2f} s CPU, {mb} MB"


#: Wall seconds per case (a backstop: every stage is bounded by the analysis worker).
TIMEOUT = 300


def main(argv: list[str]) -> None:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        print("cases:", ", ".join(repr(n) for n in CASES))
        return
    if len(argv) == 2 and argv[0] == "--one":
        import torch

        torch.set_num_threads(1)
        print(run_one(CASES.get(argv[1], argv[1])))
        return
    names = argv or list(CASES)
    results = {}
    for name in names:
        try:
            res = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True,
                                 text=True, timeout=TIMEOUT)
            line = (res.stdout.strip().splitlines() or [res.stderr.strip()[-200:]])[-1]
        except subprocess.TimeoutExpired as e:
            done = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            line = f"{(done.strip().splitlines() or [''])[-1]}; next stage: TIMEOUT after {TIMEOUT} s wall"
        results[name] = line
        print(f"{name[:40]:40s} {line}", flush=True)
    print("slowest accepted formula of each family (s CPU):")
    for family, members in FAMILIES.items():
        accepted = [(float(results[n].rsplit("total ", 1)[1].split()[0]), n) for n in members
                    if n in results and "refused" not in results[n] and "total " in results[n]
                    and "TIMEOUT" not in results[n]]
        if accepted:
            print(f"  {family:18s} {max(accepted)[1]!r}: {max(accepted)[0]:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
