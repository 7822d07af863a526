"""Forward+backward time of the K x K quadratic-kappa loss against cross-entropy.

Run from a checkout::

    python benchmarks/bench_matrix.py --threads 1 --clock cpu    # docs/performance.md, section 7
    python benchmarks/bench_matrix.py --quick --no-compile       # seconds: the test's smoke run
    python benchmarks/bench_matrix.py --device cuda              # on a GPU

Shapes: logits ``(65536, 10)`` (a large tabular batch) and ``(8, 10, 64, 64)`` (ordinal
segmentation), float32, class-index targets. One timed call is
``x.grad = None; loss(x, y).backward()``. Rows:

* ``qwk symbolic``: ``metricc.compile("quadratic_kappa").loss(from_logits=True)`` (softmax
  relaxation, the generated gradient as backward);
* ``qwk autograd``: the same with ``backward="autograd"``;
* ``cross_entropy``: ``torch.nn.functional.cross_entropy``;
* ``... compiled``: ``torch.compile(loss, fullgraph=True, dynamic=False)`` of those.

Every round calls every loss once in a new random order (load hits all rows alike); the
figure is the median over rounds after warm-up, and ratios are of medians from one run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import metricc

SHAPES = {"(65536, 10)": (65536, 10), "(8, 10, 64, 64)": (8, 10, 64, 64)}
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def losses(compile_: bool) -> dict[str, Loss]:
    qwk = metricc.compile("quadratic_kappa")
    out: dict[str, Loss] = {
        "qwk symbolic": qwk.loss(from_logits=True),
        "qwk autograd": qwk.loss(from_logits=True, backward="autograd"),
        "cross_entropy": torch.nn.functional.cross_entropy,
    }
    if compile_:
        for name in list(out):
            out[name + " compiled"] = torch.compile(out[name], fullgraph=True, dynamic=False)
    return out


def _clock(kind: str, device: str) -> Callable[[], float]:
    if device != "cpu":
        def sync_time() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()
        return sync_time
    return time.process_time if kind == "cpu" else time.perf_counter


def run(shape: tuple[int, ...], fns: dict[str, Loss], rounds: int, warmup: int, clock: str,
        device: str) -> dict[str, float]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(device).requires_grad_(True)
    y = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=g).to(device)
    now = _clock(clock, device)
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(warmup + rounds):
        random.Random(r).shuffle(names)
        for name in names:
            x.grad = None
            t0 = now()
            fns[name](x, y).backward()
            t1 = now()
            if r >= warmup:
                times[name].append(t1 - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, 3 rounds (smoke test)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    fns = losses(not args.no_compile)
    shapes = {"(512, 10)": (512, 10), "(2, 10, 8, 8)": (2, 10, 8, 8)} if args.quick else SHAPES
    rounds, warmup = (3, 1) if args.quick else (args.rounds, 5)
    results = {label: run(shape, fns, rounds, warmup, args.clock, args.device)
               for label, shape in shapes.items()}
    labels = list(results)
    print(f"torch {torch.__version__}, device {args.device}, threads "
          f"{torch.get_num_threads()}, clock {args.clock}, median of {rounds} rounds (ms)\n")
    print("| loss | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for name in fns:
        print(f"| {name} | " + " | ".join(f"{results[lb][name]:.3f}" for lb in labels) + " |")
    base = "cross_entropy compiled" if not args.no_compile else "cross_entropy"
    print(f"\nratios against {base}:\n")
    print("| loss | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for name in fns:
        print(f"| {name} | " + " | ".join(f"{results[lb][name] / results[lb][base]:.2f}"
                                          for lb in labels) + " |")


if __name__ == "__main__":
    main()
