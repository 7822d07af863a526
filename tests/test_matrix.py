"""K x K matrix metrics: language, scores against scikit-learn, loss and gradient against
independent closed forms, shapes and options, check(), verify(), CLI and standalone files."""

from __future__ import annotations

import importlib.util
import math
import sys
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sklearn import metrics as skm

import metricc
from metricc.errors import MetricError, MetricSyntaxError, MetricWarning, VerificationError
from metricc.library import MATRIX_METRICS

NAMES = ["multiclass_accuracy", "multiclass_balanced_accuracy", "multiclass_mcc",
         "multiclass_kappa", "linear_kappa", "quadratic_kappa", "expected_cost"]


# --- independent references ----------------------------------------------------------------

def sklearn_score(name: str, y: np.ndarray, p: np.ndarray, k: int) -> float:
    labels = list(range(k))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if name == "multiclass_accuracy":
            return float(skm.accuracy_score(y, p))
        if name == "multiclass_balanced_accuracy":
            return float(skm.balanced_accuracy_score(y, p))
        if name == "multiclass_mcc":
            return float(skm.matthews_corrcoef(y, p))
        if name == "expected_cost":
            return float(1 - skm.accuracy_score(y, p))
        weights = {"multiclass_kappa": None, "linear_kappa": "linear",
                   "quadratic_kappa": "quadratic"}[name]
        # labels=range(K): the weights |i-j|, (i-j)^2 are over class indices, also when a
        # class is absent (without labels scikit-learn renumbers the classes present).
        return float(skm.cohen_kappa_score(y, p, labels=labels, weights=weights))


def closed_form(name: str, C: torch.Tensor, cost: torch.Tensor | None = None) -> torch.Tensor:
    """The metric of a (K, K) matrix by the textbook formulas (torch, differentiable)."""
    k = C.shape[0]
    t, p, s = C.sum(1), C.sum(0), C.sum()
    idx = torch.arange(k, dtype=C.dtype)
    if name == "multiclass_accuracy":
        return C.diagonal().sum() / s
    if name == "multiclass_balanced_accuracy":
        present = t > 0
        return (C.diagonal()[present] / t[present]).mean()
    if name == "multiclass_mcc":
        c = C.diagonal().sum()
        return (c * s - (p * t).sum()) / torch.sqrt((s**2 - (p**2).sum()) * (s**2 - (t**2).sum()))
    if name == "expected_cost":
        m = 1 - torch.eye(k, dtype=C.dtype) if cost is None else cost
        return (m * C).sum() / s
    w = {"multiclass_kappa": 1 - torch.eye(k, dtype=C.dtype),
         "linear_kappa": (idx[:, None] - idx[None, :]).abs(),
         "quadratic_kappa": (idx[:, None] - idx[None, :]) ** 2}[name]
    expected = torch.outer(t, p) / s
    return 1 - (w * C).sum() / (w * expected).sum()


def reference_loss(name: str, x: torch.Tensor, y: torch.Tensor, *, relaxation: str = "linear",
                   temperature: float = 0.5, weight: torch.Tensor | None = None,
                   higher: bool = True) -> torch.Tensor:
    """Plain autograd: softmax by hand, the soft matrix as a sum of outer products."""
    k = x.shape[1]
    z = x / temperature if relaxation == "softmax" else x
    e = torch.exp(z - z.max(1, keepdim=True).values)
    q = e / e.sum(1, keepdim=True)
    w = torch.ones(len(y), dtype=x.dtype) if weight is None else weight
    onehot = torch.nn.functional.one_hot(y, k).to(x.dtype)
    C = sum(w[n] * torch.outer(onehot[n], q[n]) for n in range(len(y)))
    value = closed_form(name, C)
    return 1 - value if higher else value


# --- language ----------------------------------------------------------------------------------

def test_grammar_documents_the_matrix_forms() -> None:
    from metricc.language.parse import grammar_text

    text = grammar_text()
    assert '"[" args "]"' in text and "sum(i, j, expr)" in text and "row(i), col(j)" in text


def test_named_metrics_exist_with_direction() -> None:
    assert set(NAMES) <= set(MATRIX_METRICS)
    assert not metricc.compile("expected_cost").higher_is_better
    assert metricc.compile("qwk").expr == metricc.compile("quadratic_kappa").expr


