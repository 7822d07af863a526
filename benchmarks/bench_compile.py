"""How long ``import metricc`` and ``metricc.compile`` take, cold and cached.

Run from a checkout (``--quick`` is the smoke run the tests use)::

    python benchmarks/bench_compile.py              # the recorded run (docs/performance.md)
    python benchmarks/bench_compile.py --quick

* ``import metricc``: wall time of the import in a fresh interpreter (torch not yet
  imported), median over the fresh processes of the run; ``import torch`` alone, for scale.
* cold ``compile``: in a fresh process, after ``import metricc`` (and ``import torch``, which
  a training script has anyway), the first ``metricc.compile(name)`` for one named metric:
  parsing (including building the Lark parser), simplification, checks. Median over
  ``--repeats`` fresh processes per metric.
* ``.gradient``: then the simplified partial derivatives (what ``metricc grad`` prints),
  computed only when asked for.
* cold ``.loss()``: then the first ``m.loss()``, timed by stage as it runs: ``warning``
  (the verdicts along the two moves behind its wrong-way warning, with the simplified
  partials they need), ``emit`` (the kernel source: guard, derivatives, common
  subexpressions), ``exec`` (the loss class from that source) and ``module`` (option
  checks, the instance); ``.loss() total`` is their sum and ``loss CPU`` its CPU time.
* then ``.gradient`` (the simplified partials, what ``metricc grad`` prints: computed by
  the warning already, or read from the disk cache) and the whole ``m.check()``.
* ``--cache DIR``: the same with the disk cache (``METRICC_CACHE_DIR=DIR``), warmed first by
  one untimed process per metric; without it the children run with the cache off.
* ``--warning-ab``: the CPU time of that warning's analysis as it is (the two moves alone)
  and as it was (the whole ``check()``), each the first analysis in a fresh process,
  interleaved, for the 2 x 2 metrics of the run.
* by stage: ``parse`` (the first parse in the process, which builds the Lark parser),
  ``analyse`` (the rest of ``compile``: simplification, range and size checks).
* ``--torch-compile``: the first ``torch.compile``'d forward and backward of f1's loss in a
  fresh process (dynamo tracing and inductor code generation), and the second call.
* cached ``compile``: the same call again in the same process (an ``lru_cache`` hit), median
  of 1000 calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import metricc
t_import = time.perf_counter() - t0
import torch  # a training script has it already; keep it out of the compile figures
from metricc.language.parse import parse
name = sys.argv[1]
t0 = time.perf_counter(); parse(name); t_parse = time.perf_counter() - t0  # builds the Lark parser
t0 = time.perf_counter(); parse(name); t_reparse = time.perf_counter() - t0
t0 = time.perf_counter(); m = metricc.compile(name); t_compile = time.perf_counter() - t0
# the first .loss() by stage: its warning's analysis, emitting the kernels, exec, the rest
c0 = time.process_time()
# (before the moves-only warning, the first .loss() ran the whole check(): time that instead)
warning = getattr(m, "_training_report", m.check)
t0 = time.perf_counter(); warning(); t_warn = time.perf_counter() - t0
t0 = time.perf_counter(); m.kernels_source; t_emit = time.perf_counter() - t0
t0 = time.perf_counter(); m.loss_class; t_exec = time.perf_counter() - t0
t0 = time.perf_counter(); loss = m.loss(); t_module = time.perf_counter() - t0
c_loss = time.process_time() - c0
t0 = time.perf_counter(); m.gradient; t_grad = time.perf_counter() - t0
t0 = time.perf_counter(); m.check(); t_check = time.perf_counter() - t0
out = {"import": t_import, "parse": t_parse, "analyse": max(0.0, t_compile - t_reparse),
       "compile": t_compile, "warning": t_warn, "emit": t_emit, "exec": t_exec,
       "module": t_module, "loss": t_warn + t_emit + t_exec + t_module, "loss_cpu": c_loss,
       "gradient": t_grad, "check": t_check}
if "--torch-compile" in sys.argv:
    x = torch.rand(64, requires_grad=True); y = (torch.rand(64) < 0.3).float()
    fn = torch.compile(loss)
    t0 = time.perf_counter(); fn(x, y).backward(); out["torch_compile"] = time.perf_counter() - t0
    t0 = time.perf_counter(); fn(x, y).backward(); out["torch_compile_again"] = time.perf_counter() - t0
    from torch._dynamo.utils import counters  # what dynamo did: graphs, breaks, recompiles
    out["graphs"] = counters["stats"]["unique_graphs"]
    out["graph_breaks"] = sum(counters["graph_break"].values())
    out["recompiles"] = sum(counters["recompiles"].values())
times = []
for _ in range(1000):
    t0 = time.perf_counter(); metricc.compile(name); times.append(time.perf_counter() - t0)
times.sort()
out["cached"] = times[len(times) // 2]
print(json.dumps(out))
"""

# The warning of a first .loss(): the two moves alone (now) or the whole check() (before),
# each the first analysis in a fresh process, in-process (no worker) so CPU time sees it all.
WARNING_CHILD = r"""
import json, sys, time
import metricc, torch
m = metricc.compile(sys.argv[1])
c0 = time.process_time()
(m._training_report if sys.argv[2] == "moves" else m.check)()
print(json.dumps(time.process_time() - c0))
"""

