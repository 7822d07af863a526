"""Forward+backward time and peak memory of metricc losses against the losses they replace.

Run from a checkout (``--quick`` is the seconds-long smoke run the tests use)::

    python benchmarks/bench_loss.py                 # the recorded run (docs/performance.md)
    python benchmarks/bench_loss.py --quick --no-compile

Binary section: logits ``x`` of 10^4 .. 10^7 float32 elements, 0/1 targets with 30 %
positives; each loss gets ``x`` (a leaf that requires grad) and the targets, and one
timed call is ``x.grad = None; loss(x, y).backward()``. Rows:

* ``metricc f1 symbolic``: ``metricc.compile("f1").loss(from_logits=True)``, the default
  (AnyLoss relaxation, symbolic backward);
* ``metricc f1 autograd``: the same with ``backward="autograd"``;
* ``hand-written f1``: what users write today (AnyLoss paper style): relax, four sums,
  autograd backward;
* ``BCEWithLogits``: ``torch.nn.BCEWithLogitsLoss()``, the floor;
* ``... compiled``: ``torch.compile(loss, fullgraph=True, dynamic=False)`` of those.

All losses see logits, so each includes the sigmoid BCEWithLogits includes.

Multiclass section: ``(8, 21, 128, 128)`` logits and class-index targets; metricc dice
(macro, softmax) against a hand-written soft Dice (and MONAI's ``DiceLoss`` if installed).

Timing: every round calls every loss once, in a new random order, so machine load hits all
rows alike; the figure is the median over rounds, after warm-up calls. Ratios are of
medians from the same run.

Peak memory: ``torch.profiler`` records every allocation and free of torch's CPU
allocator (``profile_memory=True``) in time order; the running sum of those bytes over one
forward+backward, maximised, is the peak extra memory of that call. It includes
``x.grad`` (the same 4 bytes per element for every row) and excludes ``x`` and ``y``,
which exist before the call. ``tracemalloc`` cannot see these allocations, and RSS is
blurred by glibc keeping freed pages.
"""

from __future__ import annotations

import argparse
import os
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

AMPLIFIER = 73.0
EPS = 1e-7
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def handwritten_f1(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """An AnyLoss-style F1 loss as users write it: four soft counts, autograd backward."""
    a = torch.sigmoid(AMPLIFIER * (torch.sigmoid(x) - 0.5))
    tp = (a * y).sum()
    fn = ((1 - a) * y).sum()
    fp = (a * (1 - y)).sum()
    tn = ((1 - a) * (1 - y)).sum()  # noqa: F841 - computed as AnyLoss does; F1 ignores it
    return 1 - 2 * tp / (2 * tp + fp + fn + EPS)


def handwritten_soft_dice(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Macro soft Dice on softmax probabilities, as in segmentation code."""
    p = torch.softmax(x, dim=1)
    onehot = torch.nn.functional.one_hot(target, x.shape[1]).permute(0, 3, 1, 2).to(p.dtype)
    dims = (0, 2, 3)
    inter = (p * onehot).sum(dims)
    card = p.sum(dims) + onehot.sum(dims)
    return 1 - (2 * inter / (card + EPS)).mean()


def peak_bytes(step: Callable[[], None]) -> int:
    """Peak of (allocated - freed) CPU bytes during ``step``, from the profiler's records."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
              and e.device_type() == torch.autograd.DeviceType.CPU]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for e in events:
        current += e.nbytes()
        peak = max(peak, current)
    return peak


CLOCK = time.perf_counter


def measure(losses: dict[str, Loss], x: torch.Tensor, y: torch.Tensor, rounds: int,
            warmup: int) -> tuple[dict[str, float], dict[str, int]]:
    """Median seconds per forward+backward and peak extra bytes, per loss, interleaved."""

    def step_of(loss: Loss) -> Callable[[], None]:
        def step() -> None:
            x.grad = None
            loss(x, y).backward()
        return step

    steps = {name: step_of(loss) for name, loss in losses.items()}
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps)
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            t0 = CLOCK()
            steps[name]()
            times[name].append(CLOCK() - t0)
    peaks = {}
    for name, loss in losses.items():
        x.grad = None  # freed before profiling, so the old gradient's free is not counted

        def call(loss: Loss = loss) -> None:
            loss(x, y).backward()

        peaks[name] = peak_bytes(call)
    x.grad = None
    return {k: statistics.median(v) for k, v in times.items()}, peaks


def fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds < 0.1 else f"{seconds * 1e3:.1f}"


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"
    print(line)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
    print()


def check_agreement(losses: dict[str, Loss], x: torch.Tensor, y: torch.Tensor,
                    reference: str) -> None:
    """Every row must compute the same loss and gradient as ``reference`` (else the
    comparison would be between different functions)."""
    def value_and_grad(loss: Loss) -> tuple[torch.Tensor, torch.Tensor]:
        xx = x.detach().clone().requires_grad_(True)
        out = loss(xx, y)
        out.backward()
        return out.detach(), xx.grad

    ref_v, ref_g = value_and_grad(losses[reference])
    for name, loss in losses.items():
        v, g = value_and_grad(loss)
        scale = ref_g.abs().max().clamp_min(1e-30)
        if not (torch.allclose(v, ref_v, rtol=1e-4, atol=1e-6)
                and ((g - ref_g).abs().max() / scale) < 1e-3):
            raise SystemExit(f"{name} disagrees with {reference}: loss {v.item()} vs "
                             f"{ref_v.item()}, max grad diff {(g - ref_g).abs().max().item()}")


def binary_losses(compiled: bool) -> dict[str, Loss]:
    """The binary rows every benchmark compares, plus compiled twins when ``compiled``."""
    m = metricc.compile("f1")
    losses: dict[str, Loss] = {
        "metricc f1 symbolic": m.loss(from_logits=True),
        "metricc f1 autograd": m.loss(from_logits=True, backward="autograd"),
        "hand-written f1": handwritten_f1,
        "BCEWithLogits": torch.nn.BCEWithLogitsLoss(),
    }
    if compiled:
        for name in ("metricc f1 symbolic", "hand-written f1", "BCEWithLogits"):
            losses[f"{name} compiled"] = torch.compile(losses[name], fullgraph=True,
                                                       dynamic=False)
    return losses