def test_formula_in_i_j_equals_named_metric() -> None:
    custom = metricc.compile("1 - n * sum(i, j, (i-j)^2 * C[i,j]) / "
                             "sum(i, j, (i-j)^2 * row(i) * col(j))")
    named = metricc.compile("quadratic_kappa")
    m = [[5, 1, 0], [2, 4, 1], [0, 3, 6]]
    assert custom.value(m) == named.value(m)


def test_weight_matrix_as_parameter_or_formula() -> None:
    text = "1 - n * sum(i, j, W[i,j] * C[i,j]) / sum(i, j, W[i,j] * row(i) * col(j))"
    k = 4
    w = [[(i - j) ** 2 for j in range(k)] for i in range(k)]
    by_list = metricc.compile(text, W=w)
    by_formula = metricc.compile(text, W="(i-j)^2")
    by_tensor = metricc.compile(text, W=torch.tensor(w, dtype=torch.float64))
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, k, 80), rng.integers(0, k, 80)
    want = sklearn_score("quadratic_kappa", y, p, k)
    for m in (by_list, by_formula, by_tensor):
        assert m.score(p, y, num_classes=k) == pytest.approx(want, abs=1e-12)
    with pytest.raises(MetricError, match="4 x 4 but the input has 3"):
        by_list.loss(from_logits=True)(torch.randn(5, 3), torch.tensor([0, 1, 2, 0, 1]))
    cost = [[0, 1, 5], [1, 0, 1], [10, 1, 0]]
    ec = metricc.compile("expected_cost", M=cost)
    yy, pp = np.array([0, 2, 2, 1, 0]), np.array([2, 0, 2, 1, 1])
    assert ec.score(pp, yy) == pytest.approx(sum(cost[a][b] for a, b in zip(yy, pp, strict=True)) / 5)


def test_two_by_two_language_unchanged() -> None:
    assert str(metricc.compile("2*TP/(2*TP+FP+FN)").expr) == "2*TP/(FN + FP + 2*TP)"
    assert metricc.compile("TP/(TP+K)", K=2).value(tp=2, fp=0, fn=0, tn=0) == 0.5


@pytest.mark.parametrize(("text", "message", "column"), [
    ("C[i] / n", "two class-index names", 1),
    ("sum(i, C[i,j]) / n", "index 'j' is not summed", 12),
    (r"sum(C[i,i]) / n", r"sum\(\) takes class-index names", 1),
    ("sum(i, C[i,i]) / TP", "'TP' is a 2x2 count", 18),
    ("sum(i, C[i,i]) + f1", "'f1' is a 2x2 metric", 18),
    ("sum(i, sum(i, C[i,i]))", "already summed", 5),
    ("sum(i, C[i,i]) * i", "outside a sum", 5),
    ("sum(i, row(i+1))", r"row\(\) takes one class-index name", 8),
    ("sum(i, C[i, i+1])", "two class-index names", 8),
    ("sum(i, TP[i,i])", "cannot be indexed", 8),
])
def test_errors_are_positioned(text: str, message: str, column: int) -> None:
    with pytest.raises(MetricSyntaxError, match=message) as info:
        metricc.compile(text)
    assert info.value.column == column
    assert "^" in str(info.value)


def test_other_errors() -> None:
    with pytest.raises(MetricError, match="does not depend on the confusion matrix"):
        metricc.compile("sum(i, i) / K")
    with pytest.raises(MetricError, match="K x K matrix"):
        metricc.compile("expected_cost", M=3)
    with pytest.raises(MetricError, match="unknown parameter"):
        metricc.compile("quadratic_kappa", W=[[0, 1], [1, 0]])
    with pytest.raises(MetricError, match=r"unknown loss option 'average'.*no classes"):
        metricc.compile("quadratic_kappa").loss(average="macro")


# --- scores ------------------------------------------------------------------------------------