TORCH_ONLY = "import time; t0 = time.perf_counter(); import torch; print(time.perf_counter() - t0)"


def run_child(code: str, *args: str, cache: str | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("METRICC_CACHE_DIR", None)
    if cache:
        env["METRICC_CACHE_DIR"] = cache
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def warning_ab(names: list[str], repeats: int) -> None:
    print("\n| metric | whole check() CPU ms | two moves alone CPU ms | saved |\n|---|---:|---:|---:|")
    os.environ["METRICC_ANALYSIS_WORKER"] = "0"  # in-process: the CPU time sees all the work
    try:
        for name in names:
            runs: dict[str, list[float]] = {"check": [], "moves": []}
            for _ in range(repeats):
                for which in runs:
                    runs[which].append(float(run_child(WARNING_CHILD, name, which)))
            full, moves = (statistics.median(runs[k]) * 1e3 for k in ("check", "moves"))
            print(f"| {name} | {full:.0f} | {moves:.0f} | {1 - moves / full:.0%} |")
    finally:
        del os.environ["METRICC_ANALYSIS_WORKER"]


def main(argv: list[str] | None = None) -> None:
    sys.path.insert(0, str(ROOT))
    from metricc.library import METRICS, lookup

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="fresh processes per metric")
    ap.add_argument("--metrics", default=",".join(METRICS), help="comma-separated names")
    ap.add_argument("--quick", action="store_true", help="two metrics, one process each")
    ap.add_argument("--torch-compile", action="store_true",
                    help="also time the first torch.compile'd forward+backward of f1's loss")
    ap.add_argument("--warning-ab", action="store_true",
                    help="CPU time of the first .loss()'s warning: the two moves alone vs the "
                         "whole check() (2 x 2 metrics; fresh processes, interleaved)")
    ap.add_argument("--cache", metavar="DIR",
                    help="time with the disk cache in DIR, warmed first (METRICC_CACHE_DIR)")
    args = ap.parse_args(argv)
    names = args.metrics.split(",")
    repeats = args.repeats
    if args.quick:
        names, repeats = ["f1", "mcc"], 1
    print(f"{len(names)} metrics x {repeats} fresh processes; load average "
          f"{os.getloadavg()[0]:.2f} at start; disk cache "
          f"{'in ' + args.cache + ' (warmed)' if args.cache else 'off'}\n")
    for name in names if args.cache else ():  # fill the cache (untimed)
        run_child(CHILD, name, cache=args.cache)

    rows, imports, limit_cold, limit_cached = [], [], 0.3, 1e-3
    for name in names:
        runs = [json.loads(run_child(CHILD, name, cache=args.cache)) for _ in range(repeats)]
        imports += [r["import"] for r in runs]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        rows.append((name, med))
    torch_import = statistics.median(float(run_child(TORCH_ONLY)) for _ in range(1 if args.quick else 3))

    print("| metric | parse ms | analyse ms | cold compile ms | .loss(): warning ms | emit ms "
          "| exec ms | module ms | .loss() total ms | .loss() CPU ms | then .gradient ms "
          "| then check() ms | cached compile µs |")
    print("|---|" + "---:|" * 12)
    for name, med in rows:
        stages = ("parse", "analyse", "compile", "warning", "emit", "exec", "module", "loss",
                  "loss_cpu", "gradient", "check")
        print(f"| {name} | " + " | ".join(f"{med[k] * 1e3:.1f}" for k in stages)
              + f" | {med['cached'] * 1e6:.1f} |")
    print("\n(parse: the first parse in the process, building the Lark parser; analyse: compile "
          "minus a warm parse)")
    cold = [med["compile"] for _, med in rows]
    cached = [med["cached"] for _, med in rows]
    print()
    print(f"median over metrics: cold compile {statistics.median(cold) * 1e3:.1f} ms, "
          f"cold .loss() {statistics.median(med['loss'] for _, med in rows) * 1e3:.1f} ms")
    print(f"slowest cold compile: {max(cold) * 1e3:.1f} ms ({rows[cold.index(max(cold))][0]}); "
          f"target < {limit_cold * 1e3:.0f} ms for each metric: "
          f"{'met' if max(cold) < limit_cold else 'NOT met'}")
    print(f"slowest cached compile: {max(cached) * 1e6:.1f} µs; target < {limit_cached * 1e6:.0f} "
          f"µs: {'met' if max(cached) < limit_cached else 'NOT met'}")
    print(f"import metricc: {statistics.median(imports) * 1e3:.0f} ms (median of {len(imports)} "
          f"fresh processes); import torch alone: {torch_import * 1e3:.0f} ms")
    if args.warning_ab:
        warning_ab([n for n in names if lookup(n) is None or not (lookup(n).matrix or lookup(n).curve)],
                   repeats)
    if args.torch_compile:
        tc = json.loads(run_child(CHILD, "f1", "--torch-compile", cache=args.cache))
        print(f"torch.compile(f1 loss): first forward+backward {tc['torch_compile']:.1f} s, "
              f"second {tc['torch_compile_again'] * 1e3:.1f} ms (one fresh process; "
              f"{tc['graphs']} graphs, {tc['graph_breaks']} graph breaks, "
              f"{tc['recompiles']} recompiles)")
    print(f"\nload average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
