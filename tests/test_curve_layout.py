"""The curve loss reads ``(N, C, *)`` scores in place, the class (dim 1) as the histogram row.

``CurveLoss`` no longer permutes ``(N, C, H, W)`` to ``(N H W, C)`` columns nor forms int64
one-hot labels; these tests hold the in-place reading (contiguous, channels-last, weighted,
kernel widths 1 and 2) to the per-class binary losses on the permuted columns, values and
float64 gradients, to 1e-12.
"""

from __future__ import annotations

import pytest
import torch

import metricc
from metricc.runtime.curve import CurveRelaxation, soft_curve
from metricc.runtime.curve_histogram import bin_index_dtype

F64 = torch.float64


def _data(seed: int = 0, shape: tuple[int, ...] = (3, 4, 5, 6)) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=F64)
    t = torch.randint(0, shape[1], shape[:1] + shape[2:], generator=g)
    w = torch.rand(shape[:1] + shape[2:], generator=g, dtype=F64) + 0.5
    return x, t, w


@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
@pytest.mark.parametrize("name", ["auroc", "average_precision"])
def test_multiclass_in_place_equals_per_class_columns(name: str, weighted: bool, width: int) -> None:
    x, t, w = _data()
    m = metricc.compile(name)
    opts = {"bins": 24, "width": width}
    a = x.clone().requires_grad_(True)
    got = m.loss(from_logits=True, mode="multiclass", reduction="none", **opts)(a, t, w if weighted else None)
    got.sum().backward()
    b = x.clone().requires_grad_(True)
    p = torch.softmax(b, 1).movedim(1, -1).reshape(-1, x.shape[1])  # the columns, as before
    binary = m.loss(**opts)
    want = torch.stack([binary(p[:, c], (t.reshape(-1) == c).to(F64), w.reshape(-1) if weighted else None)
                        for c in range(x.shape[1])])
    want.sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)
    assert float(a.grad.abs().max()) > 1e-4  # not vacuous


def test_channels_last_and_contiguous_inputs_agree() -> None:
    x, t, _ = _data(1)
    loss = metricc.compile("auroc").loss(from_logits=True, mode="multiclass", bins=32)
    a = x.clone().requires_grad_(True)
    b = x.clone().contiguous(memory_format=torch.channels_last).requires_grad_(True)
    va, vb = loss(a, t), loss(b, t)
    va.backward()
    vb.backward()
    torch.testing.assert_close(va, vb, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-13, atol=1e-13)


def test_multilabel_images_equal_one_binary_curve_per_class() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 7, 5, generator=g, dtype=F64)
    y = (torch.rand(2, 3, 7, 5, generator=g) < 0.4).to(F64)
    m = metricc.compile("average_precision")
    a = x.clone().requires_grad_(True)
    got = m.loss(from_logits=True, mode="multilabel", reduction="none", bins=20)(a, y)
    got.sum().backward()
    b = x.clone().requires_grad_(True)
    want = torch.stack([m.loss(from_logits=True, bins=20)(b[:, c], y[:, c]) for c in range(3)])
    want.sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)


def test_float32_probabilities_give_the_float64_curve_and_gradient() -> None:
    """float32 scores keep float64 grid positions (and int32 bins): their curve is exactly the
    curve of the same values in float64, and their gradient the float64 one in float32."""
    g = torch.Generator().manual_seed(4)
    p32 = torch.rand(5000, generator=g)
    y = torch.rand(5000, generator=g) < 0.3
    relax = CurveRelaxation(bins=64)
    a, b = p32.clone().requires_grad_(True), p32.double().requires_grad_(True)
    ca, cb = (soft_curve(v, y, relax=relax, from_logits=False) for v in (a, b))
    for u, v in zip(ca, cb, strict=True):
        assert u.dtype == F64 and torch.equal(u, v)
    k = torch.linspace(0.5, 2.0, 64, dtype=F64)
    ((ca[0] - ca[1]) * k).sum().backward()
    ((cb[0] - cb[1]) * k).sum().backward()
    assert torch.equal(a.grad, b.grad.float())


def test_bin_indices_are_int32_while_they_fit() -> None:
    assert bin_index_dtype(2 * 256) == torch.int32
    assert bin_index_dtype((1 << 31) - 1) == torch.int32
    assert bin_index_dtype(1 << 31) == torch.int64
