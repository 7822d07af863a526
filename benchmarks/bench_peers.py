"""Race metricc against MONAI and segmentation_models_pytorch: forward+backward time and memory.

Run from a checkout (peers: ``pip install -e ".[bench]"`` for MONAI; smp: see
docs/performance.md); a peer that is not installed is left out::

    python benchmarks/bench_peers.py                  # the recorded run (docs/performance.md)
    python benchmarks/bench_peers.py --cases multiclass --no-compile --rounds 10
    python benchmarks/bench_peers.py --quick          # seconds-long smoke run, not a measurement

Batches (``benchmarks/peers.py``): binary ``(16, 1, 256, 256)`` logits with 0/1 targets
(30 % positives); multiclass ``(8, 21, 128, 128)`` and 3-D ``(2, 4, 64, 64, 64)`` logits
with class-index targets in which every class occurs. The losses and the options that make
them compute the same function are listed in ``peers.py`` and printed with the results; the
script first checks, in float64 on a small batch, that each peer equals its metricc row.

One call is ``x.grad = None; loss(x, y).backward()``. Every round calls every loss (eager
and ``torch.compile(loss, dynamic=False)`` twins) once, in a new random order; a ratio is
computed within each round and the tables give the median over rounds of those ratios, so
machine load that comes and goes hits both sides of a ratio alike. On the CPU the default is
one thread and the process's CPU time (``--clock cpu``): steady on a shared machine. On CUDA
the clock is the wall clock with ``torch.cuda.synchronize()`` around each call.

Peak memory: on the CPU, ``torch.profiler``'s record of every allocation and free of torch's
CPU allocator over one call (the running sum, maximised; see ``bench_loss.peak_bytes``); on
CUDA, ``torch.cuda.max_memory_allocated`` above what was allocated before the call. Both
include ``x.grad`` (4 bytes per input element, the same for every row) and exclude ``x``
and ``y``.

Page faults: glibc hands large freed buffers back to the kernel, so a fresh multi-MB tensor
often costs its page faults (about as much as a pass over it) and how often depends on what
ran before: the main source of run-to-run noise here. ``--steady-malloc`` reruns the script
with glibc told to keep freed memory (``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``),
which leaves the arithmetic alone: use it for A/B comparisons of code, and the default for
what a user's process sees.

Targets (issue 16): in every case, eager and compiled, metricc with the ``linear``
relaxation at most 1.0x the fastest peer computing the same metric; metricc Dice with the
default relaxation at most 1.1x the fastest peer's Dice.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers
from bench_loss import peak_bytes, print_table

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
QUICK_SHAPES = {"binary": (2, 1, 16, 16), "multiclass": (2, 5, 8, 8), "3-D": (1, 4, 6, 6, 6)}
LINEAR_LIMIT, DEFAULT_LIMIT = 1.0, 1.1
#: --steady-malloc: glibc thresholds (bytes) that no buffer here reaches
STEADY = str(2**32)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def quiet_peak_bytes(call: Callable[[], None]) -> int:
    """:func:`bench_loss.peak_bytes`, with the profiler's start/stop lines kept off stderr."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        return peak_bytes(call)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def interleave(calls: Mapping[str, Callable[[], None]], rounds: int, device: str = "cpu",
               clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Each call's time in every round; a round runs every call once, in a new random
    order, so that load which comes and goes hits all of them alike."""
    samples: dict[str, list[float]] = {k: [] for k in calls}
    order = list(calls)
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            _sync(device)
            t0 = clock()
            calls[name]()
            _sync(device)
            samples[name].append(clock() - t0)
    return samples


def cuda_peak_bytes(call: Callable[[], None]) -> float:
    """CUDA memory ``call`` allocates at its peak, above what was allocated before it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return float(torch.cuda.max_memory_allocated() - before)


def check_agreement(case: str) -> None:
    """Each peer computes its metricc row's loss and gradient (float64, small batch)."""
    gen = torch.Generator().manual_seed(5)
    small = {"binary": (2, 1, 16, 16), "multiclass": (2, 5, 8, 8), "3-D": (2, 3, 4, 4, 4)}[case]
    x, y = peers.make_batch(case, gen, dtype=torch.float64, shape=small)
    mode = peers.CASES[case][1]
    ours = {r.metric: r for r in peers.rows(mode, default=False, eps=1e-12)}
    for row in peers.rows(mode, default=False, eps=1e-12):
        if row.library == "metricc":
            continue
        got = []
        for loss in (row.loss, ours[row.metric].loss):
            xx = x.detach().clone().requires_grad_(True)
            out = loss(xx, y)
            out.backward()
            got.append((out.item(), xx.grad))
        (pv, pg), (mv, mg) = got
        if abs(pv - mv) > 1e-9 * abs(pv) or (pg - mg).abs().max() > 1e-8 * pg.abs().max():
            raise SystemExit(f"{row.name} ({row.options}) differs from metricc {row.metric}: "
                             f"loss {pv} vs {mv}")


