"""Compile a metric into a loss, check it, and train with it.

Run: python examples/quickstart.py   (--help lists its options)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import torch

import metricc


def make_data(n: int, positive_rate: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two overlapping Gaussian blobs, ``positive_rate`` of them positive."""
    y = (torch.rand(n, generator=gen) < positive_rate).float()
    x = torch.randn(n, 2, generator=gen) + y[:, None] * torch.tensor([1.5, 1.0])
    return x, y


def train(loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor,
          steps: int = 300) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x).squeeze(-1), y)
        loss.backward()
        opt.step()
    return model


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="Adam steps per model (default 300)")
    ap.add_argument("--n", type=int, default=4000, help="training and test samples (default 4000)")
    args = ap.parse_args(argv)
    f1 = metricc.compile("2*TP / (2*TP + FP + FN)")
    print("metric:      ", f1.expr)
    print("d/dTP:       ", f1.gradient["TP"])
    print("undefined if:", ", ".join(f"{d} = 0" for d in f1.undefined))
    report = f1.verify()  # raises metricc.VerificationError if anything disagrees
    print(f"verified:     {len(report.checks)} checks (symbolic, autograd, finite differences)")

    gen = torch.Generator().manual_seed(0)
    x, y = make_data(args.n, 0.05, gen)
    x_test, y_test = make_data(args.n, 0.05, gen)

    f1_loss = f1.loss("anyloss", from_logits=True)
    bce = torch.nn.BCEWithLogitsLoss()
    for name, loss_fn in (("BCE", bce), ("F1 loss", f1_loss)):
        model = train(loss_fn, x, y, args.steps)
        with torch.no_grad():
            prob = torch.sigmoid(model(x_test).squeeze(-1))
        print(f"{name:8s} test F1 = {f1.score(prob, y_test, zero_division=0.0):.3f}")


if __name__ == "__main__":
    main()
