"""The ``softmax`` relaxation, the multiclass default: a relaxed argmax that trains from any start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import metricc
from metricc.runtime.relax import RELAXATIONS

ROOT = Path(__file__).resolve().parents[1]
F1 = metricc.compile("f1")


def test_registered_and_the_multiclass_default() -> None:
    r = RELAXATIONS["softmax"]
    assert r.class_wise and r.options == ("temperature",)
    assert F1.loss(mode="multiclass").relaxation == "softmax"
    assert F1.loss().relaxation == "anyloss"
    assert F1.loss(mode="multilabel").relaxation == "anyloss"
    assert "relaxation='softmax', temperature=1.0" in repr(F1.loss(mode="multiclass"))


@pytest.mark.parametrize("mode", ["binary", "multilabel"])
def test_refused_outside_multiclass(mode: str) -> None:
    with pytest.raises(metricc.MetricError, match="mode='multiclass'"):
        F1.loss("softmax", mode=mode)


@pytest.mark.parametrize(("temperature", "from_logits", "words"), [
    (0, True, "finite number > 0"), (-1.0, True, "> 0"), (float("inf"), True, "finite"),
    ("1", True, "finite number"), (2.0, False, "infinite slope at p = 0"),
])
def test_bad_temperatures(temperature: object, from_logits: bool, words: str) -> None:
    with pytest.raises(metricc.MetricError, match=words):
        F1.loss("softmax", mode="multiclass", temperature=temperature, from_logits=from_logits)


def test_values_are_the_definition_and_tend_to_the_argmax() -> None:
    torch.manual_seed(0)
    r = RELAXATIONS["softmax"]
    x = torch.randn(2, 4, 5, dtype=torch.float64)
    p = torch.softmax(x, 1)
    p[0, 2, 3] = 0.0  # a zero probability gives no 0/0
    for t in (1.0, 0.5, 0.1):
        torch.testing.assert_close(r.bind(temperature=t).classes(x, True), torch.softmax(x / t, 1))
        want = p ** (1 / t) / (p ** (1 / t)).sum(1, keepdim=True)
        torch.testing.assert_close(r.bind(temperature=t).classes(p, False), want)
        g = torch.randn_like(x)
        for fl, inp in ((True, x), (False, p)):
            a1 = inp.clone().requires_grad_(True)
            a2 = inp.clone().requires_grad_(True)
            (d1,) = torch.autograd.grad(r.bind(temperature=t).classes(a1, fl), a1, g)
            (d2,) = torch.autograd.grad(r.bind(temperature=t).classes(a2, fl, autograd=True), a2, g)
            assert torch.isfinite(d1).all()
            torch.testing.assert_close(d1, d2)
            # On logits the loss runs torch's softmax backward; the vjp that verify()
            # proves against SymPy's Jacobian is the same map.
            a = r.class_value(inp, t, fl)
            torch.testing.assert_close(r.class_vjp(a, g, inp, t, fl), d1)
    onehot = torch.nn.functional.one_hot(x.argmax(1), 4).movedim(-1, 1).to(x.dtype)
    torch.testing.assert_close(r.bind(temperature=1e-4).classes(x, True), onehot)


@pytest.mark.parametrize("classes", [3, 5, 21])
def test_gradient_at_initialisation_is_not_saturated(classes: int) -> None:
    """The issue's measurement: logits 0.1*randn(4, C, 32, 32); anyloss starts saturated."""
    g = torch.Generator().manual_seed(0)
    z0 = 0.1 * torch.randn(4, classes, 32, 32, generator=g)
    y = torch.randint(classes, (4, 32, 32), generator=g)

    def mean_grad(**options: object) -> float:
        z = z0.clone().requires_grad_(True)
        F1.loss(mode="multiclass", from_logits=True, **options)(z, y).backward()
        return float(z.grad.abs().mean())

    default, linear, anyloss = mean_grad(), mean_grad(relaxation="linear"), mean_grad(relaxation="anyloss")
    assert default == pytest.approx(linear, rel=1e-4)  # T = 1 is the plain softmax
    assert default > 5e-7
    assert anyloss < 0.01 * default  # 140 times smaller at C=3, 10^7 at C=5
    assert mean_grad(relaxation="softmax", temperature=0.5) > 1.5 * default


@pytest.mark.parametrize("start", ["small", "wrong"])
def test_trains_from_any_start(start: str) -> None:
    """Fit free logits of a 5-class 8x8 map; macro F1 of the argmax reaches 1 from logits near 0
    and from confidently wrong ones (every pixel a rare class by +6), where anyloss does not move."""
    torch.manual_seed(1)
    y = torch.randint(0, 5, (2, 8, 8))

    def fit(**options: object) -> float:
        z = (0.1 * torch.randn(2, 5, 8, 8)).requires_grad_(True)
        if start == "wrong":
            with torch.no_grad():
                z[:, 4] += 6.0
        opt = torch.optim.Adam([z], lr=0.1)
        loss = F1.loss(mode="multiclass", from_logits=True, **options)
        for _ in range(60):
            opt.zero_grad()
            loss(z, y).backward()
            opt.step()
        return F1.score(z.detach(), y, mode="multiclass")

    assert fit() == 1.0
    assert fit(relaxation="anyloss") < 0.5


def test_verify_checks_the_softmax_relaxation() -> None:
    report = F1.verify()
    names = [c.name for c in report.checks]
    for fl in (True, False):
        assert any(n.startswith(f"softmax backward == Jacobian of the relaxation (from_logits={fl}")
                   for n in names)
        assert f"softmax/symbolic (multiclass, from_logits={fl}): gradient == finite differences" in names
    assert report.ok


def test_benchmark_smoke_run() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_multiclass.py"), "--quick"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Mean |gradient| at initialisation" in out.stdout and "| small |" in out.stdout
