"""metricc on a CUDA GPU: correctness against the CPU in float64, torch.compile, timings.

Run on a machine with an NVIDIA GPU::

    python benchmarks/gpu_check.py            # all checks and the timing table
    python benchmarks/gpu_check.py --quick    # small sizes

Without CUDA it says so and exits with status 0 (``--device cpu`` runs the same code on
the CPU, which only exercises the script). Exit status 1 means a check failed.

1. Correctness: for every named metric, every relaxation, binary (and multiclass and
   multilabel where this metricc has them), symbolic and autograd backward: loss and
   gradient on the GPU in float64 equal the CPU's in float64 (relative 1e-9); float32 on
   the GPU is within 1e-4 of them; float16 and bfloat16 give finite losses and gradients.
2. ``torch.compile(fullgraph=True)`` on the GPU (Inductor/Triton) equals eager.
3. Timings: forward+backward, median over interleaved rounds (``torch.cuda.synchronize``
   around each call), and peak extra memory (``torch.cuda.max_memory_allocated``), for the
   rows of ``bench_loss.py``.
4. The races of ``bench_peers.py`` (metricc against MONAI and smp, where installed) on the
   GPU: every row eager and compiled (``--quick``: eager, and compiled only for the
   multiclass Dice rows), with the issue-16 targets.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_peers
from bench_loss import binary_losses, print_table

import metricc
from metricc.library import METRICS
from metricc.runtime.options import MODES

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
RELAXATIONS = [("anyloss", False), ("anyloss", True), ("linear", False), ("linear", True),
               ("sigmoid", True)]


def batch(mode: str, n: int, gen: torch.Generator, from_logits: bool
          ) -> tuple[torch.Tensor, torch.Tensor, dict[str, str]]:
    """CPU float64 scores, targets and loss options for ``mode``."""
    if mode == "binary":
        x = torch.randn(4, n, generator=gen, dtype=torch.float64)
        y = (torch.rand(4, n, generator=gen) < 0.3).double()
        opts: dict[str, str] = {}
    elif mode == "multiclass":
        x = torch.randn(4, 5, n, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 5, (4, n), generator=gen)
        opts = {"average": "macro"}
    else:
        x = torch.randn(4, 5, n, generator=gen, dtype=torch.float64)
        y = (torch.rand(4, 5, n, generator=gen) < 0.3).double()
        opts = {"average": "macro"}
    if not from_logits:
        x = torch.softmax(x, 1) if mode == "multiclass" else torch.sigmoid(x)
    return x, y, opts


def value_and_grad(loss: Loss, x: torch.Tensor, y: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    xx = x.detach().clone().requires_grad_(True)
    out = loss(xx, y)
    out.backward()
    assert xx.grad is not None
    return out.detach().double().cpu(), xx.grad.double().cpu()


def close(a: torch.Tensor, b: torch.Tensor, rtol: float) -> bool:
    scale = b.abs().max().clamp_min(1e-30)
    return bool(((a - b).abs().max() / scale) <= rtol)


def check_correctness(device: str, n: int, names: list[str], failures: list[str]) -> int:
    modes = MODES
    gen = torch.Generator().manual_seed(0)
    done = 0
    for name in names:
        m = metricc.compile(name)
        for relaxation, from_logits in RELAXATIONS:
            for mode in modes:
                if mode == "multiclass" and relaxation == "sigmoid":
                    continue  # refused by design: softmax rows, not independent logits
                x, y, opts = batch(mode, n, gen, from_logits)
                for backward in ("symbolic", "autograd"):
                    loss = m.loss(relaxation, from_logits=from_logits, backward=backward,
                                  mode=mode, **opts) if mode != "binary" else m.loss(
                        relaxation, from_logits=from_logits, backward=backward)
                    ref_v, ref_g = value_and_grad(loss, x, y)
                    what = f"{name} {relaxation} logits={from_logits} {mode} {backward}"
                    v, g = value_and_grad(loss, x.to(device), y.to(device))
                    if not (close(v, ref_v, 1e-9) and close(g, ref_g, 1e-9)):
                        failures.append(f"float64 {device} != cpu: {what}")
                    v, g = value_and_grad(loss, x.float().to(device), y.float().to(device)
                                          if y.is_floating_point() else y.to(device))
                    if not (close(v, ref_v, 1e-4) and close(g, ref_g, 1e-3)):
                        failures.append(f"float32 {device} far from float64: {what}")
                    for low in (torch.float16, torch.bfloat16):
                        yl = y.to(low) if y.is_floating_point() else y
                        v, g = value_and_grad(loss, x.to(low).to(device), yl.to(device))
                        if not (torch.isfinite(v).all() and torch.isfinite(g).all()):
                            failures.append(f"{low} not finite on {device}: {what}")
                    done += 1
    return done


def check_compile(device: str, failures: list[str]) -> None:
    gen = torch.Generator().manual_seed(1)
    for name in ("f1", "mcc"):
        loss = metricc.compile(name).loss(from_logits=True)
        compiled = torch.compile(loss, fullgraph=True, dynamic=False)
        x = torch.randn(100_000, generator=gen).to(device)
        y = (torch.rand(100_000, generator=gen) < 0.2).float().to(device)
        v1, g1 = value_and_grad(loss, x, y)
        v2, g2 = value_and_grad(compiled, x, y)
        if not (close(v2, v1, 1e-5) and close(g2, g1, 1e-4)):
            failures.append(f"torch.compile on {device} != eager: {name}")


def check_matrix(device: str, failures: list[str]) -> int:
    """K x K losses: float64 on the device equals the CPU, and torch.compile(fullgraph=True) equals eager."""
    gen = torch.Generator().manual_seed(2)
    done = 0
    for name in ("quadratic_kappa", "multiclass_mcc", "expected_cost"):
        m = metricc.compile(name)
        x = torch.randn(512, 6, 8, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 6, (512, 8), generator=gen)
        y[:, 0] = 5  # class 5 everywhere in column 0 and nowhere else is fine; class 4 may be absent
        for relaxation in ("softmax", "linear"):
            for backward in ("symbolic", "autograd"):
                loss = m.loss(relaxation, from_logits=True, backward=backward)
                ref_v, ref_g = value_and_grad(loss, x, y)
                v, g = value_and_grad(loss, x.to(device), y.to(device))
                what = f"{name} {relaxation} {backward}"
                if not (close(v, ref_v, 1e-9) and close(g, ref_g, 1e-9)):
                    failures.append(f"K x K float64 {device} != cpu: {what}")
                v, g = value_and_grad(torch.compile(loss, fullgraph=True, dynamic=False),
                                      x.float().to(device), y.to(device))
                if not (close(v, ref_v, 1e-4) and close(g, ref_g, 1e-3)):
                    failures.append(f"K x K compiled float32 {device} far from float64 eager: {what}")
                done += 1
    return done


def timings(device: str, sizes: list[int], rounds: int, compiled: bool) -> None:
    losses = binary_losses(compiled)
    times: dict[int, dict[str, float]] = {}
    peaks: dict[int, dict[str, float]] = {}
    gen = torch.Generator().manual_seed(2)
    for n in sizes:
        x = torch.randn(n, generator=gen).to(device).requires_grad_(True)
        y = (torch.rand(n, generator=gen) < 0.3).float().to(device)

        def step(loss: Loss, x: torch.Tensor = x, y: torch.Tensor = y) -> None:
            x.grad = None
            loss(x, y).backward()

        calls = {k: functools.partial(step, loss) for k, loss in losses.items()}
        for call in calls.values():
            for _ in range(3):
                call()
        samples = bench_peers.interleave(calls, rounds, device)
        times[n] = {k: statistics.median(v) for k, v in samples.items()}
        peaks[n] = {}
        for k, call in calls.items():
            x.grad = None  # the step's own reset then frees nothing inside the measurement
            peaks[n][k] = (bench_peers.cuda_peak_bytes(call) / 2**20 if device == "cuda"
                           else float("nan"))
        x.grad = None
    print(f"### Forward+backward on {device}, median ms per call\n")
    print_table(["loss"] + [f"{n:.0e}" for n in sizes],
                [[k] + [f"{times[n][k] * 1e3:.3f}" for n in sizes] for k in losses])
    print("### Ratios to the hand-written loss and to BCEWithLogits (compiled rows: to the "
          "compiled peers)\n")
    rows = []
    for k in losses:
        suffix = " compiled" if k.endswith("compiled") else ""
        for base in ("hand-written f1", "BCEWithLogits"):
            rows.append([k, f"÷ {base}{suffix}"] + [
                f"{times[n][k] / times[n][base + suffix]:.2f}" for n in sizes])
    print_table(["loss", "ratio"] + [f"{n:.0e}" for n in sizes], rows)
    print(f"### Peak extra {device} memory of one forward+backward, MB (incl. x.grad)\n")
    print_table(["loss"] + [f"{n:.0e}" for n in sizes],
                [[k] + [f"{peaks[n][k]:.2f}" for n in sizes] for k in losses])


QUICK_COMPILED = ("metricc dice (linear)", "metricc dice (default)", "MONAI DiceLoss",
                  "smp DiceLoss")


def race_peers(device: str, quick: bool, compiled: bool) -> None:
    """``bench_peers.py``'s races on ``device`` (full-size batches; ``quick``: few rounds,
    compiled twins only for the multiclass Dice rows, as compiling costs most of the time)."""
    t0 = time.perf_counter()
    results = []
    for case in bench_peers.peers.CASES:
        if not compiled:
            twins: bool | tuple[str, ...] = False
        elif quick:
            twins = QUICK_COMPILED if case == "multiclass" else False
        else:
            twins = True
        shape = bench_peers.QUICK_SHAPES[case] if device == "cpu" and quick else None
        bench_peers.check_agreement(case)  # the raced peers compute metricc's loss
        results.append(bench_peers.race(case, device, rounds=5 if quick else 20,
                                        warmup=2, compiled=twins, shape=shape))
    bench_peers.compact_report(results, device)
    print(f"peer races: {time.perf_counter() - t0:.0f} s\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--sizes", default="1e6,1e7,1e8")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--no-peers", action="store_true", help="skip the races against MONAI/smp")
    ap.add_argument("--metrics", default=",".join(METRICS),
                    help="named metrics for the correctness check (default: all)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available here: no GPU check was run "
              "(run this script on a machine with an NVIDIA GPU).")
        return 0
    random.seed(0)
    if args.device == "cuda":
        print(f"CUDA device: {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    else:
        print(f"CUDA check run on the CPU (exercises the script only), torch {torch.__version__}\n")
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    rounds = args.rounds
    n_check, names = 64, args.metrics.split(",")
    if args.quick:
        sizes, rounds, n_check, names = [10_000], 3, 16, ["f1", "mcc"]
    failures: list[str] = []
    t0 = time.perf_counter()
    done = check_correctness(args.device, n_check, names, failures)
    print(f"correctness: {done} configurations (metric x relaxation x mode x backward) in "
          f"{time.perf_counter() - t0:.0f} s, {len(failures)} failures\n")
    if not args.no_compile:
        check_compile(args.device, failures)
        print(f"torch.compile on {args.device}: {'ok' if not failures else 'see failures'}\n")
    if not args.no_compile:
        t0 = time.perf_counter()
        done = check_matrix(args.device, failures)
        print(f"K x K losses: {done} configurations (eager float64 vs cpu, compiled float32) in "
              f"{time.perf_counter() - t0:.0f} s, {len(failures)} failures so far\n")
    timings(args.device, sizes, rounds, compiled=not args.no_compile)
    if not args.no_peers:
        race_peers(args.device, args.quick, compiled=not args.no_compile)
    for f in failures:
        print("FAILED:", f)
    print("all checks passed" if not failures else f"{len(failures)} checks FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
