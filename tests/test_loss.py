"""The loss module: values and gradients against an independent implementation, in float64."""

from __future__ import annotations

import warnings

import pytest
import sympy
import torch
from oracles import plain_loss

import metricc
from metricc.library import METRICS

TP, FP, FN, TN = sympy.symbols("TP FP FN TN")


def _inputs(relaxation: str, seed: int, n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n, generator=g, dtype=torch.float64) < 0.4).double()
    y[:2] = torch.tensor([1.0, 0.0], dtype=torch.float64)
    if relaxation == "sigmoid":
        return torch.randn(n, generator=g, dtype=torch.float64), y
    # Around 0.5 so the anyloss relaxation is neither 0 nor 1 and every count is positive.
    return 0.5 + 0.03 * torch.randn(n, generator=g, dtype=torch.float64), y


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(METRICS))
@pytest.mark.parametrize("relaxation", ["anyloss", "linear", "sigmoid"])
@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
def test_gradient_matches_independent_autograd_and_gradcheck(name: str, relaxation: str, backward: str) -> None:
    m = metricc.compile(name)
    module = m.loss(relaxation, backward=backward, eps=0.0, from_logits=relaxation == "sigmoid")
    x0, y = _inputs(relaxation, seed=len(name))
    ref = plain_loss(m, relaxation)

    x_ref = x0.clone().requires_grad_(True)
    want = ref(x_ref, y)
    (want_grad,) = torch.autograd.grad(want, x_ref)
    x = x0.clone().requires_grad_(True)
    got = module(x, y)
    (got_grad,) = torch.autograd.grad(got, x)

    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-8, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t: module(t, y), (x0.clone().requires_grad_(True),),
                                    eps=1e-7, atol=1e-6, rtol=1e-4)


def test_linear_relaxation_of_hard_inputs_is_the_hard_confusion_matrix() -> None:
    from metricc.runtime.counts import soft_counts
    from metricc.runtime.relax import relax

    g = torch.Generator().manual_seed(0)
    y = (torch.rand(500, generator=g) < 0.3).double()
    pred = (torch.rand(500, generator=g) < 0.4).double()
    a = relax(pred, "linear", 73.0, 1.0, 0.0, False)
    tp, fp, fn, tn = (c.item() for c in soft_counts(a.unsqueeze(0), y.unsqueeze(0), None))
    assert (tp, fp, fn, tn) == (
        float(((pred == 1) & (y == 1)).sum()), float(((pred == 1) & (y == 0)).sum()),
        float(((pred == 0) & (y == 1)).sum()), float(((pred == 0) & (y == 0)).sum()),
    )
    for name in ("f1", "mcc", "balanced_accuracy"):
        m = metricc.compile(name)
        loss = m.loss("linear", eps=0.0)(pred, y)
        assert loss.item() == pytest.approx(1 - m.score(pred, y), rel=1e-12)


def test_lower_is_better_loss_is_the_metric() -> None:
    m = metricc.compile("fpr")
    y = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    p = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    assert m.loss("linear", eps=0.0)(p, y).item() == pytest.approx(0.5)
    f1 = metricc.compile("f1")
    assert f1.loss("linear", eps=0.0)(p, y).item() == pytest.approx(0.5)


def test_samplewise_reduction() -> None:
    m = metricc.compile("dice")
    g = torch.Generator().manual_seed(1)
    p = torch.rand(3, 5, 5, generator=g, dtype=torch.float64)
    y = (torch.rand(3, 5, 5, generator=g) < 0.5).double()
    per = m.loss("linear", multidim_average="samplewise", reduction="none")(p, y)
    assert per.shape == (3,)
    single = torch.stack([m.loss("linear")(p[i], y[i]) for i in range(3)])
    torch.testing.assert_close(per, single)
    mean = m.loss("linear", multidim_average="samplewise")(p, y)
    torch.testing.assert_close(mean, single.mean())


def test_parameterised_metric_loss() -> None:
    m = metricc.compile("(1 + b^2)*TP / ((1 + b^2)*TP + b^2*FN + FP)", b=0.5)
    ref = metricc.compile("fbeta", beta=0.5)
    assert sympy.simplify(m.expr - ref.expr) == 0


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"relaxation": "tanh"}, "relaxation='tanh' is not one of"),
        ({"relaxation": "sigmoid"}, "from_logits=True"),
        ({"backward": "numeric"}, "backward='numeric'"),
        ({"reduction": "avg"}, "reduction='avg'"),
        ({"amplifier": -1.0}, "amplifier must be"),
        ({"amplfier": 10.0}, "did you mean 'amplifier'"),
    ],
)
def test_bad_options(options: dict, words: str) -> None:
    with pytest.raises(metricc.MetricError, match=words.replace("(", r"\(").replace(")", r"\)")):
        metricc.compile("f1").loss(**options)


def test_shape_mismatch_is_a_metric_error() -> None:
    loss = metricc.compile("f1").loss()
    with pytest.raises(metricc.MetricError, match="same shape"):
        loss(torch.rand(4), torch.ones(5))


def test_generated_source_is_readable_and_built_from_sympy() -> None:
    m = metricc.compile("f1")
    src = m.kernels_source
    assert "def metric_and_coefficients(TP, FP, FN, TN, eps):" in src
    assert "g1 =" in src and "g0 =" in src
    m2 = metricc.compile("precision_ = TP/(TP+FP)\nrecall_ = TP/(TP+FN)\n2*precision_*recall_/(precision_+recall_)")
    assert "precision_" not in m2.kernels_source


def test_torch_compile_fullgraph_binary() -> None:
    m = metricc.compile("mcc")
    loss = m.loss("anyloss", from_logits=True)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, generator=g)
    y = (torch.rand(256, generator=g) < 0.3).float()
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = loss(xa, y)
        comp = compiled(xb, y)
    eager.backward()
    comp.backward()
    torch.testing.assert_close(comp, eager)
    torch.testing.assert_close(xb.grad, xa.grad)
