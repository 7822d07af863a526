"""The soft histogram of grid positions behind the soft curve (:mod:`metricc.runtime.curve`), and
the adjoint of its wider kernels: bin indices, row offsets, float64 sums by bin.

Torch-only: standalone files paste it before :mod:`metricc.runtime.curve`.
"""

from __future__ import annotations

import torch
from torch import Tensor


def bin_index_dtype(size: int) -> torch.dtype:
    """int32 bin indices while they fit: half the memory, and int32 += bool stays vectorised (int64: 20x slower)."""
    return torch.int32 if size < 1 << 31 else torch.int64


def add_row_offsets(idx: Tensor, pos: Tensor, rows: int, bins: int) -> Tensor:
    """Move in place the bin numbers ``idx`` of ``(N,)`` or ``(N, C, *)`` scores into each
    element's row of the flat ``(2, C, T)`` histogram: negatives first, then positives
    (``pos``); the class (dim 1) is the row, read in place without a permute."""
    if idx.dim() >= 2:
        offset = torch.arange(rows, dtype=idx.dtype, device=idx.device).mul_(bins)
        idx = idx.add_(offset.view(rows, *(1,) * (idx.dim() - 2)))
    return idx.add_(pos, alpha=rows * bins)


def _scatter(size: int, index: Tensor, values: Tensor | None) -> Tensor:
    """Sums of ``values`` by ``index`` into float64 (a count when ``values`` is None): ``bincount``
    on the CPU in eager mode (twice ``index_add_``'s speed, the same sums in the same order), else
    ``index_add_``: traced, ``bincount``'s length depends on the data (``torch.compile`` fails on
    it), and on CUDA it waits for the device to learn it."""
    if index.device.type == "cpu" and not torch.compiler.is_compiling():
        return torch.bincount(index, weights=values, minlength=size).to(torch.float64)  # empty: int64
    if values is None:
        values = torch.ones((), dtype=torch.float64, device=index.device).expand(index.shape[0])
    return torch.zeros(size, dtype=torch.float64, device=index.device).index_add_(0, index, values)


def soft_histogram(u: Tensor, pos: Tensor, mass: Tensor | None, rows: int, bins: int, width: int,
                   index: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The soft ``(2, C, T)`` histogram (flat, float64) of positions ``u``, and the index
    the backward needs: each element's bin (width 1) or its row's first bin (wider).
    ``index`` (width 1): a tensor of ``u``'s shape and :func:`bin_index_dtype` to write the
    bins into, a slab of a larger index (the caller's chunk), instead of a fresh one."""
    size = 2 * rows * bins
    dtype = bin_index_dtype(size)
    if width == 1:
        # linear interpolation: 1 - f to bin k, f to bin k + 1, k <= T - 2. u >= 0: the cast is the
        # floor. f = u - k in place (u - k would cast k to a float64 copy): frac(u), 1 at the top
        # point u = T - 1 (masked eagerly only if a score is there). A NaN position casts to any
        # integer: clamped to a valid bin, its NaN f then marks the histogram (the caller checks).
        k = u.to(dtype) if index is None else index.copy_(u)
        top = u >= bins - 1 if torch.compiler.is_compiling() or not k.numel() or int(k.max()) >= bins - 1 else None
        f = u.frac_() if top is None else u.frac_().masked_fill_(top, 1.0)  # u is spent (width 1)
        k.clamp_(0, bins - 2)
        idx = add_row_offsets(k, pos, rows, bins).reshape(-1)
        frac = _scatter(size, idx, f.reshape(-1) if mass is None else f.mul_(mass).reshape(-1))
        hist = _scatter(size, idx, None if mass is None else mass.reshape(-1)).sub_(frac)
        hist[1:] += frac[:-1]  # k + 1 stays in its row: frac is 0 at each row's last bin
        return hist, idx
    hist = torch.zeros(size, dtype=torch.float64, device=u.device)
    base = add_row_offsets(torch.zeros(u.shape, dtype=dtype, device=u.device), pos, rows, bins)
    floor = u.floor()
    f = u - floor
    k = floor.to(torch.int64).clamp_(0, bins - 1)  # NaN: see above
    for j in range(1 - width, width + 1):
        tap = (1 - (f - j).abs_() / width) / width
        tap = tap if mass is None else tap.mul_(mass)
        hist.scatter_add_(0, ((k + j).clamp_(0, bins - 1) + base).reshape(-1), tap.reshape(-1))
    return hist, base


def tap_adjoint(u: Tensor, base: Tensor, adj: Tensor, bins: int, width: int) -> Tensor:
    """``dL/du`` of every element of a ``width > 1`` kernel: ``adj`` holds ``dL/dhist``."""
    floor = u.floor()
    f = u - floor
    k = floor.to(torch.int64)
    grad = torch.zeros_like(u)
    for j in range(1 - width, width + 1):
        slope = torch.sign(f - j).neg_() / (width * width)
        grad += adj.index_select(0, ((k + j).clamp_(0, bins - 1) + base).reshape(-1)).view(u.shape) * slope
    return grad