def bench_binary(sizes: list[int], rounds: int, warmup: int, compiled: bool,
                 quick: bool = False) -> None:
    losses = binary_losses(compiled)
    gen = torch.Generator().manual_seed(0)
    probe = torch.randn(1000, generator=gen)
    check_agreement({k: v for k, v in losses.items() if "BCE" not in k}, probe,
                    (torch.rand(1000, generator=gen) < 0.3).float(), "hand-written f1")

    results = {}
    for n in sizes:
        x = torch.randn(n, generator=gen).requires_grad_(True)
        y = (torch.rand(n, generator=gen) < 0.3).float()
        t0 = time.perf_counter()
        # Small sizes are cheap and noisy: more rounds, up to 300 (10^6: 300, 10^7: rounds).
        n_rounds = rounds if quick else max(rounds, min(300, 3 * 10**8 // n))
        results[n] = measure(losses, x, y, n_rounds, warmup)
        print(f"  measured 10^{len(str(n)) - 1} elements in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)

    names = list(losses)
    print("### Binary: forward+backward, median ms per call\n")
    print_table(["loss"] + [f"{n:.0e}" for n in sizes],
                [[k] + [fmt_time(results[n][0][k]) for n in sizes] for k in names])

    def peer(name: str, base: str) -> str:
        return f"{base} compiled" if name.endswith("compiled") and compiled else base

    print("### Binary: time ratios (same run; compiled rows against compiled peers)\n")
    rows = []
    for k in names:
        for base in ("hand-written f1", "BCEWithLogits"):
            ref = peer(k, base)
            rows.append([k, f"÷ {ref}"] + [f"{results[n][0][k] / results[n][0][ref]:.2f}"
                                           for n in sizes])
    print_table(["loss", "ratio"] + [f"{n:.0e}" for n in sizes], rows)
    if compiled:
        print("### Binary: eager ÷ compiled (speed-up of torch.compile)\n")
        print_table(["loss"] + [f"{n:.0e}" for n in sizes],
                    [[k] + [f"{results[n][0][k] / results[n][0][k + ' compiled']:.2f}"
                            for n in sizes]
                     for k in ("metricc f1 symbolic", "hand-written f1", "BCEWithLogits")])

    print("### Binary: peak extra memory of one forward+backward, MB (incl. x.grad)\n")
    print_table(["loss"] + [f"{n:.0e}" for n in sizes],
                [[k] + [f"{results[n][1][k] / 2**20:.2f}" for n in sizes] for k in names])

    print("### Targets at 10^6 and 10^7\n")
    checks = [("eager metricc ÷ eager hand-written", "metricc f1 symbolic", "hand-written f1",
               0.8, 0)]
    if compiled:
        checks += [
            ("compiled metricc ÷ compiled hand-written", "metricc f1 symbolic compiled",
             "hand-written f1 compiled", 1.0, 0),
            ("compiled metricc ÷ compiled BCEWithLogits", "metricc f1 symbolic compiled",
             "BCEWithLogits compiled", 1.3, 0),
            ("compiled metricc ÷ eager metricc", "metricc f1 symbolic compiled",
             "metricc f1 symbolic", 1.0, 0),
        ]
    checks.append(("peak memory metricc ÷ hand-written", "metricc f1 symbolic",
                   "hand-written f1", 1.0, 1))
    big = [n for n in sizes if n >= 10**6] or sizes[-1:]
    rows = []
    for label, a, b, limit, which in checks:
        ratios = [results[n][which][a] / results[n][which][b] for n in big]
        ok = all(r <= limit for r in ratios)
        rows.append([label, f"<= {limit}"] + [f"{r:.2f}" for r in ratios]
                    + ["met" if ok else "NOT met"])
    print_table(["target", "limit"] + [f"{n:.0e}" for n in big] + ["verdict"], rows)


def bench_multiclass(shape: tuple[int, ...], rounds: int, warmup: int) -> None:
    n, c, *spatial = shape
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=gen).requires_grad_(True)
    target = torch.randint(0, c, (n, *spatial), generator=gen)
    m = metricc.compile("dice")
    losses: dict[str, Loss] = {}
    try:
        losses["metricc dice macro (anyloss)"] = m.loss(mode="multiclass", average="macro",
                                                        from_logits=True)
        losses["metricc dice macro (linear)"] = m.loss(
            "linear", mode="multiclass", average="macro", from_logits=True)
    except (metricc.MetricError, TypeError) as e:
        print(f"### Multiclass: skipped: this metricc has no multiclass mode yet ({e})\n")
        return
    losses["hand-written soft dice"] = handwritten_soft_dice
    try:
        from monai.losses import DiceLoss  # type: ignore[import-not-found]

        monai_loss = DiceLoss(softmax=True, to_onehot_y=True, batch=True,
                              smooth_nr=0.0, smooth_dr=EPS)
        losses["MONAI DiceLoss"] = lambda x, t: monai_loss(x, t.unsqueeze(1))
    except ImportError:
        print("(MONAI is not installed: its DiceLoss row is left out)\n")
    check_agreement({k: v for k, v in losses.items() if "anyloss" not in k},
                    x.detach()[:2, :, :16, :16].contiguous(), target[:2, :16, :16].contiguous(),
                    "hand-written soft dice")
    times, peaks = measure(losses, x, target, rounds, warmup)
    ref = times["hand-written soft dice"]
    print(f"### Multiclass {tuple(shape)}: forward+backward\n")
    print_table(["loss", "median ms", "÷ hand-written", "peak extra MB"],
                [[k, fmt_time(t), f"{t / ref:.2f}", f"{peaks[k] / 2**20:.1f}"]
                 for k, t in times.items()])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e4,1e5,1e6,1e7",
                    help="binary input sizes, comma-separated (default 1e4,1e5,1e6,1e7)")
    ap.add_argument("--rounds", type=int, default=30,
                    help="timed rounds per size (at least 3*10^8/size, up to 300)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls per loss first")
    ap.add_argument("--multiclass-shape", default="8,21,128,128")
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile rows")
    ap.add_argument("--no-multiclass", action="store_true")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads (default: torch's choice)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: elapsed time; cpu: this process's CPU time, steadier on a "
                         "shared machine (use with --threads 1)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes and few rounds: a smoke run, not a measurement")
    args = ap.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    shape = tuple(int(s) for s in args.multiclass_shape.split(","))
    rounds, warmup = args.rounds, args.warmup
    if args.quick:
        sizes, shape, rounds, warmup = [1000, 10000], (2, 3, 8, 8), 3, 1
    random.seed(0)
    if args.clock == "cpu":
        global CLOCK
        CLOCK = time.process_time
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock, "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at start\n")
    bench_binary(sizes, rounds, warmup, compiled=not args.no_compile, quick=args.quick)
    if not args.no_multiclass:
        bench_multiclass(shape, rounds, warmup)
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