@given(k=st.integers(2, 10), data=st.data())
def test_score_equals_sklearn(k: int, data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 40))
    # Draw labels from a subset of the classes, so some are absent from the batch.
    used = data.draw(st.lists(st.integers(0, k - 1), min_size=1, max_size=k, unique=True))
    y = np.array(data.draw(st.lists(st.sampled_from(used), min_size=n, max_size=n)))
    p = np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)))
    for name in NAMES:
        ours = metricc.compile(name).score(p, y, num_classes=k, zero_division=math.nan)
        want = sklearn_score(name, y, p, k)
        if math.isnan(ours):
            # Undefined (e.g. kappa when the expected agreement is total): scikit-learn
            # gives NaN, or 0 for MCC by its own convention.
            assert math.isnan(want) or (name == "multiclass_mcc" and want == 0.0), (name, want)
        else:
            assert ours == pytest.approx(want, abs=1e-9), name


def test_score_takes_scores_and_ignore_index() -> None:
    rng = np.random.default_rng(3)
    k = 6
    scores = torch.randn(50, k, 3)
    y = torch.randint(0, k, (50, 3))
    y[0, 0] = 255
    keep = (y != 255)
    pred = scores.argmax(1)
    for name in NAMES:
        m = metricc.compile(name)
        got = m.score(scores, y, ignore_index=255)
        want = sklearn_score(name, y[keep].numpy(), pred[keep].numpy(), k)
        assert got == pytest.approx(want, abs=1e-9)
    del rng


def test_undefined_score_raises_or_uses_zero_division() -> None:
    m = metricc.compile("quadratic_kappa")
    with pytest.raises(MetricError, match="undefined"):
        m.score([1, 1], [1, 1], num_classes=3)
    assert m.score([1, 1], [1, 1], num_classes=3, zero_division=0.0) == 0.0


# --- loss --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("relaxation", ["linear", "softmax"])
@pytest.mark.parametrize("backward", ["symbolic", "autograd"])
def test_loss_and_gradient_equal_closed_form(name: str, relaxation: str, backward: str) -> None:
    g = torch.Generator().manual_seed(hash((name, relaxation)) % 2**31)
    k, n = 5, 40
    x = torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.randint(0, k - 1, (n,), generator=g)  # class k-1 absent from the batch
    y[: k - 1] = torch.arange(k - 1)
    m = metricc.compile(name)
    sharpen = {"temperature": 0.5} if relaxation == "softmax" else {}  # linear takes none
    loss = m.loss(relaxation, from_logits=True, eps=0.0, backward=backward,
                  warn_monotonicity=False, **sharpen)
    xa = x.clone().requires_grad_(True)
    got = loss(xa, y)
    (ga,) = torch.autograd.grad(got, xa)
    xb = x.clone().requires_grad_(True)
    want = reference_loss(name, xb, y, relaxation=relaxation, higher=m.higher_is_better)
    (gb,) = torch.autograd.grad(want, xb)
    assert got.item() == pytest.approx(want.item(), abs=1e-8)
    assert float((ga - gb).abs().max()) < 1e-8
    assert float(gb.abs().max()) > 1e-4  # not vacuous


@pytest.mark.parametrize("name", ["quadratic_kappa", "multiclass_mcc", "expected_cost"])
@pytest.mark.parametrize("relaxation", ["linear", "softmax"])
def test_gradcheck(name: str, relaxation: str) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(12, 4, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 4, (12,), generator=g)
    loss = metricc.compile(name).loss(relaxation, from_logits=True)
    assert torch.autograd.gradcheck(lambda t: loss(t, y), (x,), eps=1e-6, atol=1e-6)


def test_probabilities_input_and_softmax_default() -> None:
    g = torch.Generator().manual_seed(2)
    p = torch.softmax(torch.randn(30, 4, generator=g, dtype=torch.float64), 1)
    y = torch.randint(0, 4, (30,), generator=g)
    m = metricc.compile("quadratic_kappa")
    assert m.loss().relaxation == "softmax"
    linear = m.loss("linear")(p, y)
    assert float(linear) == pytest.approx(float(reference_loss("quadratic_kappa", p.log(), y)))
    sharp = m.loss("softmax", temperature=0.25)(p, y)
    assert float(sharp) == pytest.approx(float(reference_loss(
        "quadratic_kappa", p.log(), y, relaxation="softmax", temperature=0.25)))


