"""``memory_decay`` keeps its counts in float64 whatever the module is cast to."""

from __future__ import annotations

import pytest
import torch

import metricc


def _batch(seed: int, n: int = 200_000) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g), (torch.rand(n, generator=g) < 0.3).float()


@pytest.mark.parametrize("cast", ["half", "bfloat16", "to_half", "double", "float"])
@pytest.mark.parametrize("name", ["f1", "mcc"])
def test_module_casts_keep_the_memory_float64(cast: str, name: str) -> None:
    loss = metricc.compile(name).loss(from_logits=True, memory_decay=0.9)
    reference = metricc.compile(name).loss(from_logits=True, memory_decay=0.9)
    x, y = _batch(0)
    loss(x, y)
    reference(x, y)
    before = loss.pool.memory.clone()
    assert before.dtype == torch.float64 and before.max() > 65504  # beyond float16's range
    moved = {"half": loss.half, "bfloat16": loss.bfloat16, "double": loss.double, "float": loss.float,
             "to_half": lambda: loss.to("cpu", torch.float16)}[cast]()
    assert moved is loss
    assert loss.pool.memory.dtype == torch.float64
    assert torch.equal(loss.pool.memory, before)
    x2, y2 = _batch(1)
    got = loss(x2, y2)
    want = reference(x2, y2)
    assert torch.isfinite(got)
    torch.testing.assert_close(got.double(), want.double(), rtol=1e-4, atol=1e-6)
