"""The compiled multiclass loss on logits (``metricc/runtime/logit_grad.py``) equals eager.

Under ``torch.compile`` a softmax loss on class indices forms the whole logit gradient in
its forward; eager mode keeps the softmax under autograd. These tests hold the compiled
values and gradients to eager ones in float64, and check that the path is taken.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import metricc
import metricc.runtime.loss as loss_module

F64 = torch.float64
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
METRICS = {"dice": {}, "tversky": {"alpha": 0.3, "beta": 0.7}, "mcc": {}}


def _spy(monkeypatch: pytest.MonkeyPatch, traced_only: bool) -> list[bool]:
    """Whether each (traced, or every) loss call went through a logit-gradient Function."""
    seen: list[bool] = []
    inner = loss_module.softmax_index_loss

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = inner(*args, **kwargs)
        if torch.compiler.is_compiling() or not traced_only:
            seen.append(out is not None)
        return out

    monkeypatch.setattr(loss_module, "softmax_index_loss", spy)
    return seen


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each traced loss went through the logit-gradient Function."""
    return _spy(monkeypatch, traced_only=True)


def _batch(seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = 3 * torch.randn(2, 4, 5, 6, generator=gen, dtype=F64)
    t = torch.randint(0, 3, (2, 5, 6), generator=gen)  # class 3 absent from the target
    x[0, :, 0, :2] = 0.0  # ties: the first maximum is the prediction
    return x, t


def _value_and_grad(loss: Loss, x: torch.Tensor, t: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    xx = x.clone().requires_grad_(True)
    value = loss(xx, t)
    # an incoming gradient other than 1: the backward scales by it
    (grad,) = torch.autograd.grad(value, xx, grad_outputs=torch.full_like(value, -2.5))
    return value.detach(), grad


def _assert_same(loss: Loss, reference: Loss, x: torch.Tensor, t: torch.Tensor) -> None:
    """``loss`` and ``reference`` give the same value and input gradient, in float64."""
    v, g = _value_and_grad(loss, x, t)
    v_ref, g_ref = _value_and_grad(reference, x, t)
    torch.testing.assert_close(v, v_ref, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize(("metric", "relaxation", "temperature", "options"), [
    ("dice", "linear", 1.0, {"average": "macro"}),
    ("tversky", "softmax", 0.5, {"average": "weighted", "class_weights": [1.0, 0.5, 2.0, 1.0]}),
    ("mcc", "softmax", 1.0, {"average": "macro"}),
    ("mcc", "softmax", 0.5, {"average": "weighted"}),
], ids=lambda v: v if isinstance(v, str) else None)
def test_compiled_softmax_loss_equals_eager(metric: str, relaxation: str, temperature: float,
                                            options: dict, taken: list[bool]) -> None:
    """``aot_eager`` runs AOTAutograd's partitioned forward and backward without the C++
    build; the next test pays for Inductor once."""
    x, t = _batch()
    sharpen = {} if relaxation == "linear" else {"temperature": temperature}  # softmax's own
    loss = metricc.compile(metric, **METRICS[metric]).loss(
        relaxation, mode="multiclass", from_logits=True, **sharpen, **options)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager", dynamic=False)
    _assert_same(compiled, loss, x, t)
    assert taken and all(taken)


def test_inductor_softmax_loss_equals_eager(taken: list[bool]) -> None:
    """The real thing once: Inductor fuses the softmax, counts and gradient."""
    torch._dynamo.reset()
    x, t = _batch()
    loss = metricc.compile("dice").loss("linear", mode="multiclass", from_logits=True)
    compiled = torch.compile(loss, fullgraph=True, dynamic=False)
    _assert_same(compiled, loss, x, t)
    assert taken and all(taken)


def test_compiled_softmax_loss_with_memory_equals_eager(taken: list[bool]) -> None:
    """With ``memory_decay`` the coefficients come from the remembered counts. The memory's
    inference-mode checks break the graph, so the Function then runs eagerly on the
    compact indices traced for it."""
    losses = [metricc.compile("tversky", alpha=0.3, beta=0.7).loss(
        "softmax", mode="multiclass", from_logits=True, temperature=0.5, memory_decay=0.8)
        for _ in range(2)]
    compiled = torch.compile(losses[1], backend="aot_eager", dynamic=False)
    for step in range(3):
        x, t = _batch(step)
        _assert_same(compiled, losses[0], x, t)
    torch.testing.assert_close(losses[1].pool.memory, losses[0].pool.memory, rtol=1e-12, atol=0)
    assert taken and all(taken)


def test_other_options_keep_the_general_path(taken: list[bool]) -> None:
    """One-hot targets, ``average='none'`` and probabilities are not for this path."""
    x, t = _batch()
    onehot = torch.nn.functional.one_hot(t, 4).movedim(-1, 1).to(F64)
    dice = metricc.compile("dice")
    cases = [(dice.loss("linear", mode="multiclass", from_logits=True), onehot),
             (dice.loss("linear", mode="multiclass", from_logits=True, average="none"), t),
             (dice.loss("anyloss", mode="multiclass", from_logits=True), t)]
    for loss, target in cases:
        compiled = torch.compile(loss, fullgraph=True, backend="aot_eager", dynamic=False)
        _assert_same(lambda a, b, f=compiled: f(a, b).sum(),
                     lambda a, b, f=loss: f(a, b).sum(), x, target)
    assert taken and not any(taken)


@pytest.fixture
def taken_eager(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each eager loss went through the logit-gradient Function."""
    return _spy(monkeypatch, traced_only=False)


@pytest.mark.parametrize("metric", list(METRICS))
@pytest.mark.parametrize(("relaxation", "temperature"), [("linear", 1.0), ("softmax", 0.5),
                                                         (None, 1.0)])
@pytest.mark.parametrize("options", [{}, {"average": "weighted"},
                                     {"class_weights": [1.0, 2.0, 0.5, 3.0]}],
                         ids=["macro", "weighted", "class_weights"])
def test_eager_softmax_loss_equals_autograd(metric: str, relaxation: str | None,
                                           temperature: float, options: dict,
                                           taken_eager: list[bool]) -> None:
    """On the CPU the eager Function's backward forms the logit gradient itself; autograd
    through the plain ops (``backward="autograd"``, one-hot labels, torch's softmax) is the
    reference. Class 3 has neither target nor prediction and ties decide predictions."""
    x, t = _batch()
    m = metricc.compile(metric, **METRICS[metric])
    sharpen = {} if relaxation == "linear" else {"temperature": temperature}  # softmax's own
    common = {"mode": "multiclass", "from_logits": True, **sharpen, **options}
    ours = m.loss(relaxation, **common)
    ref = m.loss(relaxation, backward="autograd", **common)
    _assert_same(ours, ref, x, t)
    assert taken_eager == [True, False]  # ours took it; the autograd reference did not


def test_eager_softmax_loss_with_memory_and_half_inputs(taken_eager: list[bool]) -> None:
    """Remembered counts give the coefficients (reference: the autograd backward over
    three steps); float16 and bfloat16 logits give a float32 loss and a gradient in their
    own dtype, close to the same logits' in float32 (the softmax runs in the input's dtype,
    as on the general path)."""
    ours, ref = (metricc.compile("dice").loss("linear", mode="multiclass", from_logits=True,
                                              memory_decay=0.7, backward=b)
                 for b in ("symbolic", "autograd"))
    for step in range(3):
        x, t = _batch(step)
        _assert_same(ours, ref, x, t)
    assert taken_eager == [True, False] * 3
    x, t = _batch()
    plain = metricc.compile("dice").loss("linear", mode="multiclass", from_logits=True)
    for dtype in (torch.float16, torch.bfloat16):
        v, g = _value_and_grad(plain, x.to(dtype), t)
        v32, g32 = _value_and_grad(plain, x.to(dtype).float(), t)
        assert v.dtype == torch.float32 and g.dtype == dtype
        torch.testing.assert_close(v, v32, rtol=1e-2, atol=1e-3)
        torch.testing.assert_close(g.float(), g32, rtol=5e-2, atol=1e-3)


def test_eager_backward_can_run_twice(taken_eager: list[bool]) -> None:
    """The eager backward reuses a saved buffer only when no later backward reads it: a
    first backward with ``retain_graph=True`` leaves the second one the same gradient."""
    x, t = _batch()
    loss = metricc.compile("dice").loss("linear", mode="multiclass", from_logits=True)
    xx = x.clone().requires_grad_(True)
    out = loss(xx, t)
    (g1,) = torch.autograd.grad(out, xx, retain_graph=True)
    (g2,) = torch.autograd.grad(out, xx)
    assert taken_eager == [True]
    torch.testing.assert_close(g1, g2, rtol=0, atol=0)
    _assert_same(loss, metricc.compile("dice").loss("linear", mode="multiclass",
                                                    from_logits=True, backward="autograd"),
                 x, t)


def test_unchecked_indices_take_the_fast_path_when_in_range(taken_eager: list[bool]) -> None:
    """``validate_args=False`` skips the checks that raise, not the fast path: indices in
    ``[0, C)`` are read once and counted by gather and bincount, as checked ones are (same
    value and gradient); indices outside it take the general path, which counts them for
    no class as a compiled loss does, instead of crashing in ``gather``."""
    x, t = _batch()
    common = {"mode": "multiclass", "from_logits": True}
    unchecked = metricc.compile("dice").loss("linear", validate_args=False, **common)
    _assert_same(unchecked, metricc.compile("dice").loss("linear", **common), x, t)
    assert taken_eager == [True, True]
    bad = t.clone()
    bad[0, 0, 0], bad[1, 2, 3] = -1, 4  # four classes: 4 is out of range, as is -1
    taken_eager.clear()
    v, g = _value_and_grad(unchecked, x, bad)
    assert taken_eager == [False]
    # the reference: one-hot targets with no class at those two elements
    onehot = torch.nn.functional.one_hot(bad.clamp(0, 3), 4).movedim(-1, 1).to(F64)
    onehot[0, :, 0, 0] = onehot[1, :, 2, 3] = 0.0
    v_ref, g_ref = _value_and_grad(metricc.compile("dice").loss("linear", **common), x, onehot)
    torch.testing.assert_close(v, v_ref, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("layout", ["channels_last", "batch_strided", "transposed_target",
                                    "int32_target"])
def test_eager_index_path_takes_any_layout(layout: str, taken_eager: list[bool]) -> None:
    """The row-form gather and scatter of the eager index path (``counts.own_rows``) see
    strided logits and targets as torch's own ops would: same value and gradient as the
    autograd reference."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(8, 4, 6, 5, generator=gen, dtype=F64)
    t = torch.randint(0, 4, (8, 6, 5), generator=gen)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "batch_strided":
        x, t = x[::2], t[::2]
    elif layout == "transposed_target":
        x, t = x.transpose(2, 3).contiguous(), t.transpose(1, 2)
    else:
        t = t.int()
    common = {"mode": "multiclass", "from_logits": True}
    m = metricc.compile("dice")
    _assert_same(m.loss("linear", **common), m.loss("linear", backward="autograd", **common),
                 x, t)
    assert taken_eager[0]
