"""The losses metricc is raced against: MONAI and segmentation_models_pytorch (smp).

One place builds every race, with the options that make metricc and the peer compute the
same function, so that ``bench_peers.py``, ``gpu_check.py`` and ``tests/test_peers.py``
cannot drift apart. A peer that is not installed is left out (``peer_status`` says why).

Every loss here takes ``(logits, target)``: binary targets are 0/1 floats of the logits'
shape ``(N, 1, *)``; multiclass targets are class indices ``(N, *)``. Peers get what they
need from that (MONAI a channel dim on the indices; smp's ``MCCLoss``, which takes
probabilities, a ``sigmoid`` first), so every row includes the same activation.

Options matched (all "global" over the batch, one confusion matrix per class):

* Dice: metricc ``dice``; MONAI ``DiceLoss(sigmoid|softmax=True, to_onehot_y=True,
  batch=True, smooth_nr=0, smooth_dr=eps)``; smp ``DiceLoss(mode, from_logits=True,
  smooth=0, eps=eps)`` (smp clamps the denominator at ``eps`` where metricc adds it).
* Tversky (alpha = 0.3 on FP, beta = 0.7 on FN): metricc ``tversky``; MONAI
  ``TverskyLoss(..., alpha=0.3, beta=0.7, batch=True, smooth_nr=0, smooth_dr=eps)``.
* Jaccard: metricc ``jaccard``; smp ``JaccardLoss(mode, from_logits=True, smooth=0, eps=eps)``.
* MCC (binary only, as smp's): metricc ``mcc``; smp ``MCCLoss(eps=eps)`` on
  ``sigmoid(logits)``; smp adds ``eps`` to each count where metricc guards the root.

metricc rows use ``average="macro"`` (the default) and ``from_logits=True``; ``linear`` is the
relaxation that makes them the peers' function, ``default`` is the loss's default relaxation.
Where every class occurs in the target (the benchmark batches) the empty-class rules of the
three libraries agree; metricc still runs its presence test.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import metricc

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
EPS = 1e-7
ALPHA, BETA = 0.3, 0.7

#: name -> (shape, mode) of the raced batches
CASES: dict[str, tuple[tuple[int, ...], str]] = {
    "binary": ((16, 1, 256, 256), "binary"),
    "multiclass": ((8, 21, 128, 128), "multiclass"),
    "3-D": ((2, 4, 64, 64, 64), "multiclass"),
}


@dataclass(frozen=True)
class Row:
    """One raced loss: ``library`` in metricc/MONAI/smp, ``metric`` what it computes."""

    name: str
    library: str
    metric: str
    loss: Loss
    options: str
    relaxation: str | None = None  # metricc rows: the relaxation the loss uses
    #: race a torch.compile twin too (not where it would equal another row's twin)
    compiled: bool = True


def _quiet_import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception:  # not installed, or broken against this torch: leave the peer out
        return None


_SMP: list[Any] = []


def smp_losses() -> ModuleType | None:
    """``segmentation_models_pytorch.losses``, or ``None`` when smp is not installed.

    smp's package ``__init__`` imports its models (timm, which needs torchvision); the
    losses need only torch. When the package import fails for want of those, the
    ``losses`` subpackage is loaded on its own from smp's install directory, under a
    private name so that nothing else sees a half-imported smp.
    """
    if _SMP:
        return _SMP[0]
    mod = None
    try:
        mod = importlib.import_module("segmentation_models_pytorch.losses")
    except Exception:  # ImportError without torchvision/timm; anything else: the same way
        spec = importlib.util.find_spec("segmentation_models_pytorch")
        if spec is not None and spec.origin is not None:
            init = Path(spec.origin).parent / "losses" / "__init__.py"
            name = "_metricc_bench_smp_losses"
            lspec = importlib.util.spec_from_file_location(
                name, init, submodule_search_locations=[str(init.parent)])
            if lspec is not None and lspec.loader is not None:
                mod = importlib.util.module_from_spec(lspec)
                sys.modules[name] = mod
                try:
                    lspec.loader.exec_module(mod)
                except Exception:
                    del sys.modules[name]
                    mod = None
    _SMP.append(mod)
    return mod


def monai_losses() -> ModuleType | None:
    """``monai.losses``, or ``None`` when MONAI is not installed."""
    return _quiet_import("monai.losses")


def peer_status() -> dict[str, str]:
    """``{"MONAI": version or 'not installed', "smp": ...}`` for the report."""
    out = {}
    monai = _quiet_import("monai") if monai_losses() is not None else None
    out["MONAI"] = getattr(monai, "__version__", "?") if monai else "not installed"
    smp = smp_losses()
    if smp is None:
        out["smp"] = "not installed"
    else:
        from importlib.metadata import PackageNotFoundError, version
        try:
            out["smp"] = version("segmentation_models_pytorch")
        except PackageNotFoundError:
            out["smp"] = "?"
    return out


def make_batch(case: str, gen: torch.Generator, device: str = "cpu",
               dtype: torch.dtype = torch.float32, shape: tuple[int, ...] | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (a leaf that requires grad) and targets for ``case`` in which every class occurs."""
    full, mode = CASES[case]
    shape = shape or full
    x = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    if mode == "binary":
        y = (torch.rand(shape, generator=gen) < 0.3).to(dtype)
    else:
        y = torch.randint(0, shape[1], shape[:1] + shape[2:], generator=gen)
    return x.to(device).requires_grad_(True), y.to(device)


