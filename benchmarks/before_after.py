"""The hot paths of two checkouts side by side: did a change make a loss slower?

Each case (a loss's forward + backward, as a training loop runs it, allocations included) runs
in a fresh process per checkout, one thread, checkouts alternating round by round (A B A B ...)
so that machine load hits both alike. A process times ``--calls`` calls after warm-up and
reports the median call; the figure per case is the median over rounds of the per-round ratio
``new / old`` (below 1: the new checkout is faster), beside each side's median and fastest
call. Compiled cases (``--compile``) pay ``torch.compile`` in every process, so they run fewer
rounds.

    python benchmarks/before_after.py --old /path/to/old/checkout --new . --rounds 5
    python benchmarks/before_after.py --old ../old --new . --smoke      # seconds, for the tests

``--old`` and ``--new`` are source checkouts (their ``metricc`` package is imported from there);
both run with the current Python and torch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

#: name -> the Python statements building ``loss``, the logits ``x`` and the other ``args``
CASES: dict[str, str] = {
    "f1 binary 1e6": (
        "loss = metricc.compile('f1').loss(from_logits=True)\n"
        "x = torch.randn(10**6, generator=g); y = (torch.rand(10**6, generator=g) < 0.3).float()\n"
        "args = (y,)"),
    "f1 binary 1e3": (
        "loss = metricc.compile('f1').loss(from_logits=True)\n"
        "x = torch.randn(1000, generator=g); y = (torch.rand(1000, generator=g) < 0.3).float()\n"
        "args = (y,)"),
    "dice multiclass (4, 21, 64, 64)": (
        "loss = metricc.compile('dice').loss('linear', mode='multiclass', from_logits=True)\n"
        "x = torch.randn(4, 21, 64, 64, generator=g); y = torch.randint(0, 21, (4, 64, 64), generator=g)\n"
        "args = (y,)"),
    "precision s.t. recall >= 0.9, 1e5": (
        "loss = metricc.compile('precision subject to recall >= 0.9').loss(from_logits=True)\n"
        "x = torch.randn(10**5, generator=g); y = (torch.rand(10**5, generator=g) < 0.3).float()\n"
        "args = (y,)"),
    "quadratic_kappa (4096, 5)": (
        "loss = metricc.compile('quadratic_kappa').loss(from_logits=True)\n"
        "x = torch.randn(4096, 5, generator=g); y = torch.randint(0, 5, (4096,), generator=g)\n"
        "args = (y,)"),
    "auroc 1e6": (
        "loss = metricc.compile('auroc').loss(from_logits=True)\n"
        "x = torch.randn(10**6, generator=g); y = (torch.rand(10**6, generator=g) < 0.3).float()\n"
        "args = (y,)"),
    "average_precision 1e6": (
        "loss = metricc.compile('average_precision').loss(from_logits=True)\n"
        "x = torch.randn(10**6, generator=g); y = (torch.rand(10**6, generator=g) < 0.3).float()\n"
        "args = (y,)"),
    "auroc 1e6, bool targets": (
        "loss = metricc.compile('auroc').loss(from_logits=True)\n"
        "x = torch.randn(10**6, generator=g); y = torch.rand(10**6, generator=g) < 0.3\n"
        "args = (y,)"),
    "equal_opportunity_difference 1e6, 8 groups": (
        "loss = metricc.compile('equal_opportunity_difference').loss(from_logits=True, num_groups=8)\n"
        "x = torch.randn(10**6, generator=g); y = (torch.rand(10**6, generator=g) < 0.3).float()\n"
        "args = (y, torch.randint(0, 8, (10**6,), generator=g))"),
    "average_precision 1e5": (
        "loss = metricc.compile('average_precision').loss(from_logits=True)\n"
        "x = torch.randn(10**5, generator=g); y = (torch.rand(10**5, generator=g) < 0.3).float()\n"
        "args = (y,)"),
}
COMPILED = ("f1 binary 1e6", "dice multiclass (4, 21, 64, 64)")

_CHILD = """
import sys, time, json, warnings
sys.path.insert(0, {path!r})
import torch
torch.set_num_threads(1)
warnings.simplefilter("ignore")
import metricc
g = torch.Generator().manual_seed(0)
{setup}
if {compiled}:
    loss = torch.compile(loss, fullgraph=True, dynamic=False)
def call():
    xx = x.clone().requires_grad_()
    loss(xx, *args).backward()
for _ in range({warmup}):
    call()
ts = []
for _ in range({calls}):
    t = time.perf_counter(); call(); ts.append(time.perf_counter() - t)
ts.sort()
print(json.dumps({{"median": ts[len(ts) // 2], "min": ts[0], "file": metricc.__file__}}))
"""


def run_one(path: Path, case: str, compiled: bool, calls: int, warmup: int) -> dict[str, float]:
    code = _CHILD.format(path=str(path.resolve()), setup=CASES[case], compiled=compiled, calls=calls,
                         warmup=warmup)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{case} in {path} failed:\n{out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    assert str(path.resolve()) in str(result["file"]), (path, result["file"])  # the right checkout
    return result


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", type=Path, required=True)
    p.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--compile", action="store_true", help="also the compiled cases (slow)")
    p.add_argument("--smoke", action="store_true", help="one small case, one round")
    p.add_argument("--cases", nargs="*", help="only these cases (their names, as in CASES)")
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    a = p.parse_args(argv)
    cases = [(c, False) for c in CASES] + ([(c, True) for c in COMPILED] if a.compile else [])
    if a.cases:
        cases = [(c, compiled) for c, compiled in cases if c in a.cases]
    if a.smoke:
        cases, a.rounds, a.calls = [("f1 binary 1e3", False)], 1, 3
    rows = []
    for case, compiled in cases:
        rounds = max(1, a.rounds // 2) if compiled else a.rounds
        ratios, old_med, new_med, old_min, new_min = [], [], [], [], []
        for _ in range(rounds):
            o = run_one(a.old, case, compiled, a.calls, 3)
            n = run_one(a.new, case, compiled, a.calls, 3)
            ratios.append(n["median"] / o["median"])
            old_med.append(o["median"]), new_med.append(n["median"])
            old_min.append(o["min"]), new_min.append(n["min"])
        row = {"case": case + (" compiled" if compiled else ""), "rounds": rounds,
               "old ms": 1e3 * statistics.median(old_med), "new ms": 1e3 * statistics.median(new_med),
               "old fastest ms": 1e3 * min(old_min), "new fastest ms": 1e3 * min(new_min),
               "new/old (median of rounds)": statistics.median(ratios)}
        rows.append(row)
        print(f"| {row['case']} | {row['old ms']:.2f} | {row['new ms']:.2f} | {row['old fastest ms']:.2f} | "
              f"{row['new fastest ms']:.2f} | {row['new/old (median of rounds)']:.2f} |", flush=True)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    print("| case | old median ms | new median ms | old fastest ms | new fastest ms | new/old |")
    print("|---|---:|---:|---:|---:|---:|")
    main()
