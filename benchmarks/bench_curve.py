"""Forward+backward time and peak memory of soft AUROC and AP losses over the soft curve.

Run from a checkout, on one thread (``--smoke``: tiny sizes, a few seconds)::

    OMP_NUM_THREADS=1 python benchmarks/bench_curve.py
    OMP_NUM_THREADS=1 python benchmarks/bench_curve.py --smoke
    OMP_NUM_THREADS=1 python benchmarks/bench_curve.py --sizes 1000000 --only BCEWithLogits \
        "metricc AUROC" "metricc AP" --no-multiclass     # the rows of one question

Binary logits ``x`` of ``n`` float32 elements (10^4, 10^5, 10^6), 0/1 targets with 10 %
positives. Rows, each a loss of ``(x, y)``:

* ``BCEWithLogits``: ``torch.nn.BCEWithLogitsLoss()``, the floor;
* ``soft AUROC`` / ``soft AP``: ``1 -`` the trapezoid AUROC (step-wise AP) written in plain
  torch over :func:`metricc.runtime.curve.soft_curve` (256 bins on probabilities, linear
  interpolation), whose backward is its own ``O(n + T)`` pass;
* ``... logit grid``: the same on logits clipped to ``[-8, 8]``;
* ``metricc AUROC`` / ``metricc AP``: the compiled losses themselves,
  ``metricc.compile("auroc").loss(from_logits=True)`` (``"average_precision"``), input checks
  included: the formulas' generated kernels (symbolic ``dV/dTP, dV/dFP``) on the soft curve of
  ``runtime/curve.py``'s autograd Function (256 bins on probabilities);
* ``pairwise logistic``: the mean of ``log(1 + exp(-(s_i - s_j)))`` over every
  (positive, negative) pair, the classic AUC surrogate: ``n_pos n_neg`` work and memory,
  run only where that is at most ``PAIR_LIMIT`` pairs (skipped rows are named);
* ``LibAUC AUCMLoss`` (on ``sigmoid(x)``, as LibAUC is used) and ``LibAUC APLoss``
  (``n_pos n`` pairs, limited as the pairwise loss; per-sample state of dataset length),
  where ``libauc`` is installed (``pip install --no-deps libauc``); torchsort's soft-rank
  AUROC where ``torchsort`` imports (it needs a native build).

``--multiclass``-sized case (run by default): ``(8, 21, 128, 128)`` logits (one-vs-rest,
21 curves of 131072 pixels) against ``CrossEntropyLoss``; the curve losses are the compiled
``.loss(mode="multiclass", from_logits=True)`` on the logits and ``(8, 128, 128)`` class
indices, macro-averaging the classes' AUROC (AP) of the softmax probabilities; LibAUC's
``MultiLabelAUCMLoss`` on those probabilities as ``(N, C)`` columns and one-hot labels.
``x ratio`` is the median over rounds of each round's ratio to the cross-entropy row (BCE
for binary), which load that comes and goes hits alike.

* ``imbalanced-losses SmoothAPLoss`` (Smooth-AP with its 1024-row queue, ``num_classes=1``,
  ``(N, 1)`` logits) where its ``positives x (batch + queue)`` matrices stay under
  ``SMOOTH_AP_LIMIT`` entries (the skipped sizes are named), and ``imbalanced-losses
  RecallAtQuantileLoss`` (a stop-gradient quantile threshold, sort-based), where
  ``imbalanced_losses`` imports (``pip install --no-deps imbalanced-losses``).

``--compile`` adds a table of BCE, AUROC and AP each under ``torch.compile(fullgraph=True)``,
whose ratios are to the compiled BCE, with the eager BCE in the same rounds (so a compiled loss's
ratio to the eager BCE is its ratio over that row's).

Timing and memory as ``bench_loss.py``: interleaved rounds in a new random order each, timed
by the process's CPU time (``time.process_time``: another process's load is not counted,
page faults of fresh buffers are), the median and the fastest call of each row, and the
median of the per-round ratios to BCE (``x ratio``, the figure to quote); peak extra CPU
bytes of one call from ``torch.profiler``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_loss, also when imported

from bench_loss import fmt_time, peak_bytes, print_table

import metricc
from metricc.runtime.curve import CurveRelaxation, soft_curve

try:  # optional peers: rows for them only where they import
    from libauc.losses import APLoss, AUCMLoss, MultiLabelAUCMLoss
except ImportError:  # pragma: no cover - depends on the environment
    AUCMLoss = APLoss = MultiLabelAUCMLoss = None
try:
    import torchsort
except ImportError:  # pragma: no cover - needs a native build
    torchsort = None
try:  # pip install --no-deps imbalanced-losses
    from imbalanced_losses import RecallAtQuantileLoss, SmoothAPLoss
except ImportError:  # pragma: no cover - depends on the environment
    RecallAtQuantileLoss = SmoothAPLoss = None

PAIR_LIMIT = 1e7
#: Smooth-AP compares every positive with every score of the batch and its queue: a
#: ``positives x (n + queue)`` float matrix and several of its size; above this many entries
#: (several GB) it is not run, and the table says so.
SMOOTH_AP_LIMIT = 5e7
PROFILE_LIMIT = 10**5
PROBABILITY = CurveRelaxation(bins=256)
LOGIT = CurveRelaxation(bins=256, space="logit", clip=8.0)


def soft_auroc(tp: torch.Tensor, fp: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    zero = tp.new_zeros(1)
    tpr, fpr = torch.cat((tp / pos, zero)), torch.cat((fp / neg, zero))
    return ((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:])).sum() / 2


def soft_ap(tp: torch.Tensor, fp: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    recall = torch.cat((tp / pos, tp.new_zeros(1)))
    return ((recall[:-1] - recall[1:]) * tp / (tp + fp).clamp_min(1e-300)).sum()


def curve_loss(score, relax: CurveRelaxation):
    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 1 - score(*soft_curve(x, y, relax=relax, from_logits=True))
    return loss


def metricc_loss(name: str, **options):
    """The compiled loss of ``name`` (``"auroc"``, ``"average_precision"``): what a user runs."""
    return metricc.compile(name).loss(from_logits=True, **options)


def torchsort_auroc(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Soft-rank AUROC: Mann-Whitney from ``torchsort.soft_rank`` (regularisation 1)."""
    ranks = torchsort.soft_rank(x[None], regularization_strength=1.0)[0]
    pos, neg = int(y.sum()), int((~y).sum())
    return 1 - (ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg)