def _metricc_row(metric: str, mode: str, relaxation: str | None, eps: float,
                 validate: bool = True, **params: float) -> Row:
    m = metricc.compile(metric, **params) if params else metricc.compile(metric)
    opts: dict[str, Any] = {"from_logits": True, "eps": eps}
    if mode != "binary":
        opts.update(mode="multiclass", average="macro")
    if not validate:
        opts["validate_args"] = False
    loss = m.loss(relaxation, **opts) if relaxation else m.loss(**opts)
    label = (relaxation or "default") + ("" if validate else ", unchecked")
    shown = ", ".join(f"{k}={v!r}" for k, v in opts.items())
    pstr = "".join(f", {k}={v}" for k, v in params.items())
    # validation is skipped while torch.compile traces: a compiled unchecked twin is the
    # checked one's
    return Row(f"metricc {metric} ({label})", "metricc", metric, loss,
               f'compile("{metric}"{pstr}).loss({relaxation!r}, {shown})' if relaxation
               else f'compile("{metric}"{pstr}).loss({shown}): relaxation {loss.relaxation!r}',
               loss.relaxation, compiled=validate)


def rows(mode: str, eps: float = EPS, default: bool = True) -> list[Row]:
    """Every race for ``mode`` ("binary" or "multiclass"): metricc rows, then installed peers.

    ``default``: also the rows that are not like-for-like with a peer: Dice with the loss's
    default relaxation, and Dice without input validation (``validate_args=False``, which
    the peers do not do), eager only.
    """
    out = [_metricc_row("dice", mode, "linear", eps)]
    if default:
        out.append(_metricc_row("dice", mode, "linear", eps, validate=False))
        out.append(_metricc_row("dice", mode, None, eps))
    out += [
        _metricc_row("tversky", mode, "linear", eps, alpha=ALPHA, beta=BETA),
        _metricc_row("jaccard", mode, "linear", eps),
    ]
    if mode == "binary":
        out.append(_metricc_row("mcc", mode, "linear", eps))
    binary = mode == "binary"
    ml = monai_losses()
    if ml is not None:
        act = {"sigmoid": True} if binary else {"softmax": True, "to_onehot_y": True}
        common = {**act, "batch": True, "smooth_nr": 0.0, "smooth_dr": eps}
        shown = ", ".join(f"{k}={v}" for k, v in common.items())
        dice = ml.DiceLoss(**common)
        tversky = ml.TverskyLoss(**common, alpha=ALPHA, beta=BETA)
        if binary:
            out.append(Row("MONAI DiceLoss", "MONAI", "dice", dice, f"DiceLoss({shown})"))
            out.append(Row("MONAI TverskyLoss", "MONAI", "tversky", tversky,
                           f"TverskyLoss({shown}, alpha={ALPHA}, beta={BETA})"))
        else:
            out.append(Row("MONAI DiceLoss", "MONAI", "dice",
                           lambda x, t, f=dice: f(x, t.unsqueeze(1)), f"DiceLoss({shown})"))
            out.append(Row("MONAI TverskyLoss", "MONAI", "tversky",
                           lambda x, t, f=tversky: f(x, t.unsqueeze(1)),
                           f"TverskyLoss({shown}, alpha={ALPHA}, beta={BETA})"))
    sl = smp_losses()
    if sl is not None:
        smode = "binary" if binary else "multiclass"
        common_s = f'"{smode}", from_logits=True, smooth=0, eps={eps}'
        out.append(Row("smp DiceLoss", "smp", "dice",
                       sl.DiceLoss(smode, from_logits=True, smooth=0.0, eps=eps),
                       f"DiceLoss({common_s})"))
        out.append(Row("smp JaccardLoss", "smp", "jaccard",
                       sl.JaccardLoss(smode, from_logits=True, smooth=0.0, eps=eps),
                       f"JaccardLoss({common_s})"))
        if binary:
            mcc = sl.MCCLoss(eps=eps)
            out.append(Row("smp MCCLoss", "smp", "mcc",
                           lambda x, t, f=mcc: f(torch.sigmoid(x), t),
                           f"MCCLoss(eps={eps}) on sigmoid(logits)"))
    return out
