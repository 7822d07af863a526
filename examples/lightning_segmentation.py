#!/usr/bin/env python
"""Lightning: train a tiny segmenter on cross-entropy + λ·(1 - Dice), log Dice from the same formula.

One formula, ``2*TP/(2*TP + FP + FN)``, compiled once, gives both the training
term (``Metric.loss``: soft Dice on softmax probabilities, macro over the
classes) and the logged metric (``Metric.metric``: a ``torchmetrics.Metric`` on
the argmax labels, exact over the epoch and, under DDP, over the ranks). The
data are synthetic 3-class images: background, bright discs, dark squares.

    python examples/lightning_segmentation.py           # 15 epochs, a few minutes on one core
    python examples/lightning_segmentation.py --quick   # smoke run, a few seconds

It needs ``lightning`` and ``torchmetrics`` (``pip install "metricc[lightning]"``).
Lightning's logs (CSV) and a summary ``lightning_segmentation.json`` go to
``--out`` (default: a new temporary directory).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    import metricc
except ImportError:  # running from a checkout without installing it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import metricc

CLASSES = 3  # background, disc, square


def make_images(n: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` noisy images ``(n, 1, size, size)`` and their class maps ``(n, size, size)``.

    Each image holds a disc (class 1, brighter than the background) and a square
    (class 2, darker), radius 2 to 4 pixels, on unit Gaussian noise.
    """
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    labels = torch.zeros(n, size, size, dtype=torch.long)
    for i in range(n):
        for cls in (1, 2):
            r = float(torch.randint(2, 5, (1,), generator=g))
            cy, cx = torch.randint(5, size - 5, (2,), generator=g).tolist()
            if cls == 1:
                shape = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
            else:
                shape = ((yy - cy).abs() <= r - 1) & ((xx - cx).abs() <= r - 1)
            labels[i][shape] = cls
    brightness = torch.tensor([0.0, 1.5, -1.5])[labels]
    images = torch.randn(n, size, size, generator=g) + brightness
    return images.unsqueeze(1), labels


class Segmenter(L.LightningModule):
    """Three dilated 3x3 convolutions; loss ``CE + lam * (1 - soft Dice)``; logs hard Dice."""

    def __init__(self, lam: float = 1.0, lr: float = 3e-3, width: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        layers: list[nn.Module] = []
        c = 1
        for d in (1, 2, 1):
            layers += [nn.Conv2d(c, width, 3, padding=d, dilation=d), nn.BatchNorm2d(width),
                       nn.ReLU()]
            c = width
        layers.append(nn.Conv2d(width, CLASSES, 1))
        self.net = nn.Sequential(*layers)
        dice = metricc.compile("2*TP/(2*TP + FP + FN)")
        # Training term: soft Dice of the softmax probabilities, macro over the classes.
        self.dice_loss = dice.loss("linear", mode="multiclass", from_logits=True)
        # Logged metrics: the same formula on argmax labels, accumulated over the epoch.
        self.train_dice = dice.metric(mode="multiclass", num_classes=CLASSES)
        self.val_dice = dice.metric(mode="multiclass", num_classes=CLASSES)
        self.val_dice_per_class = dice.metric(mode="multiclass", num_classes=CLASSES,
                                              average="none")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # logits (N, C, H, W)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
                      ) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        ce = F.cross_entropy(logits, y)
        dice_term = self.dice_loss(logits, y)
        loss = ce + self.hparams["lam"] * dice_term
        self.train_dice.update(logits.detach(), y)
        self.log_dict({"train/loss": loss, "train/ce": ce, "train/soft_dice_loss": dice_term},
                      on_step=False, on_epoch=True)
        self.log("train/dice", self.train_dice, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.val_dice.update(logits, y)
        self.val_dice_per_class.update(logits, y)
        # Logging the metric object: Lightning calls compute() once per epoch, then reset().
        self.log("val/dice", self.val_dice, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        per_class = self.val_dice_per_class.compute()
        for c, v in enumerate(per_class.tolist()):
            self.log(f"val/dice_class{c}", v)
        self.val_dice_per_class.reset()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams["lr"])


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 24 images, 2 epochs")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--lam", type=float, default=1.0, help="weight of the Dice loss term")
    ap.add_argument("--out", type=Path, help="logs and summary (default: a temporary directory)")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="metricc_lightning_"))
    out.mkdir(parents=True, exist_ok=True)
    n_train, n_val, size = (24, 16, 24) if args.quick else (384, 96, 32)
    epochs = args.epochs or (2 if args.quick else 15)

    L.seed_everything(0, verbose=False)
    x, y = make_images(n_train + n_val, size, seed=0)
    train = DataLoader(TensorDataset(x[:n_train], y[:n_train]), batch_size=8, shuffle=True)
    val = DataLoader(TensorDataset(x[n_train:], y[n_train:]), batch_size=8)
    model = Segmenter(lam=args.lam)
    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1,
                        logger=CSVLogger(out, name="lightning_segmentation"),
                        default_root_dir=out, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        log_every_n_steps=1)
    trainer.fit(model, train, val)
    logged = {k: float(v) for k, v in trainer.callback_metrics.items()}

    # The logged epoch value is the Dice of all validation pixels at once, not a mean of
    # per-batch values: recompute it in one go with the hard-label score.
    model.eval()
    with torch.no_grad():
        logits = model(x[n_train:])
    dice_all = metricc.compile("dice").score(logits, y[n_train:], mode="multiclass",
                                             zero_division=0.0)
    summary = {"epochs": epochs, "lam": args.lam, **logged, "val/dice_recomputed": dice_all}
    (out / "lightning_segmentation.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"validation Dice: logged {logged['val/dice']:.4f}, recomputed on all pixels "
          f"{dice_all:.4f}; per class "
          + ", ".join(f"{logged[f'val/dice_class{c}']:.3f}" for c in range(CLASSES)))
    print(f"logs in {out}")
    if not math.isclose(logged["val/dice"], dice_all, rel_tol=1e-6):
        raise SystemExit("the logged Dice differs from the Dice of all validation pixels")
    return summary


if __name__ == "__main__":
    main()
