#!/usr/bin/env python
"""Which relaxation trains a multiclass loss: gradients at initialisation and a toy segmenter.

1. Mean |d loss / d logit| of the macro F1 loss at initialisation, on logits
   ``0.1 * randn(4, C, 32, 32)`` against random class indices, for C = 3, 5, 21.
2. A tiny fully convolutional net segments synthetic 32x32 images into C classes
   (background and C - 1 kinds of blob, told apart by brightness under unit noise),
   trained with the macro F1 loss and each relaxation, from several initialisations of
   its last layer, and scored by macro Dice of the argmax on held-out images:

   * ``small``: last layer scaled by 0.01 (logits start near 0: every class near 1/C);
   * ``default``: PyTorch's initialisation;
   * ``biased``: background logit +6 (every pixel confidently background);
   * ``wrong``: the last class's logit +6 (every pixel confidently a rare class).

``anyloss`` thresholds each class probability at 0.5, but softmax outputs start near
``1/C``: its sigmoid starts saturated. ``softmax`` (the multiclass default) relaxes the
argmax itself, ``softmax(logits / temperature)``.

    python benchmarks/bench_multiclass.py            # the figures in docs/modes.md (~10 min, 1 core)
    python benchmarks/bench_multiclass.py --quick    # smoke run, well under a minute
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import metricc

SIZE = 32
#: name -> loss options (``relaxation`` and its own option).
RELAXATIONS: dict[str, dict[str, object]] = {
    "softmax T=1 (default)": {},
    "softmax T=0.5": {"relaxation": "softmax", "temperature": 0.5},
    "softmax T=0.25": {"relaxation": "softmax", "temperature": 0.25},
    "linear": {"relaxation": "linear"},
    "anyloss": {"relaxation": "anyloss"},
}


def make_images(n: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images ``(n, 1, 32, 32)`` and their class maps: three blobs (discs or squares of
    radius 3 to 5) per image, class ``k`` at brightness ``±(1.5 + 1.5 * ((k - 1) // 2))``."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
    labels = torch.zeros(n, SIZE, SIZE, dtype=torch.long)
    for i in range(n):
        for _ in range(3):
            k = int(torch.randint(1, classes, (1,), generator=g))
            r = float(torch.randint(3, 6, (1,), generator=g))
            cy, cx = torch.randint(5, SIZE - 5, (2,), generator=g).tolist()
            if k % 2:
                blob = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
            else:
                blob = ((yy - cy).abs() <= r - 1) & ((xx - cx).abs() <= r - 1)
            labels[i][blob] = k
    level = torch.zeros(classes)
    level[1:] = torch.tensor([(1.5 + 1.5 * ((k - 1) // 2)) * (-1) ** k for k in range(1, classes)])
    images = level[labels] + torch.randn(n, SIZE, SIZE, generator=g)
    return images.unsqueeze(1), labels


class TinyNet(nn.Module):
    """Four dilated 3x3 conv layers with batch norm, 12 channels, then a 1x1 conv to C logits."""

    def __init__(self, classes: int, width: int = 12) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = 1
        for d in (1, 2, 4, 1):
            layers += [nn.Conv2d(c, width, 3, padding=d, dilation=d), nn.BatchNorm2d(width), nn.ReLU()]
            c = width
        layers.append(nn.Conv2d(width, classes, 1))
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def initialise(net: TinyNet, init: str) -> None:
    last = net.body[-1]
    with torch.no_grad():
        if init == "small":
            last.weight.mul_(0.01)
            last.bias.zero_()
        elif init in ("biased", "wrong"):
            last.bias.zero_()
            last.bias[0 if init == "biased" else -1] = 6.0
        elif init != "default":
            raise ValueError(init)


def macro_dice(pred: torch.Tensor, labels: torch.Tensor, classes: int) -> float:
    """Mean Dice over the classes present in target or prediction (hard labels)."""
    scores = []
    for k in range(classes):
        p, t = pred == k, labels == k
        den = int(p.sum() + t.sum())
        if den:
            scores.append(2 * int((p & t).sum()) / den)
    return sum(scores) / len(scores)


def train(options: dict[str, object], classes: int, init: str, seed: int, steps: int,
          n_train: int) -> float:
    x, y = make_images(n_train, classes, 1000 + seed)
    x_eval, y_eval = make_images(64, classes, 99)
    torch.manual_seed(seed)
    net = TinyNet(classes)
    initialise(net, init)
    loss_fn = metricc.compile("f1").loss(mode="multiclass", from_logits=True, **options)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, n_train, (16,), generator=g)
        net.train()
        opt.zero_grad()
        loss_fn(net(x[idx]), y[idx]).backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        pred = net(x_eval).argmax(1)
    return macro_dice(pred, y_eval, classes)


def gradient_at_init(options: dict[str, object], classes: int) -> float:
    g = torch.Generator().manual_seed(0)
    z = (0.1 * torch.randn(4, classes, 32, 32, generator=g)).requires_grad_()
    y = torch.randint(classes, (4, 32, 32), generator=g)
    metricc.compile("f1").loss(mode="multiclass", from_logits=True, **options)(z, y).backward()
    return float(z.grad.abs().mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sizes = (3, 5) if args.quick else (3, 5, 21)
    steps, n_train, seeds = (10, 16, 1) if args.quick else (args.steps, 64, args.seeds)
    inits = ("small",) if args.quick else ("small", "default", "biased", "wrong")
    names = list(RELAXATIONS)

    print("## Mean |gradient| at initialisation (logits 0.1*randn(4, C, 32, 32), macro F1)\n")
    print("| C | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for c in sizes:
        cells = [f"{gradient_at_init(RELAXATIONS[n], c):.1e}" for n in names]
        print(f"| {c} | " + " | ".join(cells) + " |")

    def table(classes: int, inits: tuple[str, ...]) -> None:
        print(f"\n## Toy segmenter, {classes} classes: held-out macro Dice "
              f"(mean of {seeds} seed{'s' if seeds > 1 else ''}; min in brackets)\n")
        print("| initialisation | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for init in inits:
            cells = []
            for n in names:
                t0 = time.perf_counter()
                runs = [train(RELAXATIONS[n], classes, init, s, steps, n_train) for s in range(seeds)]
                cells.append(f"{statistics.mean(runs):.2f} ({min(runs):.2f})")
                print(f"  [{init} / {n}: {time.perf_counter() - t0:.0f} s]", file=sys.stderr)
            print(f"| {init} | " + " | ".join(cells) + " |", flush=True)

    table(3 if args.quick else 5, inits)
    if not args.quick:
        table(21, ("small",))
    print(f"\n{steps} Adam steps (lr 0.01, batch 16) on {n_train} images; "
          f"`python benchmarks/bench_multiclass.py{' --quick' if args.quick else ''}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