def pairwise_logistic(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    diff = x[y][:, None] - x[~y][None, :]
    return torch.nn.functional.softplus(-diff).mean()


def measure(losses: dict, x: torch.Tensor, y: torch.Tensor, rounds: int, warmup: int
            ) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Seconds of every forward+backward (rounds interleaved, each in a new random order)
    and the peak extra bytes of one call, per loss."""

    def step(loss) -> None:
        x.grad = None
        loss(x, y).backward()

    for loss in losses.values():
        for _ in range(warmup):
            step(loss)
    times: dict[str, list[float]] = {name: [] for name in losses}
    order = list(losses)
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            t0 = time.process_time()
            step(losses[name])
            times[name].append(time.process_time() - t0)
    peaks = {}
    for name, loss in losses.items():
        x.grad = None
        if name.startswith("LibAUC AUCM") and x.numel() > PROFILE_LIMIT:
            # its sum(pos_mask) runs one Python-level op per element: the profiler's record of
            # them takes GBs and minutes; no peak is reported for it
            peaks[name] = float("nan")
            continue
        peaks[name] = peak_bytes(lambda loss=loss: loss(x, y).backward())
    x.grad = None
    return times, peaks


def _rows(label: str, losses: dict, times: dict, peaks: dict, base: str) -> list[list[str]]:
    med = {k: statistics.median(v) for k, v in times.items()}
    low = {k: min(v) for k, v in times.items()}
    rows = []
    for name in losses:
        ratio = statistics.median(a / b for a, b in zip(times[name], times[base], strict=True))
        rows.append([label, name, fmt_time(med[name]), f"{med[name] / med[base]:.2f}", f"{ratio:.2f}",
                     fmt_time(low[name]), f"{low[name] / low[base]:.2f}",
                     "-" if peaks[name] != peaks[name] else f"{peaks[name] / 2**20:.1f}"])
    return rows


def run(sizes: list[int], rounds: int, warmup: int, only: list[str] | None = None
        ) -> list[list[str]]:
    bce = torch.nn.BCEWithLogitsLoss()
    rows, skipped = [], []
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        y = torch.rand(n, generator=g) < 0.1
        x = (torch.randn(n, generator=g) + 1.5 * y).requires_grad_()
        yf = y.float()
        losses = {
            "BCEWithLogits": lambda x, y, yf=yf: bce(x, yf),
            "soft AUROC": curve_loss(soft_auroc, PROBABILITY),
            "soft AP": curve_loss(soft_ap, PROBABILITY),
            "soft AUROC, logit grid": curve_loss(soft_auroc, LOGIT),
            "soft AP, logit grid": curve_loss(soft_ap, LOGIT),
        }
        losses["metricc AUROC"] = metricc_loss("auroc")
        losses["metricc AP"] = metricc_loss("average_precision")
        pairs = int(y.sum()) * int((~y).sum())
        if pairs <= PAIR_LIMIT:
            losses["pairwise logistic"] = pairwise_logistic
        else:
            skipped.append(f"n = {n}: pairwise logistic skipped ({pairs:.2e} pairs > {PAIR_LIMIT:.0e})")
        if AUCMLoss is not None:
            aucm = AUCMLoss(device=torch.device("cpu"))
            losses["LibAUC AUCMLoss"] = lambda x, y, yf=yf, aucm=aucm: aucm(torch.sigmoid(x), yf)
            if int(y.sum()) * n <= PAIR_LIMIT:
                ap_loss, index = APLoss(data_len=n, device=torch.device("cpu")), torch.arange(n)
                losses["LibAUC APLoss"] = (lambda x, y, yf=yf, ap_loss=ap_loss, index=index:
                                           ap_loss(torch.sigmoid(x), yf, index))
            else:
                skipped.append(f"n = {n}: LibAUC APLoss skipped ({int(y.sum()) * n:.2e} pairs > {PAIR_LIMIT:.0e})")
        if torchsort is not None:
            losses["torchsort soft-rank AUROC"] = torchsort_auroc
        if SmoothAPLoss is not None:
            yl = y.long()
            queued = int(y.sum()) * (n + 1024)
            if queued <= SMOOTH_AP_LIMIT:
                sap = SmoothAPLoss(num_classes=1)
                losses["imbalanced-losses SmoothAPLoss"] = lambda x, y, yl=yl, sap=sap: sap(x[:, None], yl)
            else:
                skipped.append(f"n = {n}: imbalanced-losses SmoothAPLoss skipped ({queued:.2e} positive x "
                               f"score entries > {SMOOTH_AP_LIMIT:.0e}: its positives x (batch + queue) matrices)")
            raq = RecallAtQuantileLoss(num_classes=1)
            losses["imbalanced-losses RecallAtQuantileLoss"] = lambda x, y, yl=yl, raq=raq: raq(x[:, None], yl)
        if only:  # the base row stays: every ratio is to it
            losses = {k: v for k, v in losses.items() if k in only or k == "BCEWithLogits"}
        times, peaks = measure(losses, x, y, rounds, warmup)
        rows += _rows(f"{n:.0e}", losses, times, peaks, "BCEWithLogits")
        print_table(["n", "loss", "median ms", "x BCE", "x ratio", "min ms", "x BCE (min)", "peak MB"],
                    rows[-len(losses):])
        sys.stdout.flush()  # each size's table as soon as it is measured
    for line in skipped:
        print(line)
    print("peers not installed: " + (", ".join(n for n, m in (("libauc", AUCMLoss), ("torchsort", torchsort),
                                                           ("imbalanced-losses", SmoothAPLoss))
                                               if m is None) or "none"))
    return rows


def run_compiled(sizes: list[int], rounds: int, warmup: int) -> list[list[str]]:
    """BCE and the AUROC / AP losses under ``torch.compile(fullgraph=True)`` (inductor), each
    against the compiled BCE: the ratio a user who compiles the training step sees."""
    rows = []
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        y = torch.rand(n, generator=g) < 0.1
        x = (torch.randn(n, generator=g) + 1.5 * y).requires_grad_()
        bce = torch.compile(torch.nn.BCEWithLogitsLoss(), fullgraph=True)
        yf = y.float()
        eager = torch.nn.BCEWithLogitsLoss()
        losses = {"compiled BCEWithLogits": lambda x, y, yf=yf, bce=bce: bce(x, yf),
                  "BCEWithLogits (eager)": lambda x, y, yf=yf, eager=eager: eager(x, yf),
                  "compiled metricc AUROC": torch.compile(metricc_loss("auroc"), fullgraph=True),
                  "compiled metricc AP": torch.compile(metricc_loss("average_precision"), fullgraph=True)}
        times, peaks = measure(losses, x, y, rounds, warmup)
        rows += _rows(f"{n:.0e}", losses, times, peaks, "compiled BCEWithLogits")
        print_table(["n", "loss", "median ms", "x BCE", "x ratio", "min ms", "x BCE (min)", "peak MB"],
                    rows[-len(losses):])
        sys.stdout.flush()
    return rows


def run_multiclass(shape: tuple[int, int, int, int], rounds: int, warmup: int) -> list[list[str]]:
    """A ``(B, C, H, W)`` segmentation batch, one-vs-rest curves of every class."""
    b, c, h, w = shape
    g = torch.Generator().manual_seed(c)
    target = torch.randint(c, (b, h, w), generator=g)
    logits = torch.randn(b, c, h, w, generator=g)
    logits.scatter_add_(1, target[:, None], torch.full((b, 1, h, w), 1.5))
    logits.requires_grad_()
    onehot = torch.nn.functional.one_hot(target.view(-1), c).bool()
    ce = torch.nn.CrossEntropyLoss()

    def columns(x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) logits -> (BHW, C) probabilities
        return torch.softmax(x, 1).permute(0, 2, 3, 1).reshape(-1, c)

    auroc, ap = (metricc_loss(name, mode="multiclass") for name in ("auroc", "average_precision"))
    losses = {"CrossEntropy": lambda x, _y: ce(x, target),
              "metricc AUROC (ovr, macro)": lambda x, _y: auroc(x, target),
              "metricc AP (ovr, macro)": lambda x, _y: ap(x, target)}
    if MultiLabelAUCMLoss is not None:
        aucm = MultiLabelAUCMLoss(num_labels=c, device=torch.device("cpu"))
        losses["LibAUC MultiLabelAUCMLoss"] = lambda x, y: aucm(columns(x), y.float())
    times, peaks = measure(losses, logits, onehot, rounds, warmup)
    rows = _rows("x".join(map(str, shape)), losses, times, peaks, "CrossEntropy")
    print_table(["shape", "loss", "median ms", "x CE", "x ratio", "min ms", "x CE (min)", "peak MB"], rows)
    print(f"pairwise losses skipped on {shape}: {b * h * w / c:.0f} positives x {b * h * w * (c - 1) / c:.0f} "
          "negatives per class")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--rounds", type=int, default=31, help="interleaved rounds per binary size")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6],
                        help="binary sizes n")
    parser.add_argument("--only", nargs="+", default=None, help="the binary rows to run (by name)")
    parser.add_argument("--no-multiclass", action="store_true", help="skip the segmentation batch")
    parser.add_argument("--compile", action="store_true",
                        help="also race BCE, AUROC and AP under torch.compile(fullgraph=True)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.smoke:
        run([500, 2000], rounds=3, warmup=1, only=args.only)
        run_multiclass((2, 3, 8, 8), rounds=2, warmup=1)
    else:
        run(args.sizes, rounds=args.rounds, warmup=3, only=args.only)
        if args.compile:
            run_compiled(args.sizes, rounds=args.rounds, warmup=3)
        if not args.no_multiclass:
            run_multiclass((8, 21, 128, 128), rounds=max(3, args.rounds // 3), warmup=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