@pytest.mark.parametrize("shape", [(3, 4, 5, 6), (40, 4, 1, 2)])  # scatter / index_add paths
def test_spatial_input_ignore_index_and_weights(shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(4)
    n, k, h, w = shape
    x = torch.randn(n, k, h, w, generator=g, dtype=torch.float64)
    y = torch.randint(0, k, (n, h, w), generator=g)
    y[0, :1] = 255
    sw = torch.rand(n, generator=g, dtype=torch.float64)
    m = metricc.compile("multiclass_mcc")
    for backward in ("symbolic", "autograd"):
        loss = m.loss("linear", from_logits=True, ignore_index=255, backward=backward)
        xa = x.clone().requires_grad_(True)
        got = loss(xa, y, sw)
        (ga,) = torch.autograd.grad(got, xa)
        # Reference: elements as rows, ignored ones dropped, each weighted by its sample's weight.
        xb = x.clone().requires_grad_(True)
        flat = xb.permute(0, 2, 3, 1).reshape(-1, k)
        yf = y.reshape(-1)
        wf = sw.view(n, 1).expand(n, h * w).reshape(-1)
        keep = yf != 255
        want = reference_loss("multiclass_mcc", flat[keep], yf[keep], weight=wf[keep])
        (gb,) = torch.autograd.grad(want, xb)
        assert got.item() == pytest.approx(want.item(), abs=1e-10)
        assert float((ga - gb).abs().max()) < 1e-10
        assert float(ga[0, :, :1].abs().max()) == 0.0


def test_samplewise_and_memory_decay() -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 4, 10, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (3, 10), generator=g)
    m = metricc.compile("quadratic_kappa")
    per = m.loss("linear", from_logits=True, multidim_average="samplewise", reduction="none",
                 eps=0.0)(x, y)
    for i in range(3):
        want = reference_loss("quadratic_kappa", x[i].T, y[i])
        assert float(per[i]) == pytest.approx(want.item(), abs=1e-10)
    loss = m.loss("linear", from_logits=True, memory_decay=0.5, eps=0.0)
    first, second = x[:2], x[2:]
    loss(first, y[:2])
    got = loss(second, y[2:])
    q = torch.softmax(x, 1)
    onehot = torch.nn.functional.one_hot(y, 4).to(q.dtype)
    c1 = torch.einsum("nmi,njm->ij", onehot[:2], q[:2])
    c2 = torch.einsum("nmi,njm->ij", onehot[2:], q[2:])
    assert got.item() == pytest.approx(1 - float(closed_form("quadratic_kappa", c2 + 0.5 * c1)),
                                       abs=1e-10)
    loss.reset_memory()
    assert float(loss(second, y[2:])) == pytest.approx(
        1 - float(closed_form("quadratic_kappa", c2)), abs=1e-10)


