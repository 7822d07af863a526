"""Loss modules and metrics pickle (by formula, parameters and options), and survive deepcopy,
state_dict round trips and torch.save of a model that holds the loss."""

from __future__ import annotations

import copy
import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import metricc

ROOT = Path(__file__).resolve().parents[1]


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(64, generator=g), (torch.rand(64, generator=g) < 0.3).float()


@pytest.mark.parametrize(("formula", "params", "options"), [
    ("f1", {}, {"from_logits": True}),
    ("fbeta", {"beta": 2.0}, {"relaxation": "linear", "from_logits": True, "eps": 1e-6}),
    ("TP/(TP + b*FP)", {"b": 0.5}, {"relaxation": "sigmoid", "from_logits": True, "slope": 3.0}),
    ("mcc", {}, {"from_logits": True, "memory_decay": 0.5}),
])
def test_loss_pickles_and_deepcopies(formula: str, params: dict, options: dict) -> None:
    loss = metricc.compile(formula, **params).loss(**options)
    x, y = _batch()
    loss(x, y)  # fills the memory where there is one
    for make in (lambda m: pickle.loads(pickle.dumps(m)), copy.deepcopy):
        clone = make(loss)
        assert type(clone) is type(loss)  # same process: compile's cache gives the same class
        assert repr(clone) == repr(loss)
        if loss.pool is not None:
            torch.testing.assert_close(clone.pool.memory, loss.pool.memory)
            assert clone.pool.memory is not loss.pool.memory
        x2, y2 = _batch(1)
        torch.testing.assert_close(clone(x2, y2), loss(x2, y2))


def test_metric_pickles() -> None:
    m = metricc.compile("tversky", alpha=0.3, beta=0.7)
    back = pickle.loads(pickle.dumps(m))
    assert back is m  # rebuilt through compile's cache
    custom = metricc.compile("TP/(TP + FP + FN)", higher_is_better=True)
    assert pickle.loads(pickle.dumps(custom)).expr == custom.expr


def test_multiclass_loss_pickles_with_its_class_options() -> None:
    loss = metricc.compile("dice").loss(mode="multiclass", from_logits=True, ignore_index=255,
                                        classes=[0, 2], class_weights=[1.0, 2.0, 3.0],
                                        temperature=0.5)
    clone = pickle.loads(pickle.dumps(loss))
    x = torch.randn(2, 3, 4, 4)
    y = torch.randint(0, 3, (2, 4, 4))
    y[0, 0, 0] = 255
    torch.testing.assert_close(clone(x, y), loss(x, y))


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)
        self.criterion = metricc.compile("f1").loss(from_logits=True)


def test_torch_save_of_a_model_holding_the_loss() -> None:
    net = _Net()
    buf = io.BytesIO()
    torch.save(net, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    x, y = torch.randn(16, 3), (torch.rand(16) < 0.5).float()
    torch.testing.assert_close(back.criterion(back.linear(x).squeeze(1), y),
                               net.criterion(net.linear(x).squeeze(1), y))
    # state_dict round trip still works (the loss holds no persistent state)
    fresh = _Net()
    fresh.load_state_dict(net.state_dict())


UNPICKLE = """
import pickle, sys, torch
loss = pickle.loads(sys.stdin.buffer.read())
x = torch.tensor([2.0, -1.0, 0.5, -3.0]); y = torch.tensor([1.0, 0.0, 1.0, 1.0])
print(type(loss).__name__, round(float(loss(x, y)), 6), loss.pool.memory.dtype)
"""


def test_unpickled_in_a_fresh_process() -> None:
    """What mp.spawn does with a loss argument: the child never compiled the metric."""
    loss = metricc.compile("TP/(TP + 0.5*FP + 0.5*FN)").loss(from_logits=True, memory_decay=0.9)
    x = torch.tensor([2.0, -1.0, 0.5, -3.0])
    y = torch.tensor([1.0, 0.0, 1.0, 1.0])
    loss(x, y)
    expected = loss(x, y)  # with one remembered batch
    loss.reset_memory()
    loss(x, y)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", UNPICKLE], input=pickle.dumps(loss), env=env,
                         capture_output=True, check=True, timeout=120)
    name, value, dtype = out.stdout.decode().split()
    assert name == "CustomMetricLoss" and dtype == "torch.float64"
    assert float(value) == pytest.approx(float(expected), abs=1e-6)


CONSTRAINED = """
import pickle, sys, torch
loss = pickle.loads(sys.stdin.buffer.read()).eval()
x = torch.tensor([2.0, -1.0, 0.5, -3.0, 1.5]); y = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
print(type(loss).__name__, repr(float(loss(x, y))), *loss.multipliers.tolist())
"""


def test_constrained_loss_pickles_deepcopies_and_saves_with_its_multipliers() -> None:
    """A constraint's side (``TP/(TP+FP+FN)`` of ``... >= 0.3``) has no formula of its own:
    its kernels come back as that constraint of the recompiled metric, in this process and
    in one that never compiled it."""
    m = metricc.compile("precision subject to TP/(TP + FP + FN) >= 0.3",
                        constraints=["recall >= 0.9"])
    loss = m.loss(from_logits=True, memory_decay=0.5, multiplier_lr=0.5)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, generator=gen), (torch.rand(64, generator=gen) < 0.4).float()
    loss(x.requires_grad_(True), y).backward()  # one training step: a multiplier moves
    loss.eval()
    assert float(loss.multipliers.max()) > 0
    buf = io.BytesIO()
    torch.save(loss, buf)
    buf.seek(0)
    copies = [pickle.loads(pickle.dumps(loss)), copy.deepcopy(loss),
              torch.load(buf, weights_only=False)]
    for back in copies:
        assert type(back) is type(loss) and back.labels == loss.labels
        assert torch.equal(back.multipliers, loss.multipliers)
        assert torch.equal(back(x, y), loss(x, y))  # the remembered counts came along
    xs = torch.tensor([2.0, -1.0, 0.5, -3.0, 1.5])
    ys = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", CONSTRAINED], input=pickle.dumps(loss), env=env,
                         capture_output=True, check=True, timeout=120)
    name, value, *lams = out.stdout.decode().split()
    assert name == "ConstrainedLoss" and [float(v) for v in lams] == loss.multipliers.tolist()
    assert float(value) == float(loss(xs, ys))
