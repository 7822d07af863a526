"""State that survives what training does to a loss: casts, activation checkpointing,
checkpoints of other constraints, ``torch.compile(fullgraph=True)`` with memory; and the
``(N, 1, *)`` binary input of one-channel segmentation models."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import metricc

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINED = "precision subject to recall >= 0.9"


def _batches(n: int = 3, size: int = 40) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(size, generator=g, dtype=torch.float64),
             (torch.rand(size, generator=g) < 0.4).double()) for _ in range(n)]


@pytest.mark.parametrize("cast", ["half", "bfloat16", "float32"])
def test_casts_keep_the_multipliers_float64(cast: str) -> None:
    loss = metricc.compile(CONSTRAINED).loss(from_logits=True, memory_decay=0.5)
    x, y = _batches(1)[0]
    loss(x.float(), y.float())
    lam = loss.multipliers.clone()
    model = torch.nn.Sequential(loss)
    model.half() if cast == "half" else model.to(getattr(torch, cast))
    assert loss.multipliers.dtype == torch.float64 and torch.equal(loss.multipliers, lam)
    assert loss.constraint_values.dtype == torch.float64
    assert loss.objective.pool.memory.dtype == torch.float64
    loss(x.to(getattr(torch, "float16" if cast == "half" else cast)), y.float())
    assert loss.multipliers.dtype == torch.float64


@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
def test_checkpointing_updates_the_memory_once_per_step(backward: str) -> None:
    m = metricc.compile("mcc")
    plain = m.loss(memory_decay=0.8, from_logits=True, backward=backward)
    ckpt = m.loss(memory_decay=0.8, from_logits=True, backward=backward)
    for x, y in _batches():
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        v1 = plain(x1, y)
        v1.backward()
        v2 = checkpoint(ckpt, x2, y, use_reentrant=False)
        v2.backward()  # runs ckpt's forward a second time
        assert float(v2) == pytest.approx(float(v1), abs=1e-12)
        torch.testing.assert_close(x2.grad, x1.grad, rtol=0, atol=1e-12)
        torch.testing.assert_close(ckpt.pool.memory, plain.pool.memory, rtol=0, atol=1e-12)


def test_checkpointing_steps_the_multipliers_once_per_step() -> None:
    m = metricc.compile(CONSTRAINED)
    plain = m.loss(from_logits=True, multiplier_lr=0.5, memory_decay=0.5)
    ckpt = m.loss(from_logits=True, multiplier_lr=0.5, memory_decay=0.5)
    for x, y in _batches():
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        plain(x1, y).backward()
        checkpoint(ckpt, x2, y, use_reentrant=False).backward()
        torch.testing.assert_close(x2.grad, x1.grad, rtol=0, atol=1e-12)
        assert torch.equal(ckpt.multipliers, plain.multipliers)
    assert float(plain.multipliers.sum()) > 0  # the steps did happen


def test_loading_a_checkpoint_of_other_constraints_names_the_difference() -> None:
    a = metricc.compile("precision subject to recall >= 0.9").loss()
    a.multipliers.fill_(0.25)
    state = a.state_dict()
    assert set(state) == {"multipliers"}
    same = metricc.compile("precision subject to recall >= 0.9").loss()
    same.load_state_dict(state)
    assert float(same.multipliers[0]) == 0.25
    other = metricc.compile("precision subject to recall >= 0.8").loss()
    with pytest.raises(metricc.MetricError, match=r"recall >= 0\.9.*recall >= 0\.8"):
        other.load_state_dict(state)
    two = metricc.compile("precision subject to recall >= 0.9, fpr <= 0.1").loss()
    with pytest.raises(metricc.MetricError, match=r"fpr <= 0\.1"):
        two.load_state_dict(state)
    # a state dict saved before checkpoints named their constraints: compared by count
    old = {"multipliers": torch.zeros(1, dtype=torch.float64)}
    with pytest.raises(metricc.MetricError, match="multipliers for 1 constraints"):
        two.load_state_dict(old)
    other.load_state_dict(old)


def test_memory_compiles_with_fullgraph_in_a_fresh_process() -> None:
    """Without breaks (dynamo's cache would hide a break after a non-fullgraph compile, so
    this runs alone in its own process); values equal the eager loss batch after batch."""
    code = textwrap.dedent("""
        import torch, metricc
        m = metricc.compile("f1")
        eager = m.loss(memory_decay=0.5, from_logits=True)
        compiled = torch.compile(m.loss(memory_decay=0.5, from_logits=True), fullgraph=True,
                                 backend="aot_eager")
        y = (torch.arange(64) % 3 == 0).float()
        for i in range(3):
            x = torch.randn(64, generator=torch.Generator().manual_seed(i))
            xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
            ve, vc = eager(xe, y), compiled(xc, y)
            ve.backward(); vc.backward()
            assert abs(float(ve) - float(vc)) < 1e-6, (float(ve), float(vc))
            assert torch.allclose(xe.grad, xc.grad, rtol=1e-5, atol=1e-8)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.parametrize("options", [{}, {"multidim_average": "samplewise"},
                                     {"backward": "autograd"}])
def test_binary_input_with_one_channel_equals_the_input_without_it(options: dict) -> None:
    loss = metricc.compile("dice").loss(from_logits=True, **options)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 1, 6, 5, generator=g, dtype=torch.float64).requires_grad_()
    y = (torch.rand(2, 6, 5, generator=g) < 0.3).double()
    with_channel, without = loss(x, y), loss(x[:, 0], y)
    assert float(with_channel) == float(without)
    (g1,) = torch.autograd.grad(with_channel, x)
    (g2,) = torch.autograd.grad(without, x)
    assert torch.equal(g1, g2)
    with pytest.raises(metricc.MetricError, match="same shape"):
        loss(torch.randn(2, 2, 6, 5), y)  # two channels are not one binary score
