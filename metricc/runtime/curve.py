"""The ROC/PR curve as a statistic: soft counts ``TP[k], FP[k]`` at every threshold of a grid.

Each score is spread over its neighbouring grid points by a compact triangular kernel
(a soft histogram of the positive and of the negative scores), and reverse cumulative
sums of the histograms give ``TP[k]`` (and ``FP[k]``): the soft number of positives
(negatives) scoring at or above threshold ``t_k``. Time and memory are ``O(n + T)``;
the backward reads each score's adjoint at its bins (the adjoint of a reverse cumulative
sum is a cumulative sum), so no ``n x T`` tensor is ever formed.

Grid: ``T = bins`` points ``c_k = lo + k h`` spanning ``[lo, hi]`` (``[0, 1]`` for
``space="probability"``, ``[-clip, clip]`` for ``"logit"``); the thresholds lie halfway
between them, ``t_k = c_k - h / 2``, where each soft step ``[x >= t_k]`` is one half.
``t_0`` lies below every score, so ``TP[0]`` is the positives' total weight.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, cast

import torch
from torch import Tensor

from ..errors import MetricError, suggest
from .counts import CHUNK
from .curve_histogram import bin_index_dtype, soft_histogram, tap_adjoint
from .distributed import CountPool, count_pool, sync_counts
from .options import CURVE_DEFAULTS

CURVE_SPACES = ("probability", "logit")
#: Past this logit, sigmoid(-z) in softplus_backward is taken as 1 (e^-40 < 2^-53).
_CURVE_SATURATION = {torch.float64: 40.0}


def _real_option(value: Any, name: str, hint: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise MetricError(f"CurveRelaxation {name} must be a finite number ({hint}), got {value!r}")
    return float(value)


class CurveRelaxation:
    """How a batch of scores becomes a soft curve on a grid of ``bins`` thresholds.

    ``bins``: grid points ``T`` (an int >= 2). ``width``: the kernel's half-width in
    bins, a whole number: 1 is linear interpolation between the two neighbouring grid
    points; ``w`` spreads each score over ``2 w`` bins (a triangle, whose weights sum to
    exactly 1 only for whole ``w``), so more scores share each threshold's gradient.
    ``space``: ``"probability"`` (grid on ``[0, 1]``, after a sigmoid when
    ``from_logits``) or ``"logit"`` (grid on logits clipped to ``[-clip, clip]``; the
    logit of probabilities when not ``from_logits``). Clipped scores get no gradient.

    Immutable, compared and hashed by value, like a frozen dataclass; not one, because
    standalone loss files paste this module into files that may be loaded without an
    entry in ``sys.modules``, where ``dataclasses`` fails on string annotations.

    >>> CurveRelaxation(bins=128, space="logit", clip=6)
    CurveRelaxation(bins=128, width=1.0, space='logit', clip=6.0)
    """

    __slots__ = ("bins", "clip", "space", "width")
    bins: int
    width: float
    space: str
    clip: float

    def __init__(self, bins: int = CURVE_DEFAULTS["bins"], width: float = CURVE_DEFAULTS["width"],
                 space: str = CURVE_DEFAULTS["space"], clip: float = CURVE_DEFAULTS["clip"]) -> None:
        if isinstance(bins, bool) or not isinstance(bins, numbers.Integral) or not 2 <= bins <= 1 << 24:
            raise MetricError(f"CurveRelaxation bins must be an int in [2, 16777216] (the number of "
                              f"thresholds; {CURVE_DEFAULTS['bins']} is the default), got {bins!r}")
        w = _real_option(width, "width", "kernel half-width in bins: 1, 2, 3, ...")
        if w < 1 or w != int(w) or w > bins - 1:
            raise MetricError(f"CurveRelaxation width must be a whole number of bins from 1 to bins - 1 "
                              f"= {bins - 1} (1 is linear interpolation), got {width!r}")
        if not isinstance(space, str) or space not in CURVE_SPACES:
            near = suggest(space, list(CURVE_SPACES)) if isinstance(space, str) else ""
            raise MetricError(f"CurveRelaxation space must be 'probability' or 'logit', got {space!r}{near}")
        c = _real_option(clip, "clip", "the logit range [-clip, clip] of space='logit'")
        if not 0 < c <= 30:
            raise MetricError(f"CurveRelaxation clip must be in (0, 30] (logits beyond it saturate "
                              f"any probability), got {clip!r}")
        for name, value in (("bins", int(bins)), ("width", w), ("space", str(space)), ("clip", c)):
            object.__setattr__(self, name, value)

    def _key(self) -> tuple[int, float, str, float]:
        return self.bins, self.width, self.space, self.clip

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("CurveRelaxation is immutable; build a new one")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CurveRelaxation) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "CurveRelaxation(bins={!r}, width={!r}, space={!r}, clip={!r})".format(*self._key())

    def __reduce__(self) -> tuple[type, tuple[int, float, str, float]]:
        return CurveRelaxation, self._key()

    def grid(self) -> tuple[float, float]:
        """``(lo, h)``: the first grid point and the spacing, in the grid's space."""
        lo, hi = (0.0, 1.0) if self.space == "probability" else (-self.clip, self.clip)
        return lo, (hi - lo) / (self.bins - 1)

    def thresholds(self) -> Tensor:
        """The ``T`` thresholds ``t_k`` (float64, increasing), in the grid's space.

        >>> CurveRelaxation(bins=3).thresholds().tolist()
        [-0.25, 0.25, 0.75]
        """
        lo, h = self.grid()
        return lo + (torch.arange(self.bins, dtype=torch.float64) - 0.5) * h