def test_compile_fullgraph() -> None:
    loss = metricc.compile("quadratic_kappa").loss(from_logits=True)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    x = torch.randn(16, 5, requires_grad=True)
    y = torch.randint(0, 5, (16,))
    got = compiled(x, y)
    (g1,) = torch.autograd.grad(got, x)
    want = loss(x, y)
    (g2,) = torch.autograd.grad(want, x)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    assert torch.allclose(g1, g2, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(("args", "message"), [
    ((torch.randn(4, 3), torch.randn(4)), "integer tensor of class indices"),
    ((torch.randn(4, 3), torch.zeros(4, 3, dtype=torch.long)), "shape \\(4,\\)"),
    ((torch.randn(4, 3), torch.tensor([0, 1, 3, 0])), "class index 3"),
    ((torch.full((4, 3), float("nan")), torch.tensor([0, 1, 2, 0])), "NaN"),
    ((torch.randn(4), torch.tensor([0, 1, 2, 0])), "shape \\(N, K, \\*\\)"),
])
def test_bad_input_is_refused(args: tuple, message: str) -> None:
    loss = metricc.compile("quadratic_kappa").loss(from_logits=True)
    with pytest.raises(MetricError, match=message):
        loss(*args)


def test_bad_options_are_refused() -> None:
    m = metricc.compile("quadratic_kappa")
    with pytest.raises(MetricError, match="relaxation='anyloss' is not one of"):
        m.loss("anyloss")
    with pytest.raises(MetricError, match="temperature must be"):
        m.loss(temperature=0)
    with pytest.raises(MetricError, match="samplewise"):
        m.loss(multidim_average="samplewise", memory_decay=0.5)


# --- check and verify --------------------------------------------------------------------------

def test_check_reports_undefined_set_and_direction() -> None:
    r = metricc.compile("quadratic_kappa").check()
    assert [str(s) for s in r.undefined] == [
        "sum(i, j, (-j + i)**2*row(i)*col(j)) = 0  (division by zero)"]
    assert metricc.compile("multiclass_accuracy").check().direction == "increasing"
    assert metricc.compile("expected_cost").check().direction == "decreasing"
    assert not metricc.compile("expected_cost").check().wrong_way()
    bad = metricc.compile("sum(i, j, abs(i-j) * C[i,j]) / n")  # a cost, read as higher-better
    assert bad.check().direction == "decreasing" and bad.check().wrong_way()
    with pytest.warns(MetricWarning, match="wrong way"):
        bad.loss()
    assert "undefined where" in str(r) and "raising a sample's true-class score" in str(r)


def test_verify_passes_and_catches_a_wrong_kernel() -> None:
    m = metricc.compile("quadratic_kappa")
    report = m.verify()
    assert report.ok and any("proved equal" in c.how for c in report.checks)
    broken = metricc.compile("quadratic_kappa", higher_is_better=True)
    broken._kernels_source = m.kernels_source.replace("(a - b)**2", "(a - b)**3")
    with pytest.raises(VerificationError, match="differs"):
        broken.verify(numeric=False)


# --- CLI and standalone ------------------------------------------------------------------------

def test_cli_grad_check_compile(tmp_path, capsys) -> None:
    from metricc.cli import main

    assert main(["grad", "sum(i, C[i,i]) / n"]) == 0
    assert "df/dC[a,b] = delta(a, b)/n - sum(i, C[i, i])/n**2" in capsys.readouterr().out
    assert main(["check", "multiclass_accuracy"]) == 0
    assert "verification passed" in capsys.readouterr().out
    out = tmp_path / "qwk_loss.py"
    assert main(["compile", "quadratic_kappa", "--option", "from_logits=True", "-o",
                 str(out)]) == 0
    spec = importlib.util.spec_from_file_location("qwk_loss_standalone", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop("qwk_loss_standalone", None)
    text = out.read_text()
    assert "import metricc" not in text and "sympy" not in text.split('"""', 2)[2]
    x = torch.randn(20, 5, dtype=torch.float64)
    y = torch.randint(0, 5, (20,))
    a = module.QuadraticKappaLoss()(x, y)
    b = metricc.compile("quadratic_kappa").loss(from_logits=True)(x, y)
    assert float(a) == float(b)


# --- scripts -----------------------------------------------------------------------------------

def _script(path: str, *args: str) -> str:
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(root / path), *args], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_benchmark_smoke_run() -> None:
    out = _script("benchmarks/bench_matrix.py", "--quick", "--no-compile", "--threads", "1")
    assert "| qwk symbolic |" in out and "ratios against cross_entropy" in out


def test_ordinal_evidence_smoke_run(tmp_path) -> None:
    out = _script("examples/ordinal_diabetes.py", "--quick", "--out", str(tmp_path))
    assert "| 20 | qwk |" in out
    assert (tmp_path / "ordinal_qwk.png").stat().st_size > 1000
    rows = (tmp_path / "ordinal_runs.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 * 4  # seeds x folds x losses


def test_matrix_metric_pickles_and_refuses_what_does_not_apply() -> None:
    import pickle

    m = metricc.compile("expected_cost", M=[[0, 1], [2, 0]])
    back = pickle.loads(pickle.dumps(m))
    assert back.score([0, 1, 1], [1, 1, 0], num_classes=2) == m.score([0, 1, 1], [1, 1, 0],
                                                                       num_classes=2)
    # issue 24: K x K metrics now have metric(), a torchmetrics Metric on hard labels
    stateful = m.metric(num_classes=2)
    stateful.update(torch.tensor([0, 1, 1]), torch.tensor([1, 1, 0]))
    assert float(stateful.compute()) == m.score([0, 1, 1], [1, 1, 0], num_classes=2)
    with pytest.raises(MetricError, match="argmax"):
        m.best_threshold()
