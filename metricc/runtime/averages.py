"""Which classes a row's average counts, and how rows' losses are averaged.

The class-presence test (:func:`predicted`) and the absent-class policy
(:func:`class_average_weights`) are shared by the loss and the hard-label score
(``metricc.evaluate.counts``), so both average the same classes: see ``docs/modes.md``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .modes import ClassRows


def predicted(r: ClassRows, need: Tensor | None, element_weights: Tensor | None) -> Tensor:
    """``(N, K)`` bool: class ``k`` is the hard prediction of a counted element of sample ``n``.

    Counted elements are those with a positive ``element_weights`` (``(N, 1 or K, M)``,
    or ``None`` for all). Exact where ``need`` (``(N, K)`` bool) is true; elsewhere
    exact or False. ``need=None`` (under ``torch.compile``, and on CUDA) computes
    every entry without data-dependent branches.

    Multiclass presence is the costly part: ``max(1).indices`` on CPU is ~40x slower
    than ``amax(1)``. Given ``need``, only the classes that need it are looked at, one
    by one: class ``j`` is the first maximum at an element iff it equals the maximum
    there and every class before it is below it (a running prefix ``amax``), which is
    the argmax rule (first maximum on ties) without an argmax.
    """
    n, k = r.s.shape[:2]
    ew = None if element_weights is None else element_weights.detach() > 0
    if need is not None and not bool(need.any()):
        return torch.zeros((n, k), dtype=torch.bool, device=r.s.device)
    x = r.scores
    if r.threshold is not None:
        if ew is None:
            return x.amax(-1) >= r.threshold
        return ((x >= r.threshold) & ew).any(-1)
    c = x.shape[1]
    cols = list(range(c)) if r.chosen is None else r.chosen
    if need is None:
        # Each element's argmax (first maximum, as documented: the least class at the
        # maximum, which fuses into one pass, unlike max(1).indices) is marked in an
        # (N, C + 1) table; elements that are not counted go to the extra column.
        at_max = x == x.amax(1, keepdim=True)
        idx = torch.where(at_max, torch.arange(c, device=x.device).view(1, c, 1), c).amin(1)
        if r.mask is not None:
            idx = torch.where(r.mask[:, 0], idx, c)
        table = torch.zeros((n, c + 1), dtype=x.dtype, device=x.device).scatter_(1, idx, 1.0)
        hit = table[:, cols] > 0
        # zero class weights (micro) count nothing; a hit implies an unmasked element
        return hit if ew is None else hit & ew.any(-1)
    if ew is not None and ew.shape[1] == 1:
        ew = ew.expand(n, k, -1)
    wanted = need.any(0).nonzero().flatten().tolist()
    out = torch.zeros((n, k), dtype=torch.bool, device=x.device)
    mx = x.amax(1)
    prefix, done = None, 0  # prefix = max of classes [0, done)
    for col in sorted(wanted, key=lambda i: cols[i]):
        j = cols[col]
        if j > done:
            part = x[:, done:j].amax(1)
            prefix = part if prefix is None else torch.maximum(prefix, part)
            done = j
        hit = x[:, j] == mx
        if prefix is not None:
            hit &= prefix < mx
        if ew is not None:
            hit &= ew[:, col]
        out[:, col] = hit.any(-1)
    return out


def _first_positive(candidates: list[Tensor], dim: int) -> Tensor:
    """Along ``dim``, the first candidate weight vector whose sum is positive (else the last)."""
    out = candidates[-1]
    for cand in reversed(candidates[:-1]):
        out = torch.where(cand.sum(dim, keepdim=True) > 0, cand, out)
    return out


def class_average_weights(present: Tensor, support: Tensor, weights: Tensor | None,
                          average: str) -> Tensor:
    """The weight of each class in each sample's average: the absent-class policy.

    ``present`` (``(S, K)`` bool) marks classes with a target or a (hard)
    prediction in that sample's counts, ``support`` is each class's (weighted)
    number of target elements, ``weights`` the ``class_weights`` (``(K,)``).
    ``macro`` weighs present classes by ``weights`` and ignores absent ones;
    ``weighted`` weighs them by ``weights * support``. Where that leaves
    nothing, it falls back to the present classes, then to every class, so the
    weights of each row are >= 0 and sum to 1 (float64).
    """
    f64 = torch.float64
    base = torch.ones_like(support, dtype=f64)
    if weights is not None:
        base = base * weights.to(device=support.device, dtype=f64)
    candidates = [base * present.to(f64), base]
    if average == "weighted":
        candidates.insert(0, base * support.to(f64))
    v = _first_positive(candidates, -1)
    return v / v.sum(-1, keepdim=True)


def average_rows(values: Tensor, present: Tensor, support: Tensor, weights: Tensor | None,
                 average: str) -> tuple[Tensor, Tensor]:
    """Average ``(S, K)`` per-class values over classes (see :func:`class_average_weights`).

    Returns the per-sample values (``(S,)``, or ``(S, K)`` for ``none``) and
    which of them had anything present.
    """
    if average == "none":
        return values, present
    v = class_average_weights(present, support, weights, average)
    return (v.to(values.dtype) * values).sum(-1), present.any(-1)


def reduce_samples(per: Tensor, keep: Tensor, reduction: str) -> Tensor:
    """``reduction`` over samples (dim 0), skipping samples with nothing present.

    When no sample has anything present, every sample counts.
    """
    if reduction == "none":
        return per
    f64 = torch.float64
    u = _first_positive([keep.to(f64), torch.ones_like(keep, dtype=f64)], 0)
    if reduction == "mean":
        u = u / u.sum(0, keepdim=True)
    return (u.to(per.dtype) * per).sum(0)
