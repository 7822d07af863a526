"""A loss's state across calls (issue 36, points 2 and 7): validation under ``no_grad`` or
``inference_mode`` reads the ``memory_decay`` memory and the multipliers and leaves them alone;
``checkpoint(..., use_reentrant=True)`` steps a constrained loss every step; K x K losses with
memory compile (in process and as a standalone file); ranks whose inputs differ in dtype
train instead of aborting; formulas with constants past float's range emit valid code or are
refused at compile time."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
import sympy
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.checkpoint import checkpoint

import metricc
from metricc.emit.printer import MetricPrinter

ROOT = Path(__file__).resolve().parents[1]
F64 = torch.float64
CONSTRAINED = "precision subject to recall >= 0.8"


def _binary(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = (torch.arange(24) % 3 == 0).to(F64)
    return torch.randn(24, generator=g, dtype=F64) + 1.5 * y, y


def _classes(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(24, 4, generator=g, dtype=F64), torch.arange(24) % 4


#: name -> (metric, loss options, batch maker, how to read the loss's state)
LOSSES: dict[str, tuple[str, dict[str, Any], Callable[[int], Any]]] = {
    "counts_symbolic": ("f1", {}, _binary),
    "counts_autograd": ("f1", {"backward": "autograd"}, _binary),
    "counts_multiclass": ("f1", {"mode": "multiclass"}, _classes),
    "matrix_symbolic": ("quadratic_kappa", {}, _classes),
    "matrix_autograd": ("quadratic_kappa", {"backward": "autograd"}, _classes),
    "curve": ("auroc", {}, _binary),
    "constrained": (CONSTRAINED, {"multiplier_lr": 0.5}, _binary),
}


def _state(loss: Any) -> list[torch.Tensor]:
    """Every tensor the loss keeps across calls: memories and multipliers."""
    out = [b.clone() for name, b in loss.named_buffers()
           if b is not None and "constraint_values" not in name]
    assert out, "the loss keeps no state"
    return out


def _make(name: str) -> tuple[Any, Callable[[int], Any]]:
    metric, options, batch = LOSSES[name]
    return metricc.compile(metric).loss(from_logits=True, memory_decay=0.9, **options), batch


def _step(loss: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_()
    value = loss(x, y)
    value.backward()
    return value.detach()


VALIDATION: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}


@pytest.mark.parametrize("context", list(VALIDATION))
@pytest.mark.parametrize("name", list(LOSSES))
def test_validation_reads_the_state_and_leaves_it_alone(name: str, context: str) -> None:
    """The issue's loop: a training step, then a validation pass under no_grad (the loss is
    no submodule of the model, so it stays in training mode), then a training step. The
    validation value is the one a training step would give at that point (the memory and
    multipliers are read), and the next step equals that of a run without validation."""
    loss, batch = _make(name)
    _step(loss, *batch(0))
    reference = copy.deepcopy(loss)
    before = _state(loss)
    with VALIDATION[context]():
        seen = loss(*batch(1))
    for a, b in zip(before, _state(loss), strict=True):
        assert torch.equal(a, b), name
    # what a training-mode call at this point reads: the same memory and multipliers
    assert float(seen) == pytest.approx(float(copy.deepcopy(reference)(*batch(1)).detach()),
                                        rel=0, abs=1e-12)
    after = _step(loss, *batch(2))
    expected = _step(reference, *batch(2))
    assert float(after) == float(expected)
    for a, b in zip(_state(reference), _state(loss), strict=True):
        assert torch.equal(a, b), name


def test_the_issue_numbers_next_training_loss_is_the_one_without_validation() -> None:
    """The trial's symptom: with the loss outside the model, model.eval() leaves it in
    training mode, and the validation batch went into the memory."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    loss = metricc.compile("f1").loss(from_logits=True, memory_decay=0.9)
    alone = copy.deepcopy(loss)
    g = torch.Generator().manual_seed(1)
    x, x_val = torch.randn(32, 3, generator=g, dtype=F64), torch.randn(32, 3, generator=g, dtype=F64)
    y, y_val = (x[:, 0] > 0).to(F64), (x_val[:, 0] < 0).to(F64)  # validation: the other way
    loss(model(x).squeeze(1), y)
    alone(model(x).squeeze(1), y)
    model.eval()
    with torch.no_grad():
        loss(model(x_val).squeeze(1), y_val)
    model.train()
    assert float(loss(model(x).squeeze(1), y)) == float(alone(model(x).squeeze(1), y))


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointing_steps_the_multipliers_and_memory_like_the_plain_loss(reentrant: bool
                                                                           ) -> None:
    """use_reentrant=True runs the first forward under no_grad (not a step) and the
    recomputation in the backward (the step): the multipliers used to freeze after one."""
    m = metricc.compile(CONSTRAINED)
    plain: Any = m.loss(from_logits=True, multiplier_lr=0.5, memory_decay=0.5)
    ckpt: Any = m.loss(from_logits=True, multiplier_lr=0.5, memory_decay=0.5)
    for i in range(5):
        x, y = _binary(i)
        x = x - 2.0  # recall below 0.8: the multiplier climbs
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        v1 = plain(x1, y)
        v1.backward()
        v2 = checkpoint(ckpt, x2, y, use_reentrant=reentrant)
        v2.backward()
        assert float(v2.detach()) == pytest.approx(float(v1.detach()), abs=1e-12)
        torch.testing.assert_close(x2.grad, x1.grad, rtol=0, atol=1e-12)
        assert torch.equal(ckpt.multipliers, plain.multipliers), i
        for a, b in zip(_state(plain), _state(ckpt), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert float(plain.multipliers.sum()) > 1.0  # several steps happened, not one


@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
def test_checkpointing_with_reentrant_updates_the_memory_once_per_step(backward: str) -> None:
    m = metricc.compile("quadratic_kappa")
    plain: Any = m.loss(memory_decay=0.8, from_logits=True, backward=backward)
    ckpt: Any = m.loss(memory_decay=0.8, from_logits=True, backward=backward)
    for i in range(4):
        x, y = _classes(i)
        v1 = _step(plain, x, y)
        x2 = x.clone().requires_grad_()
        v2 = checkpoint(ckpt, x2, y, use_reentrant=True)
        v2.backward()
        assert float(v2.detach()) == pytest.approx(float(v1), abs=1e-12)
        torch.testing.assert_close(ckpt.pool.memory, plain.pool.memory, rtol=0, atol=1e-12)


def test_matrix_memory_compiles_in_process_and_as_a_standalone_file(tmp_path: Path) -> None:
    """torch.compile of a K x K loss with memory_decay, with and without fullgraph, and of the
    standalone file (``metricc compile quadratic_kappa``): values and gradients equal the eager
    loss batch after batch (a fresh process: dynamo's cache would hide a graph break)."""
    from metricc.cli import main

    out = tmp_path / "qwk_loss.py"
    assert main(["compile", "quadratic_kappa", "--option", "from_logits=True", "-o", str(out)]) == 0
    code = textwrap.dedent(f"""
        import importlib.util, torch, metricc
        spec = importlib.util.spec_from_file_location("qwk_standalone", {str(out)!r})
        standalone = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(standalone)
        m = metricc.compile("quadratic_kappa")
        makers = [("fullgraph", lambda: m.loss(from_logits=True, memory_decay=0.5), True),
                  ("autograd", lambda: m.loss(from_logits=True, memory_decay=0.5,
                                              backward="autograd"), True),
                  ("standalone", lambda: standalone.QuadraticKappaLoss(memory_decay=0.5), True),
                  ("graph breaks allowed", lambda: m.loss(from_logits=True, memory_decay=0.5),
                   False)]
        for label, make, fullgraph in makers:
            eager = make()
            compiled = torch.compile(make(), fullgraph=fullgraph, backend="aot_eager")
            for i in range(3):
                g = torch.Generator().manual_seed(i)
                x = torch.randn(32, 4, generator=g)
                y = torch.randint(0, 4, (32,), generator=g)
                xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
                ve, vc = eager(xe, y), compiled(xc, y)
                ve.backward(); vc.backward()
                assert abs(float(ve) - float(vc)) < 1e-6, (label, float(ve), float(vc))
                assert torch.allclose(xe.grad, xc.grad, rtol=1e-5, atol=1e-8), label
            assert torch.allclose(eager.pool.memory, compiled.pool.memory), label
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=900)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


# --- constants past float's range -------------------------------------------------------------

def test_a_min_with_an_overflowing_constant_trains_as_the_formula_without_it() -> None:
    """``min(j, exp(3e39))`` is ``j`` for every float: the loss used to raise NameError 'inf'."""
    clamped = metricc.compile("sum(i, j, min(j, exp(3e39)))/(n+1) + multiclass_accuracy")
    plain = metricc.compile("sum(i, j, j)/(n+1) + multiclass_accuracy")
    x, y = _classes(3)
    for backward in ("symbolic", "autograd"):
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        a = clamped.loss(from_logits=True, backward=backward)(x1, y)
        b = plain.loss(from_logits=True, backward=backward)(x2, y)
        a.backward()
        b.backward()
        assert float(a) == pytest.approx(float(b), abs=1e-12)
        torch.testing.assert_close(x1.grad, x2.grad, rtol=0, atol=1e-12)
    assert clamped.verify().ok


def test_a_max_with_an_overflowing_constant_is_refused_at_compile_time() -> None:
    with pytest.raises(metricc.MetricError, match=r"overflows a float.*max\(\)"):
        metricc.compile("sum(i, j, max(j, exp(3e39)))/(n+1) + multiclass_accuracy").loss()


@settings(max_examples=30, deadline=None)
@given(exponent=st.floats(min_value=710.0, max_value=1e300), side=st.sampled_from(["min", "max"]),
       sign=st.sampled_from([1, -1]))
def test_printer_drops_a_bound_that_never_binds_and_refuses_one_that_always_does(
        exponent: float, side: str, sign: int) -> None:
    """``exp(exponent)`` is past float's range: ``min(TP, +big)`` and ``max(TP, -big)`` are
    ``TP``; ``min(TP, -big)`` and ``max(TP, +big)`` are the overflowing constant."""
    tp = sympy.Symbol("TP")
    big = sign * sympy.exp(sympy.Float(exponent))
    expr = (sympy.Min if side == "min" else sympy.Max)(tp, big, evaluate=False)
    never_binds = (side == "min") == (sign > 0)
    if never_binds:
        assert MetricPrinter().doprint(expr) == "TP"
    else:
        with pytest.raises(metricc.MetricError, match="overflows a float"):
            MetricPrinter().doprint(expr)


# --- DDP: inputs of another dtype on each rank -------------------------------------------------

@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                    reason="torch built without the gloo backend")
def test_ranks_with_inputs_of_different_dtypes_train_instead_of_aborting(tmp_path: Path) -> None:
    """Rank 0 float32, rank 1 float64 (``tests/state_ddp_worker.py``): gloo used to abort a
    rank (SIGABRT) on the all-reduce of unequal dtypes. Each rank's loss is the global one:
    the loss of both shards together on one process."""
    sys.path.insert(0, str(Path(__file__).parent))
    import state_ddp_worker as worker
    from ddp_launch import rank_logs, run_ranks

    runs, folder = run_ranks(Path(worker.__file__), 2, lambda: tmp_path)
    assert all(r.returncode == 0 for r in runs), rank_logs(runs)
    saved = [torch.load(folder / f"rank{r}.pt") for r in range(2)]
    for name, (metric, options, shape) in worker.SCENARIOS.items():
        shards = [worker.shard(shape, rank) for rank in range(2)]
        x = torch.cat([s[0].to(F64) for s in shards])
        y = torch.cat([s[1].to(F64) if s[1].is_floating_point() else s[1] for s in shards])
        ref = float(metricc.compile(metric).loss(**options)(x, y))
        for rank in range(2):
            status, value = saved[rank][name][:2]
            assert status == "ok", (name, rank, saved[rank][name])
            assert float(value) == pytest.approx(ref, abs=1e-5), (name, rank)
