"""The cheap class-presence test and class-index counts compute exactly what the plain forms do.

Averages skip classes with neither a target nor a hard prediction (docs/modes.md). In eager
mode the loss finds hard predictions only for classes without support, with a prefix
``amax`` instead of an argmax, and counts class-index targets without building one-hot
labels; under ``torch.compile`` it takes branch-free forms. These tests hold every path to
the plain definitions: ``max(1).indices`` (first maximum on ties), one-hot products and sums.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

import metricc
from metricc.runtime.averages import predicted
from metricc.runtime.counts import masked_counts
from metricc.runtime.modes import class_rows, look_up_mode

F64 = torch.float64


@st.composite
def multiclass_batches(draw: st.DrawFn) -> dict:
    n = draw(st.integers(1, 3))
    c = draw(st.integers(2, 5))
    m = draw(st.integers(1, 6))
    # logits from a few values: ties are common, and so are classes absent from the target
    x = torch.tensor(draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.0]), min_size=n * c * m,
                                   max_size=n * c * m)), dtype=F64).view(n, c, m)
    t = torch.tensor(draw(st.lists(st.integers(0, c - 1), min_size=n * m, max_size=n * m))
                     ).view(n, m)
    ignore = draw(st.sampled_from([None, 0, c - 1]))
    classes = draw(st.sampled_from([None, [c - 1, 0], [1]]))
    need = torch.tensor(draw(st.lists(st.booleans(), min_size=n * c, max_size=n * c))).view(n, c)
    # micro averages weigh elements by class weight: a weight of 0 predicts nothing
    cw = draw(st.none() | st.lists(st.sampled_from([0.0, 1.0]), min_size=c, max_size=c))
    return {"x": x, "t": t, "ignore": ignore, "classes": classes, "need": need, "cw": cw}


def _reference_hits(x: torch.Tensor, cols: list[int], ew: torch.Tensor | None) -> torch.Tensor:
    idx = x.max(1).indices
    hits = torch.stack([idx == j for j in cols], 1)  # (N, K, M)
    if ew is not None:
        hits = hits & ew
    return hits.any(-1)


@settings(max_examples=150)
@given(multiclass_batches())
def test_multiclass_presence_is_the_argmax_rule(b: dict) -> None:
    r = class_rows(b["x"], b["t"], look_up_mode("multiclass"), True, b["ignore"], b["classes"], None)
    n, k, m = r.s.shape
    cols = b["classes"] or list(range(b["x"].shape[1]))
    need = b["need"][:, :k]
    w = None if r.mask is None else r.mask.to(F64).expand(n, k, m)
    if b["cw"] is not None:
        cw = torch.tensor([b["cw"][j] for j in cols], dtype=F64).view(1, k, 1)
        w = cw.expand(n, k, m) if w is None else w * cw
    want = _reference_hits(b["x"], cols, None if w is None else w > 0)
    traced = predicted(r, None, element_weights=w)
    assert torch.equal(traced, want)
    eager = predicted(r, need, element_weights=w)
    assert torch.equal(eager[need], want[need])
    assert not (eager & ~want).any()  # elsewhere exact or False


@pytest.mark.parametrize("mode", ["binary", "multilabel"])
@pytest.mark.parametrize("ignore", [None, 1])
def test_threshold_presence(mode: str, ignore: int | None) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 5, generator=gen, dtype=F64) - 1.5
    x[0, 2] = 0.0  # exactly at the threshold: predicted
    y = (torch.rand(3, 4, 5, generator=gen) < 0.2).to(F64)
    if ignore is not None:
        y[1, :, :3] = ignore
    if mode == "binary":
        x, y = x[:, :1], y[:, :1]
    r = class_rows(x, y, look_up_mode(mode), True, ignore, None, None)
    want = r.s >= 0
    if r.mask is not None:
        want = want & r.mask
    need = torch.ones(r.s.shape[:2], dtype=torch.bool)
    for got in (predicted(r, None, r.mask), predicted(r, need, r.mask)):
        assert torch.equal(got, want.any(-1))


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_index_counts_equal_one_hot_counts(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(4, 6, 300, generator=gen, dtype=dtype)
    t = torch.randint(0, 6, (4, 1, 300), generator=gen)
    t[t == 4] = 3  # class 4 absent
    onehot = (t == torch.arange(6).view(1, 6, 1)).to(dtype)
    tol = 1e-12 if dtype == F64 else 1e-6
    for got, want in zip(masked_counts(a, t, None, overwrite=False),
                         masked_counts(a.clone(), onehot, None, overwrite=False), strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


OPTIONS = [
    {"average": "macro"},
    {"average": "weighted"},
    {"average": "none"},
    {"average": "micro", "multidim_average": "samplewise"},
    {"average": "macro", "multidim_average": "samplewise"},
    {"average": "none", "multidim_average": "samplewise", "reduction": "none"},
    {"average": "macro", "ignore_index": 0},
    {"average": "macro", "classes": [3, 1]},
    {"average": "weighted", "class_weights": [1.0, 0.0, 2.0, 1.0, 0.5]},
    {"average": "micro", "multidim_average": "samplewise", "class_weights": [0, 1, 1, 0, 1],
     "ignore_index": 2},
]


@pytest.mark.parametrize("relaxation", ["linear", "anyloss"])
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_eager_fast_paths_equal_the_traced_forms(monkeypatch: pytest.MonkeyPatch, opts: dict,
                                                 relaxation: str) -> None:
    """Loss and gradient with the eager shortcuts = with the forms ``torch.compile`` traces."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(-1, 2, (3, 5, 4, 4), generator=gen).to(F64)  # ties everywhere
    x[2] = torch.randn(5, 4, 4, generator=gen, dtype=F64)
    t = torch.randint(0, 3, (3, 4, 4), generator=gen)  # classes 3 and 4 absent
    t[1] = 0  # sample 1: one class only
    loss = metricc.compile("dice").loss(relaxation, mode="multiclass", from_logits=True, **opts)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xx = x.clone().requires_grad_(True)
        out = loss(xx, t)
        out.sum().backward()
        return out.detach(), xx.grad

    v_eager, g_eager = run()
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    v_traced, g_traced = run()
    torch.testing.assert_close(v_eager, v_traced, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g_eager, g_traced, rtol=1e-10, atol=1e-14)