def _grid_scores(s: Tensor, relax: CurveRelaxation, from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
    """The scores in the grid's space, ``x`` (the input's dtype), and ``du/ds`` as ``d * scale``
    (``d`` a tensor, ``None`` for 1; ``scale`` a number) of the positions :func:`_on_grid` gives."""
    _, h = relax.grid()
    if relax.space == "probability":
        if not from_logits:
            return s, None, 1.0 / h
        x = torch.sigmoid(s)
        # x sigmoid(-s) in one pass, exact where x rounds to 1 (x (1 - x) would be 0)
        return x, torch.ops.aten.softplus_backward(x, s, -1.0, _CURVE_SATURATION.get(s.dtype, 20.0)), 1.0 / h
    c = relax.clip
    if from_logits:
        return s, ((s > -c) & (s < c)).to(s.dtype), 1.0 / h
    x = torch.logit(s)
    inside = (x > -c) & (x < c)
    # dlogit/dp = 1 / (p (1 - p)) inside the clip range, 0 outside (also at p = 0, 1)
    return x, torch.where(inside, 1.0 / torch.where(inside, s * (1 - s), 1.0), 0.0), 1.0 / h


def _on_grid(x: Tensor, relax: CurveRelaxation, from_logits: bool) -> Tensor:
    """Grid positions ``u`` (a fresh float64 tensor, in ``[0, T - 1]``) of scores ``x`` in the grid's space."""
    lo, h = relax.grid()
    if relax.space == "probability":
        u = x.to(torch.float64, copy=True).mul_(1.0 / h)
        return u if from_logits else u.clamp_(0, relax.bins - 1)  # unchecked probabilities: its ends
    # clipped on the grid itself: (c - lo) / h may round past T - 1
    return x.to(torch.float64, copy=True).sub_(lo).mul_(1.0 / h).clamp_(0, relax.bins - 1)


def _positions(s: Tensor, relax: CurveRelaxation, from_logits: bool) -> tuple[Tensor, Tensor | None, float]:
    """Grid positions ``u`` (float64, in ``[0, T - 1]``) of the scores, and ``du/ds`` as
    ``d * scale``: ``d`` a tensor (``None`` for 1) and ``scale`` a number."""
    x, d, scale = _grid_scores(s, relax, from_logits)
    return _on_grid(x, relax, from_logits), d, scale


def _linear_histogram_chunked(x: Tensor, pos: Tensor, relax: CurveRelaxation, from_logits: bool,
                              rows: int) -> tuple[Tensor, Tensor]:
    """:func:`soft_histogram` of width 1 without masses (0/1 labels, no weights), from the scores in
    the grid's space ``x``, a slab of dim 0 at a time, its bins written into one index: the same
    bins and counts, sums equal up to float64 rounding (added slab by slab), with no whole-batch
    float64 positions. Eager, CPU."""
    bins = relax.bins
    idx = torch.empty(x.shape, dtype=bin_index_dtype(2 * rows * bins))
    hist: Tensor | None = None
    step = max(1, CHUNK // max(1, math.prod(x.shape[1:])))  # rows of dim 0 per slab
    for start in range(0, x.shape[0], step):
        part = slice(start, start + step)
        h, _ = soft_histogram(_on_grid(x[part], relax, from_logits), pos[part], None, rows, bins, 1,
                              index=idx[part])
        hist = h if hist is None else hist.add_(h)
    if hist is None:  # no scores: the empty histogram
        hist, _ = soft_histogram(_on_grid(x, relax, from_logits), pos, None, rows, bins, 1, index=idx)
    return hist, idx.reshape(-1)


def _reverse_cumsum(h: Tensor) -> Tensor:
    return h.flip(-1).cumsum(-1).flip(-1)


class SoftCurve(torch.autograd.Function):
    """``(TP, FP, P, N)`` of validated scores, with the ``O(n + T)`` backward."""

    @staticmethod
    def forward(ctx: Any, s: Tensor, y: Tensor, w: Tensor | None, relax: CurveRelaxation,
                from_logits: bool, hard: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        in_dtype = s.dtype
        work = torch.promote_types(in_dtype, torch.float32)
        s = s.to(work)
        rows, bins, width = (s.shape[1] if s.dim() >= 2 else 1), relax.bins, int(relax.width)
        x, d, scale = _grid_scores(s, relax, from_logits)
        w, w64 = (None, None) if w is None else (w.to(work), w.to(work).to(torch.float64))
        pos = y if y.dtype == torch.bool else y != 0
        u = None
        if hard and width == 1 and w is None and s.device.type == "cpu" and not torch.compiler.is_compiling():
            hist, idx = _linear_histogram_chunked(x, pos, relax, from_logits, rows)
        elif hard:
            u = _on_grid(x, relax, from_logits)
            hist, idx = soft_histogram(u, pos, w64, rows, bins, width)
        else:  # soft labels: each element once as a negative of mass (1 - y) w, once as a positive
            y64 = y.to(torch.float64)
            mass = torch.cat((1 - y64, y64) if w64 is None else ((1 - y64) * w64, y64 * w64))
            pos = torch.cat((torch.zeros_like(y, dtype=torch.bool), torch.ones_like(y, dtype=torch.bool)))
            u = _on_grid(x, relax, from_logits)
            hist, idx = soft_histogram(torch.cat((u, u)), pos, mass, rows, bins, width)
        if not torch.compiler.is_compiling() and not bool(torch.isfinite(hist).all()):  # data: not traced
            raise MetricError("scores hold NaN (or, as probabilities, infinite) values; the curve cannot "
                              "be formed (check the model's outputs)")
        curve = _reverse_cumsum(hist.view(2, rows, bins))
        if s.dim() == 1:
            curve = curve.squeeze(1)
        fp, tp = curve.unbind(0)
        pos, neg = tp[..., 0].clone(), fp[..., 0].clone()
        ctx.mark_non_differentiable(pos, neg)
        ctx.meta, ctx.shape = (in_dtype, work, scale, bins, width, hard), s.shape
        ctx.save_for_backward(idx, d, w, y if not hard else None, u if width > 1 else None)
        return tp, fp, pos, neg

    @staticmethod
    def backward(ctx: Any, g_tp: Tensor, g_fp: Tensor, _gp: Tensor, _gn: Tensor) -> tuple[Tensor | None, ...]:
        idx, d, w, y, u = ctx.saved_tensors
        in_dtype, work, scale, bins, width, hard = ctx.meta
        g = torch.stack((g_fp, g_tp)).to(torch.float64).reshape(-1)
        shape = ctx.shape
        n = shape[0]
        if width == 1:
            # d hist[k] / du = -1, d hist[k+1] / du = +1, and dL/dhist = cumsum(g) per row: their
            # difference is g at k + 1, read from g shifted by one (1/h folded into the T-sized table)
            shifted = torch.cat((g[1:], g.new_zeros(1))).mul_(scale).to(work)
            if hard and d is not None and idx.device.type == "cpu" and not torch.compiler.is_compiling():
                # gather and multiply a chunk at a time, in cache: one pass over the output
                grad = torch.empty(idx.shape, dtype=work)
                dd = d.reshape(-1)
                for start in range(0, idx.shape[0], CHUNK):
                    part = slice(start, start + CHUNK)
                    torch.index_select(shifted, 0, idx[part], out=grad[part]).mul_(dd[part])
                grad, d = grad.view(-1, *shape[1:]), None
            else:
                grad = shifted.index_select(0, idx).view(-1, *shape[1:])
        else:
            adj = g.view(-1, bins).cumsum(-1).view(-1).mul_(scale)
            grad = tap_adjoint(u if hard else torch.cat((u, u)), idx, adj, bins, width).to(work)
        if not hard:  # the negatives' half weighted by 1 - y, the positives' by y
            grad = torch.lerp(grad[:n], grad[n:], y.to(work))
        if d is not None:
            grad = grad.mul_(d)
        if w is not None:
            grad = grad.mul_(w)
        return grad.to(in_dtype), None, None, None, None, None


def _check_curve_weight(weight: Any, scores: Tensor) -> None:
    """A weight per score, or per sample (row) of ``(N, C)`` scores: names what differs."""
    shapes = [tuple(scores.shape)] + ([tuple(scores.shape[:1])] if scores.dim() == 2 else [])
    wanted = " or ".join(map(str, shapes)) + (" (one weight per sample)" if len(shapes) > 1 else "")
    if not isinstance(weight, Tensor) or tuple(weight.shape) not in shapes:
        raise MetricError(f"weight must be a tensor of shape {wanted}, got "
                          f"{tuple(weight.shape) if isinstance(weight, Tensor) else type(weight).__name__}")
    if not weight.is_floating_point():
        raise MetricError(f"weight must be a floating-point tensor, got {weight.dtype}; use "
                          "weight.float()")
    if weight.device != scores.device:
        raise MetricError(f"weight is on {weight.device} but the scores on {scores.device}; move both")


def _curve_inputs(scores: Any, target: Any, weight: Any, from_logits: Any
                  ) -> tuple[Tensor, Tensor, Tensor | None, bool]:
    """Checked ``(scores, target, weight, hard)``; ``hard``: the labels are all 0 or 1."""
    if not isinstance(from_logits, bool):
        raise MetricError(f"from_logits must be True or False, got {from_logits!r}")
    if not isinstance(scores, Tensor) or not scores.is_floating_point():
        raise MetricError(f"scores must be a floating-point tensor, got "
                          f"{getattr(scores, 'dtype', type(scores).__name__)}")
    if scores.dim() not in (1, 2):
        raise MetricError(f"scores must be (N,) for one curve or (N, C) for one curve per column "
                          f"(multilabel, one-vs-rest), got shape {tuple(scores.shape)}; flatten "
                          "or reshape them")
    if not isinstance(target, Tensor) or target.shape != scores.shape:
        raise MetricError(f"target must be a tensor of the scores' shape {tuple(scores.shape)}, got "
                          f"{tuple(target.shape) if isinstance(target, Tensor) else type(target).__name__}")
    if target.is_complex():
        raise MetricError(f"target must be real 0/1 labels, got {target.dtype}")
    target = target.detach()
    empty = scores.numel() == 0
    if not empty and target.dtype != torch.bool:
        lo, hi = torch.aminmax(target)
        if not (bool(lo >= 0) and bool(hi <= 1)):
            raise MetricError(f"target must hold labels in [0, 1] (1 = positive), found values in "
                              f"[{float(lo)}, {float(hi)}]")
    hard = not target.is_floating_point() or empty or bool(((target == 0) | (target == 1)).all())
    if not from_logits and not empty:
        lo, hi = torch.aminmax(scores.detach())
        if not (bool(lo >= 0) and bool(hi <= 1)):
            raise MetricError(f"with from_logits=False scores must be probabilities in [0, 1], found "
                              f"[{float(lo)}, {float(hi)}]; pass from_logits=True for logits")
    if weight is not None:
        _check_curve_weight(weight, scores)
        weight = weight.detach()
        if not empty:
            lo, hi = torch.aminmax(weight)
            if not (bool(lo >= 0) and bool(hi < math.inf)):
                raise MetricError("weight must be finite and >= 0, found values in "
                                  f"[{float(lo)}, {float(hi)}]")
        if weight.shape != scores.shape:
            weight = weight.unsqueeze(1).expand_as(scores).contiguous()
    return scores, target, weight, hard


def soft_curve(scores: Tensor, target: Tensor, weight: Tensor | None = None, *,
               relax: CurveRelaxation | None = None, from_logits: bool
               ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The soft curve ``(TP, FP, P, N)`` of ``scores`` against labels ``target``, float64.

    ``scores`` ``(N,)`` give ``TP, FP`` of shape ``(T,)``; ``(N, C)`` (multilabel or
    one-vs-rest columns, labels ``(N, C)``) give ``(C, T)``. ``TP[..., k]`` is the soft
    weight of positives scoring at or above threshold ``k`` (non-increasing in ``k``;
    ``TP[..., 0] = P``). Labels may be soft (in ``[0, 1]``). ``weight``: per element or
    per sample (``(N,)``). Differentiable in ``scores``.

    >>> s = torch.tensor([0.1, 0.4, 0.35, 0.8], dtype=torch.float64, requires_grad=True)
    >>> tp, fp, p, n = soft_curve(s, torch.tensor([0, 0, 1, 1]), relax=CurveRelaxation(bins=5),
    ...                           from_logits=False)
    >>> [round(v, 6) for v in tp.tolist()], [round(v, 6) for v in fp.tolist()]
    ([2.0, 2.0, 1.4, 1.0, 0.2], [2.0, 1.4, 0.6, 0.0, 0.0])
    """
    relax = CurveRelaxation() if relax is None else relax
    if not isinstance(relax, CurveRelaxation):
        raise MetricError(f"relax must be a CurveRelaxation, got {type(relax).__name__}")
    s, y, w, hard = _curve_inputs(scores, target, weight, from_logits)
    return SoftCurve.apply(s, y, w, relax, from_logits, hard)


def _pack_curve(curve: tuple[Tensor, ...]) -> Tensor:
    tp, fp, pos, neg = curve
    return torch.cat((tp, fp, pos.unsqueeze(-1), neg.unsqueeze(-1)), -1)


def _unpack_curve(c: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    bins = (c.shape[-1] - 2) // 2
    return c[..., :bins], c[..., bins:2 * bins], c[..., 2 * bins], c[..., 2 * bins + 1]


def sync_curve(curve: tuple[Tensor, ...], process_group: Any = None, *, differentiable: bool = True
               ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(TP, FP, P, N)`` summed over the ranks of ``process_group``: one all-reduce of
    ``2 T + 2`` numbers per curve. Differentiable, the backward sums every rank's incoming
    gradient (as :func:`sync_counts`): each rank's loss is the global one, so DDP's average
    of the ranks' parameter gradients is the global metric's gradient.

    >>> one = (torch.ones(3, dtype=torch.float64),) * 2 + (torch.tensor(1.0, dtype=torch.float64),) * 2
    >>> sync_curve(one)[0].tolist()  # one process: as it is
    [1.0, 1.0, 1.0]
    """
    return _unpack_curve(sync_counts(_pack_curve(curve), process_group, differentiable=differentiable))


class CurvePool(CountPool):
    """:class:`CountPool` for soft curves: ``(TP, FP, P, N)`` summed over ranks under
    ``sync_dist`` and remembered over batches with ``memory_decay`` (float64 memory; the
    gradient flows through the current batch only).

    >>> pool = CurvePool(sync_dist=False, process_group=None, memory_decay=0.5)
    >>> batch = (torch.full((2,), 2.0, dtype=torch.float64),) * 2 + (torch.tensor(2.0, dtype=torch.float64),) * 2
    >>> _ = pool(batch)
    >>> pool(batch)[0].tolist()  # this batch plus half the remembered one
    [3.0, 3.0]
    """

    def forward(self, curve: tuple[Tensor, ...], differentiable: bool = True,  # type: ignore[override]
                update: bool | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        (c,) = super().forward((_pack_curve(curve),), differentiable, update)
        return _unpack_curve(c)


def curve_pool(sync_dist: bool = False, process_group: Any = None, memory_decay: float | None = None
               ) -> CurvePool | None:
    """A checked :class:`CurvePool`, or ``None`` when neither option is asked for."""
    return cast("CurvePool | None", count_pool(sync_dist, process_group, memory_decay, "global", CurvePool))