def race(case: str, device: str = "cpu", rounds: int = 20, warmup: int = 3,
         compiled: bool | Collection[str] = True, shape: tuple[int, ...] | None = None,
         clock: Callable[[], float] = time.perf_counter) -> dict:
    """Time and memory of every row of ``case``; returns per-round samples and peaks.

    ``compiled``: add a ``torch.compile`` twin of every row (``True``), of none, or of the
    rows named.
    """
    mode = peers.CASES[case][1]
    base = peers.rows(mode)
    losses: dict[str, Loss] = {r.name: r.loss for r in base}
    info = {r.name: r for r in base}
    twins = [r for r in base
             if r.compiled and (compiled is True or (compiled and r.name in compiled))]
    if twins:
        # All metricc losses share MetricLoss.forward; Dynamo counts every loss class and
        # shape as a recompilation of it, and past its limit (8) would silently run eager.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        for r in twins:
            losses[f"{r.name} compiled"] = torch.compile(r.loss, dynamic=False)
    gen = torch.Generator().manual_seed(0)
    x, y = peers.make_batch(case, gen, device=device, shape=shape)

    def step(loss: Loss) -> None:
        x.grad = None
        loss(x, y).backward()

    compile_s = {}
    for name, loss in losses.items():
        t0 = time.perf_counter()
        step(loss)  # the compiled twins compile here
        _sync(device)
        compile_s[name] = time.perf_counter() - t0
        for _ in range(warmup):
            step(loss)
    _sync(device)
    calls = {k: functools.partial(step, f) for k, f in losses.items()}
    samples = interleave(calls, rounds, device, clock)
    peaks: dict[str, float] = {}
    for name, call in calls.items():
        x.grad = None  # the step's own reset then frees nothing inside the measurement
        peaks[name] = cuda_peak_bytes(call) if device == "cuda" else float(quiet_peak_bytes(call))
    x.grad = None
    return {"case": case, "shape": tuple(x.shape), "samples": samples, "peaks": peaks,
            "info": info, "compiled": bool(twins), "compile_s": compile_s}


def _ratio(res: dict, a: str, b: str) -> float:
    """Median over rounds of the per-round ratio ``time(a) / time(b)``."""
    s = res["samples"]
    return statistics.median(p / q for p, q in zip(s[a], s[b], strict=True))


def targets(res: dict) -> list[list[str]]:
    """Rows of the target table: each metricc row against the fastest peer of its metric."""
    out = []
    info: dict[str, peers.Row] = res["info"]
    s = res["samples"]
    for suffix in ("", " compiled") if res["compiled"] else ("",):
        for name, row in info.items():
            if row.library != "metricc":
                continue
            rivals = [p for p, r in info.items() if r.library != "metricc" and r.metric == row.metric
                      and p + suffix in s]
            if not rivals or name + suffix not in s:
                continue
            fastest = min(rivals, key=lambda p: statistics.median(s[p + suffix]))
            default = row.relaxation != "linear"
            limit = DEFAULT_LIMIT if default else LINEAR_LIMIT
            r = _ratio(res, name + suffix, fastest + suffix)
            out.append([res["case"], "compiled" if suffix else "eager", name, f"÷ {fastest}",
                        f"<= {limit}", f"{r:.2f}", "met" if r <= limit else "NOT met"])
    return out


def compact_report(results: list[dict], device: str) -> bool:
    """One table of every row (median ms, peak MB), then the targets; True when all are met."""
    table = []
    for res in results:
        s, peaks = res["samples"], res["peaks"]
        for name in res["info"]:
            c = name + " compiled"
            table.append([res["case"], name, f"{statistics.median(s[name]) * 1e3:.3f}",
                          f"{peaks[name] / 2**20:.1f}",
                          f"{statistics.median(s[c]) * 1e3:.3f}" if c in s else "-",
                          f"{peaks[c] / 2**20:.1f}" if c in s else "-"])
    print(f"### Peers on {device}: forward+backward, median ms and peak extra MB\n")
    print_table(["case", "loss", "eager ms", "MB", "compiled ms", "MB"], table)
    rows = [t for res in results for t in targets(res)]
    if rows:
        print_table(["case", "", "metricc", "fastest peer", "limit", "ratio", "verdict"], rows)
    return all(t[-1] == "met" for t in rows)


