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
* cold ``.loss()``: then the first ``m.loss()``: the monotonicity check behind its wrong-way
  warning (``m.check()``, which would also compute ``.gradient`` had it not been asked for),
  emitting the torch kernels (guard, derivatives, common subexpressions), ``exec``, the module.
* by stage: ``parse`` (the first parse in the process, which builds the Lark parser),
  ``analyse`` (the rest of ``compile``: simplification, range and size checks); and of the
  first ``.loss()``: ``check`` (SymPy's monotonicity and singularity analysis), ``emit``
  (the kernel source: guard, derivatives, common subexpressions), ``exec`` (the loss class
  from that source) and ``module`` (option checks, the instance).
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
t0 = time.perf_counter(); m.gradient; t_grad = time.perf_counter() - t0
# .loss() by stage: the check behind its warning, emitting the kernels, exec of the class, the rest
t0 = time.perf_counter(); m.check(); t_check = time.perf_counter() - t0
t0 = time.perf_counter(); m.kernels_source; t_emit = time.perf_counter() - t0
t0 = time.perf_counter(); m.loss_class; t_exec = time.perf_counter() - t0
t0 = time.perf_counter(); loss = m.loss(); t_module = time.perf_counter() - t0
out = {"import": t_import, "parse": t_parse, "analyse": max(0.0, t_compile - t_reparse),
       "compile": t_compile, "gradient": t_grad, "check": t_check, "emit": t_emit, "exec": t_exec,
       "module": t_module, "loss": t_check + t_emit + t_exec + t_module}
if "--torch-compile" in sys.argv:
    x = torch.rand(64, requires_grad=True); y = (torch.rand(64) < 0.3).float()
    fn = torch.compile(loss)
    t0 = time.perf_counter(); fn(x, y).backward(); out["torch_compile"] = time.perf_counter() - t0
    t0 = time.perf_counter(); fn(x, y).backward(); out["torch_compile_again"] = time.perf_counter() - t0
times = []
for _ in range(1000):
    t0 = time.perf_counter(); metricc.compile(name); times.append(time.perf_counter() - t0)
times.sort()
out["cached"] = times[len(times) // 2]
print(json.dumps(out))
"""

TORCH_ONLY = "import time; t0 = time.perf_counter(); import torch; print(time.perf_counter() - t0)"


def run_child(code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> None:
    sys.path.insert(0, str(ROOT))
    from metricc.library import METRICS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="fresh processes per metric")
    ap.add_argument("--metrics", default=",".join(METRICS), help="comma-separated names")
    ap.add_argument("--quick", action="store_true", help="two metrics, one process each")
    ap.add_argument("--torch-compile", action="store_true",
                    help="also time the first torch.compile'd forward+backward of f1's loss")
    args = ap.parse_args(argv)
    names = args.metrics.split(",")
    repeats = args.repeats
    if args.quick:
        names, repeats = ["f1", "mcc"], 1
    print(f"{len(names)} metrics x {repeats} fresh processes; load average "
          f"{os.getloadavg()[0]:.2f} at start\n")

    rows, imports, limit_cold, limit_cached = [], [], 0.3, 1e-3
    for name in names:
        runs = [json.loads(run_child(CHILD, name)) for _ in range(repeats)]
        imports += [r["import"] for r in runs]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        rows.append((name, med))
    torch_import = statistics.median(float(run_child(TORCH_ONLY)) for _ in range(1 if args.quick else 3))

    print("| metric | parse ms | analyse ms | cold compile ms | then .gradient ms | .loss(): check ms "
          "| emit ms | exec ms | module ms | .loss() total ms | cached compile µs |")
    print("|---|" + "---:|" * 11)
    for name, med in rows:
        stages = ("parse", "analyse", "compile", "gradient", "check", "emit", "exec", "module", "loss")
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
    if args.torch_compile:
        tc = json.loads(run_child(CHILD, "f1", "--torch-compile"))
        print(f"torch.compile(f1 loss): first forward+backward {tc['torch_compile']:.1f} s, "
              f"second {tc['torch_compile_again'] * 1e3:.1f} ms (one fresh process)")
    print(f"\nload average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
