"""``WarmStart``: cross-entropy first, a linear blend, then the metric loss, for every loss kind."""

from __future__ import annotations

import inspect
import io
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounter

import metricc
from metricc.errors import MetricError
from metricc.runtime.warm_start import WarmStart, blend_weight

torch.set_num_threads(1)


def _binary(n: int = 40, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64)
    y = (torch.rand(n, generator=g, dtype=torch.float64) < 0.3).double()
    y[:2] = torch.tensor([0.0, 1.0], dtype=torch.float64)
    return x, y


def _multiclass(n: int = 30, k: int = 4, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.randint(0, k, (n,), generator=g)
    y[:k] = torch.arange(k)
    return x, y


LOSSES = {
    "counts": lambda: (metricc.compile("f1").loss(from_logits=True), _binary, "bce"),
    "constrained": lambda: (metricc.compile("precision subject to recall >= 0.8").loss(
        from_logits=True), _binary, "bce"),
    "matrix": lambda: (metricc.compile("multiclass_kappa").loss(from_logits=True), _multiclass,
                       "ce"),
    "curve": lambda: (metricc.compile("auroc").loss(from_logits=True), _binary, "bce"),
    "curve_multiclass": lambda: (metricc.compile("ap").loss(from_logits=True, mode="multiclass"),
                                 _multiclass, "ce"),
}


def _reference_ce(kind: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if kind == "bce":
        return F.binary_cross_entropy_with_logits(x, y)
    return F.cross_entropy(x, y)


def test_blend_weight_is_linear_between_the_phases() -> None:
    w, b = 3, 4
    got = [blend_weight(s, w, b) for s in range(10)]
    want = [0.0] * w + [(i + 1) / (b + 1) for i in range(b)] + [1.0] * 3
    assert got == want
    assert [blend_weight(s, 2, 0) for s in range(4)] == [0.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_each_phase_gives_ce_then_the_blend_then_the_metric_loss(name: str) -> None:
    loss, data, kind = LOSSES[name]()
    warm = WarmStart(loss, warmup_steps=2, blend_steps=3)
    assert warm.base_name == kind
    x, y = data()
    reference = type(loss)(**_options(loss)) if name != "constrained" else None
    for s in range(7):
        ce = _reference_ce(kind, x, y)
        a = blend_weight(s, 2, 3)
        assert warm.weights() == (1 - a, a)
        assert warm.phase == ("warmup" if s < 2 else "blend" if s < 5 else "metric")
        out = warm(x, y)
        if a == 0:
            assert torch.equal(out, ce)  # exactly torch's cross-entropy
        elif reference is not None:
            m = reference(x, y)
            if a == 1:
                assert torch.equal(out, m)  # exactly the metric loss
            else:
                torch.testing.assert_close(out, (1 - a) * ce + a * m, rtol=1e-12, atol=0)
        assert int(warm.steps) == s + 1


def _options(loss: torch.nn.Module) -> dict:
    """The options of a fresh loss like ``loss`` (stateless losses: equal values)."""
    takes_mode = "mode" in inspect.signature(type(loss).__init__).parameters  # K x K: always multiclass
    return {"from_logits": True, **({"mode": loss.mode} if takes_mode else {})}


def test_the_metric_loss_is_not_called_during_warm_up_and_ce_not_after() -> None:
    calls = []

    class Spy(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            calls.append("metric")
            return (x - y).pow(2).mean()

    class SpyCE(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            calls.append("ce")
            return (x - y).abs().mean()

    warm = WarmStart(Spy(), warmup_steps=1, blend_steps=1, base=SpyCE())
    x, y = _binary()
    for _ in range(3):
        warm(x, y)
    assert calls == ["ce", "metric", "ce", "metric"]
    calls.clear()
    warm_keep = WarmStart(Spy(), warmup_steps=0, blend_steps=0, base=SpyCE(), keep=0.1)
    out = warm_keep(x, y)
    assert calls == ["metric", "ce"]
    torch.testing.assert_close(out, (x - y).pow(2).mean() + 0.1 * (x - y).abs().mean())


def test_keep_retains_a_share_of_cross_entropy() -> None:
    loss = metricc.compile("f1").loss(from_logits=True)
    warm = WarmStart(loss, warmup_steps=0, blend_steps=1, keep=0.2)
    x, y = _binary()
    ce = F.binary_cross_entropy_with_logits(x, y)
    assert warm.weights() == (1 - 0.5 + 0.5 * 0.2, 0.5)
    torch.testing.assert_close(warm(x, y), 0.6 * ce + 0.5 * loss(x, y), rtol=1e-12, atol=0)
    torch.testing.assert_close(warm(x, y), 0.2 * ce + loss(x, y), rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", ["counts", "matrix", "curve"])
def test_gradient_in_the_blend_is_autograd_of_the_blend(name: str) -> None:
    loss, data, kind = LOSSES[name]()
    warm = WarmStart(loss, warmup_steps=1, blend_steps=2)
    x, y = data()
    warm(x, y)  # the warm-up step
    xg = x.clone().requires_grad_(True)
    warm(xg, y).backward()
    xr = x.clone().requires_grad_(True)
    a = 1 / 3
    ref = type(loss)(**_options(loss))
    ((1 - a) * _reference_ce(kind, xr, y) + a * ref(xr, y)).backward()
    torch.testing.assert_close(xg.grad, xr.grad, rtol=1e-10, atol=1e-12)


def test_gradient_matches_finite_differences() -> None:
    loss = metricc.compile("f1").loss(from_logits=True)
    x, y = _binary(12)

    def blended(t: torch.Tensor) -> torch.Tensor:
        warm = WarmStart(loss, warmup_steps=0, blend_steps=1).eval()  # eval: the step stays
        return warm(t, y)

    assert torch.autograd.gradcheck(blended, (x.clone().requires_grad_(True),), eps=1e-6,
                                    atol=1e-5)


def test_no_step_under_eval_no_grad_or_inference_mode() -> None:
    loss = metricc.compile("f1").loss(from_logits=True)
    warm = WarmStart(loss, warmup_steps=5, blend_steps=5)
    x, y = _binary()
    with torch.no_grad():
        warm(x, y)
    with torch.inference_mode():
        warm(x, y)
    warm.eval()
    warm(x, y)
    assert int(warm.steps) == 0
    warm.train()
    warm(x, y)
    assert int(warm.steps) == 1


def test_state_dict_round_trip_mid_blend_resumes_identically() -> None:
    loss = metricc.compile("f1").loss(from_logits=True, memory_decay=0.5)
    warm = WarmStart(loss, warmup_steps=2, blend_steps=4)
    x, y = _binary()
    for _ in range(4):
        warm(x, y)
    state = warm.state_dict()
    assert int(state["steps"]) == 4
    fresh = WarmStart(metricc.compile("f1").loss(from_logits=True, memory_decay=0.5),
                      warmup_steps=2, blend_steps=4)
    assert fresh.phase == "warmup"
    fresh.load_state_dict(state)
    assert fresh.phase == "blend" and fresh.weights() == warm.weights()
    # the same memory of past counts too, since the two saw the same batches
    fresh.loss.pool.memory = warm.loss.pool.memory.clone()
    for s in range(4):
        x2, y2 = _binary(seed=s + 10)
        assert torch.equal(warm(x2, y2), fresh(x2, y2))


def test_the_wrapped_losss_state_is_in_the_state_dict() -> None:
    loss = metricc.compile("precision subject to recall >= 0.8").loss(from_logits=True)
    warm = WarmStart(loss, warmup_steps=0, blend_steps=0)
    x, y = _binary()
    warm(x, y)
    state = warm.state_dict()
    assert "loss.multipliers" in state and torch.equal(state["loss.multipliers"],
                                                       loss.multipliers)
    assert bool((loss.multipliers > 0).any())  # recall was below 0.8: a multiplier moved


def test_load_state_dict_moves_the_host_copy_of_the_step() -> None:
    warm = WarmStart(metricc.compile("f1").loss(from_logits=True), warmup_steps=3, blend_steps=0)
    x, y = _binary()
    warm(x, y)
    assert warm.step_count() == 1
    warm.load_state_dict({"steps": torch.tensor(5)}, strict=False)
    assert warm.step_count() == 5 and warm.phase == "metric"
    with torch.no_grad():
        warm.steps.zero_()
    assert warm.phase == "warmup"


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_pickling_keeps_the_schedule(how: str) -> None:
    warm = WarmStart(metricc.compile("auroc").loss(from_logits=True), warmup_steps=1,
                     blend_steps=2, keep=0.1)
    x, y = _binary()
    warm(x, y)
    warm(x, y)
    if how == "pickle":
        back = pickle.loads(pickle.dumps(warm))
    else:
        buf = io.BytesIO()
        torch.save(warm, buf)
        buf.seek(0)
        back = torch.load(buf, weights_only=False)
    assert back.step_count() == 2 and back.weights() == warm.weights()
    assert torch.equal(back(x, y), warm(x, y))
    assert back.step_count() == 3


def test_binary_probabilities_ignore_index_and_weights() -> None:
    loss = metricc.compile("f1").loss(ignore_index=-1)
    warm = WarmStart(loss, warmup_steps=10, blend_steps=0)
    g = torch.Generator().manual_seed(3)
    p = torch.rand(20, generator=g, dtype=torch.float64)
    y = (torch.rand(20, generator=g) < 0.4).long()
    y[:3] = -1
    w = torch.rand(20, generator=g, dtype=torch.float64)
    keep = y != -1
    assert torch.equal(warm(p, y), F.binary_cross_entropy(p[keep], y[keep].double()))
    want = (w[keep] * F.binary_cross_entropy(p[keep], y[keep].double(), reduction="none")).sum() \
        / w[keep].sum()
    torch.testing.assert_close(warm(p, y, weight=w), want, rtol=1e-12, atol=0)


def test_multiclass_probabilities_soft_labels_and_single_channel_binary() -> None:
    x, y = _multiclass()
    p = torch.softmax(x, 1)
    loss = metricc.compile("f1").loss(mode="multiclass")  # probabilities
    warm = WarmStart(loss, warmup_steps=1, blend_steps=0)
    torch.testing.assert_close(warm.cross_entropy(p, y), F.cross_entropy(x, y), rtol=1e-12,
                               atol=0)
    soft = F.one_hot(y, 4).double() * 0.9 + 0.025
    torch.testing.assert_close(warm.cross_entropy(p, soft), F.cross_entropy(x, soft),
                               rtol=1e-12, atol=0)
    seg = WarmStart(metricc.compile("dice").loss(from_logits=True), warmup_steps=1, blend_steps=0)
    xs, ys = torch.randn(2, 1, 3, 3, dtype=torch.float64), (torch.rand(2, 3, 3) < 0.5).double()
    assert torch.equal(seg(xs, ys), F.binary_cross_entropy_with_logits(xs[:, 0], ys))


def test_options_are_checked_once_with_their_fix() -> None:
    loss = metricc.compile("f1").loss(from_logits=True)
    for kw, words in [({"warmup_steps": -1, "blend_steps": 0}, "warmup_steps must be"),
                      ({"warmup_steps": 1.5, "blend_steps": 0}, "warmup_steps must hold"),
                      ({"warmup_steps": True, "blend_steps": 0}, "warmup_steps must hold"),
                      ({"warmup_steps": 0, "blend_steps": -2}, "blend_steps must be"),
                      ({"warmup_steps": 0, "blend_steps": 0, "base": "bec"}, "did you mean 'bce'"),
                      ({"warmup_steps": 0, "blend_steps": 0, "base": "ce"}, "use base='bce'"),
                      ({"warmup_steps": 0, "blend_steps": 0, "keep": 2.0}, "in [0, 1]"),
                      ({"warmup_steps": 0, "blend_steps": 0, "keep": -0.1}, "keep must be"),
                      ({"warmup_steps": 0, "blend_steps": 0, "from_logits": False},
                       "disagrees with the wrapped loss")]:
        with pytest.raises(MetricError, match=words.replace("[", r"\[").replace("]", r"\]")):
            WarmStart(loss, **kw)
    with pytest.raises(MetricError, match="no metricc loss: give mode="):
        WarmStart(torch.nn.MSELoss(), warmup_steps=1, blend_steps=0)
    with pytest.raises(MetricError, match="wraps a loss module"):
        WarmStart("f1", warmup_steps=1, blend_steps=0)  # type: ignore[arg-type]
    with pytest.raises(MetricError, match="average='none'"):
        WarmStart(metricc.compile("f1").loss(mode="multiclass", average="none"),
                  warmup_steps=1, blend_steps=0)
    other = WarmStart(torch.nn.MSELoss(), warmup_steps=1, blend_steps=0, mode="binary",
                      from_logits=True)
    x, y = _binary()
    assert torch.equal(other(x, y), F.binary_cross_entropy_with_logits(x, y))
    assert torch.equal(other(x, y), F.mse_loss(x, y))


def test_warm_up_still_checks_the_inputs() -> None:
    warm = WarmStart(metricc.compile("f1").loss(from_logits=True), warmup_steps=3, blend_steps=0)
    with pytest.raises(MetricError):
        warm(torch.randn(4, dtype=torch.float64), torch.tensor([0.0, 1.0, 2.0, 0.0]))


def test_torch_compile_fullgraph_follows_the_schedule() -> None:
    loss = metricc.compile("f1").loss(from_logits=True, validate_args=False)
    warm = WarmStart(loss, warmup_steps=1, blend_steps=1)
    eager = WarmStart(metricc.compile("f1").loss(from_logits=True, validate_args=False),
                      warmup_steps=1, blend_steps=1)
    counter = CompileCounter()  # runs the captured graph eagerly, counting the compilations
    compiled = torch.compile(warm, fullgraph=True, backend=counter)
    x, y = _binary()
    for _ in range(4):
        torch.testing.assert_close(compiled(x, y), eager(x, y), rtol=1e-12, atol=0)
    assert int(warm.steps) == 4 and warm.phase == "metric"
    assert counter.frame_count == 1  # the schedule is data: no recompilation per step
    with torch.no_grad():
        compiled(x, y)
    assert int(warm.steps) == 4