def report(results: list[dict], device: str) -> bool:
    """Print the tables; True when every target is met."""
    all_targets = []
    for res in results:
        info: dict[str, peers.Row] = res["info"]
        s, peaks, comp = res["samples"], res["peaks"], res["compiled"]
        print(f"### {res['case']} {res['shape']} on {device}: forward+backward\n")
        header = ["loss", "eager ms", "eager peak MB"]
        if comp:
            header += ["compiled ms", "compiled peak MB"]
        table = []
        for name in info:
            line = [name, f"{statistics.median(s[name]) * 1e3:.2f}", f"{peaks[name] / 2**20:.1f}"]
            if comp:
                c = name + " compiled"
                line += ([f"{statistics.median(s[c]) * 1e3:.2f}", f"{peaks[c] / 2**20:.1f}"]
                         if c in s else ["-", "-"])
            table.append(line)
        print_table(header, table)
        print("Ratios, median over rounds of the per-round ratio (compiled rows against the "
              "compiled peers):\n")
        ratio_rows = []
        for name, row in info.items():
            if row.library != "metricc":
                continue
            for peer, prow in info.items():
                if prow.library == "metricc" or prow.metric != row.metric:
                    continue
                line = [name, f"÷ {peer}", f"{_ratio(res, name, peer):.2f}"]
                if comp:
                    a, b = name + " compiled", peer + " compiled"
                    line.append(f"{_ratio(res, a, b):.2f}" if a in s and b in s else "-")
                ratio_rows.append(line)
        if ratio_rows:
            print_table(["metricc", "peer", "eager"] + (["compiled"] if comp else []), ratio_rows)
        else:
            print("(no peer installed)\n")
        all_targets += targets(res)
    if all_targets:
        print("### Targets\n")
        print_table(["case", "", "metricc", "fastest peer", "limit", "ratio", "verdict"],
                    all_targets)
    print("### Options\n")
    modes = {peers.CASES[res["case"]][1]: res["info"] for res in results}
    for mode, info in modes.items():
        for name, row in info.items():
            print(f"* {mode} {name}: `{row.options}`")
    print()
    return all(t[-1] == "met" for t in all_targets)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(peers.CASES),
                    help=f"comma-separated, from {', '.join(peers.CASES)}")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile twins")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default=None,
                    help="cpu: this process's CPU time (CPU default); wall: elapsed (CUDA default)")
    ap.add_argument("--quick", action="store_true", help="tiny batches, 2 rounds: a smoke run")
    ap.add_argument("--steady-malloc", action="store_true",
                    help="rerun with glibc's malloc keeping freed memory (no page faults)")
    args = ap.parse_args(argv)
    if args.steady_malloc and os.environ.get("MALLOC_TRIM_THRESHOLD_") != STEADY:
        # glibc reads these at start-up only, hence the re-exec.
        env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": STEADY, "MALLOC_MMAP_THRESHOLD_": STEADY}
        rest = sys.argv[1:] if argv is None else argv
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *rest], env)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available here: no race was run.")
        return 0
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in peers.CASES]
    if unknown:
        ap.error(f"unknown case {unknown[0]!r}; choose from {', '.join(peers.CASES)}")
    clock_name = args.clock or ("cpu" if args.device == "cpu" else "wall")
    clock = time.process_time if clock_name == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    random.seed(0)
    rounds, warmup = (2, 1) if args.quick else (args.rounds, args.warmup)
    status = peers.peer_status()
    malloc = "steady malloc, " if os.environ.get("MALLOC_TRIM_THRESHOLD_") == STEADY else ""
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {clock_name} clock, "
          f"{malloc}"
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
          + ", ".join(f"{k} {v}" for k, v in status.items()) + "\n")
    results = []
    for case in cases:
        check_agreement(case)
        t0 = time.perf_counter()
        results.append(race(case, args.device, rounds, warmup, not args.no_compile,
                            QUICK_SHAPES[case] if args.quick else None, clock))
        print(f"  raced {case} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    met = report(results, args.device)
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    print("all targets met" if met else "some targets NOT met (see the table)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
