"""Issue 25: the curve as the third statistic, end to end through the facade.

``compile`` of curve formulas and names, exact scores (scikit-learn, torchmetrics, with ties),
the loss (symbolic backward = autograd of a plain implementation = finite differences, modes,
pickling, torch.compile), check(), verify(), standalone files and the CLI.
"""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import sympy
import torch
from script_loader import load_script
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score

import metricc
from metricc.analysis.curve import DEFAULT_TAU, DEFAULT_TAU_GATE
from metricc.analysis.statistics import STATISTICS
from metricc.curve_metric import CurveMetric
from metricc.emit.runtime_source import SOURCES
from metricc.language.curve import CurveReduction
from metricc.metric import FACADES
from metricc.runtime.curve import CurveRelaxation, soft_curve
from metricc.runtime.curve_loss import CurveLoss, SmoothMax
from metricc.standalone_file import standalone_source

ROOT = Path(__file__).resolve().parents[1]
F64 = torch.float64
TOL = 1e-9


def tied(n: int, seed: int, levels: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Scores on a coarse grid (many ties) and labels with both classes."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.35).astype(np.int64)
    y[:2] = [0, 1]
    s = np.round(np.clip(rng.normal(0.4 + 0.25 * y, 0.25), 0, 1) * levels) / levels
    return s, y


# --- 1. compile ------------------------------------------------------------------------------------

def test_curve_is_registered_and_compile_builds_a_curve_metric() -> None:
    assert FACADES["curve"] is CurveMetric and STATISTICS["curve"].name == "curve"
    for text, kw in (("auroc", {}), ("roc_auc", {}), ("partial_auroc", {"max_fpr": 0.1}),
                     ("recall_at_precision", {"min_precision": 0.9}), ("area(recall, fpr)", {}),
                     ("2*auroc - 1", {})):
        m = metricc.compile(text, **kw)
        assert isinstance(m, CurveMetric) and m.expr.has(CurveReduction)
        assert "area(" in m.expr_text or "best(" in m.expr_text
        assert repr(m).startswith("CurveMetric(")
    m = metricc.compile("partial_auroc", max_fpr=0.25)
    assert m.parameters == {"max_fpr": 0.25} and "1/4" in m.expr_text
    # the expression reads back in the formula language
    again = metricc.compile(metricc.compile("auroc").expr_text)
    assert again.expr == metricc.compile("auroc").expr


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5])
def test_max_fpr_must_lie_in_0_1(bad: float) -> None:
    with pytest.raises(metricc.MetricError, match=r"max_fpr must be"):
        metricc.compile("partial_auroc", max_fpr=bad)
    assert metricc.compile("partial_auroc", max_fpr=1).score([0.1, 0.9, 0.4], [0, 1, 1]) == 1.0


def test_gradient_and_undefined_are_the_local_forms() -> None:
    m = metricc.compile("auroc")
    g = m.gradient
    assert g["dh/dr0"] == 1 and isinstance(g["r0"], CurveReduction)
    TP, FN = sympy.symbols("TP FN")
    # d/dTP (with FN = P - TP) of the local trapezoid, by SymPy directly
    term = g["r0: term"]
    want = sympy.diff(term, TP) - sympy.diff(term, FN)
    assert sympy.simplify(g["r0: dterm/dTP_k"] - want) == 0
    assert sympy.sympify("FN + TP") in m.undefined and sympy.sympify("FP + TN") in m.undefined
    best = metricc.compile("recall_at_precision").gradient
    assert {"r0: f", "r0: df/dTP", "r0: bound d", "r0: dd/dFP"} <= set(best)


def test_unknown_options_and_constraints_are_refused_helpfully() -> None:
    m = metricc.compile("auroc")
    with pytest.raises(metricc.MetricError, match=r"a curve loss has no amplifier"):
        m.loss(amplifier=3)
    with pytest.raises(metricc.MetricError, match=r"did you mean 'bins'"):
        m.loss(bin=64)
    with pytest.raises(metricc.MetricError, match=r"curve metric"):
        metricc.compile("auroc", constraints=["recall >= 0.9"])
    with pytest.raises(metricc.MetricError, match=r"best_threshold"):
        m.best_threshold([0.1], [1])


# --- 3. exact evaluation -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_binary_scores_equal_scikit_learn_with_ties(seed: int) -> None:
    s, y = tied(300, seed)
    w = np.random.default_rng(seed).uniform(0.2, 2, s.size)
    assert abs(metricc.compile("auroc").score(s, y) - roc_auc_score(y, s)) < TOL
    assert abs(metricc.compile("auroc").score(s, y, sample_weight=w) - roc_auc_score(y, s, sample_weight=w)) < TOL
    assert abs(metricc.compile("ap").score(s, y) - average_precision_score(y, s)) < TOL
    for f in (0.1, 0.3, 1.0):
        want = roc_auc_score(y, s, max_fpr=f)
        assert abs(metricc.compile("partial_auroc", max_fpr=f).score(s, y) - want) < TOL
    p, r, _ = precision_recall_curve(y, s)
    with np.errstate(invalid="ignore"):
        f1 = np.nan_to_num(2 * p * r / (p + r))
    assert abs(metricc.compile("best_f1").score(s, y) - f1.max()) < TOL


@pytest.mark.parametrize("seed", range(3))
def test_fixed_precision_and_recall_equal_torchmetrics(seed: int) -> None:
    from torchmetrics.classification import BinaryPrecisionAtFixedRecall, BinaryRecallAtFixedPrecision

    s, y = tied(200, seed)
    st, yt = torch.tensor(s, dtype=torch.float32), torch.tensor(y)
    for bound in (0.5, 0.7):
        want = float(BinaryRecallAtFixedPrecision(min_precision=bound)(st, yt)[0])
        got = metricc.compile("recall_at_precision", min_precision=bound).score(s, y)
        assert abs(got - want) < 1e-6  # torchmetrics computes its curve in float32
        want = float(BinaryPrecisionAtFixedRecall(min_recall=bound)(st, yt)[0])
        got = metricc.compile("precision_at_recall", min_recall=bound).score(s, y)
        assert abs(got - want) < 1e-6


@pytest.mark.parametrize("average", ["macro", "weighted", "micro", None])
def test_multilabel_and_one_vs_rest_equal_scikit_learn(average: str | None) -> None:
    rng = np.random.default_rng(7)
    s = np.round(rng.random((120, 3)) * 8) / 8
    y = (rng.random((120, 3)) < 0.4).astype(np.int64)
    y[:2] = [[0, 0, 0], [1, 1, 1]]
    for name, sk in (("auroc", roc_auc_score), ("average_precision", average_precision_score)):
        np.testing.assert_allclose(metricc.compile(name).score(s, y, average=average),
                                   sk(y, s, average=average), rtol=0, atol=TOL)
    if average in ("macro", "weighted"):
        p = rng.dirichlet(np.ones(4), 150)
        p = np.round(p * 20) / 20
        p /= p.sum(1, keepdims=True)
        t = rng.integers(0, 4, 150)
        t[:4] = np.arange(4)
        got = metricc.compile("auroc").score(p, t, average=average)
        assert abs(got - roc_auc_score(t, p, multi_class="ovr", average=average)) < TOL


def test_value_of_given_curve_points_and_undefined_labels() -> None:
    m = metricc.compile("auroc")
    assert m.value([2, 2, 1, 1, 0], [2, 1, 1, 0, 0], 2, 2) == 0.75
    batch = m.value([[2, 2, 1, 1, 0]] * 2, [[2, 1, 1, 0, 0]] * 2, [2, 2], [2, 2])
    np.testing.assert_allclose(batch, [0.75, 0.75])
    with pytest.raises(metricc.MetricError, match="positives and negatives"):
        m.score([0.1, 0.2], [1, 1])
    with pytest.raises(metricc.MetricError, match="one shape"):
        m.value([1, 0], [1, 0, 0], 1, 1)


def test_metric_without_torchmetrics_is_a_metric_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchmetrics", None)
    monkeypatch.delitem(sys.modules, "metricc.evaluate.curve_stateful", raising=False)
    with pytest.raises(metricc.MetricError, match=r"pip install 'metricc\[torchmetrics\]'"):
        metricc.compile("auroc").metric()


# --- 2. the loss ---------------------------------------------------------------------------------------

def _plain_loss(loss: CurveLoss, s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Autograd through the soft curve's own forward and the value kernel (no symbolic backward)."""
    tp, fp, pos, neg = soft_curve(s, y, relax=loss.relax, from_logits=loss.from_logits)
    v = loss.curve_value(tp, fp, pos, neg, loss.eps, loss.smooth_max.tau, loss.smooth_max.tau_gate)
    return 1 - v


@pytest.mark.parametrize("name", ["auroc", "average_precision", "partial_auroc", "best_f1",
                                  "recall_at_precision"])
@pytest.mark.parametrize("opts", [{"bins": 16}, {"bins": 12, "width": 2, "space": "logit", "clip": 3}])
def test_symbolic_backward_equals_autograd_and_finite_differences(name: str, opts: dict) -> None:
    g = torch.Generator().manual_seed(0)
    y = (torch.rand(40, generator=g) < 0.4).to(F64)
    x = (torch.randn(40, generator=g, dtype=F64) + 2 * y).requires_grad_()
    loss = metricc.compile(name).loss(from_logits=True, **opts)
    (got,) = torch.autograd.grad(loss(x, y), x)
    (want,) = torch.autograd.grad(_plain_loss(loss, x, y), x)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    assert got.abs().max() > 1e-6
    small = x.detach()[:16].clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda z: loss(z, y[:16]), (small,), eps=1e-7, atol=1e-6, rtol=1e-4)


def test_loss_trains_auroc_up_and_defaults_are_the_analysis_ones() -> None:
    assert SmoothMax() == SmoothMax(DEFAULT_TAU, DEFAULT_TAU_GATE)
    loss = metricc.compile("auroc").loss(from_logits=True)
    assert loss.relax == CurveRelaxation() and type(loss).__name__ == "AurocLoss"
    g = torch.Generator().manual_seed(1)
    y = (torch.rand(256, generator=g) < 0.3).float()
    x = torch.randn(256, generator=g).requires_grad_()
    opt = torch.optim.SGD([x], lr=20.0)
    before = roc_auc_score(y.numpy(), x.detach().numpy())
    for _ in range(30):
        opt.zero_grad()
        loss(x, y).backward()
        opt.step()
    assert roc_auc_score(y.numpy(), x.detach().numpy()) > before + 0.2


def test_multilabel_and_multiclass_average_per_class_curves() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(30, 3, generator=g, dtype=F64)
    y = (torch.rand(30, 3, generator=g) < 0.5).to(F64)
    m = metricc.compile("auroc")
    per = m.loss(from_logits=True, mode="multilabel", reduction="none", bins=32)(x, y)
    one = [m.loss(from_logits=True, bins=32)(x[:, c], y[:, c]) for c in range(3)]
    torch.testing.assert_close(per, torch.stack(one), rtol=1e-12, atol=1e-12)
    macro = m.loss(from_logits=True, mode="multilabel", bins=32)(x, y)
    torch.testing.assert_close(macro, per.mean())
    weighted = m.loss(from_logits=True, mode="multilabel", average="weighted", bins=32)(x, y)
    torch.testing.assert_close(weighted, (per * y.sum(0) / y.sum()).sum())
    t = torch.randint(0, 3, (30,), generator=g)
    ovr = m.loss(from_logits=True, mode="multiclass", reduction="none", bins=32)(x, t)
    p = torch.softmax(x, 1)
    want = [m.loss(bins=32)(p[:, c], (t == c).to(F64)) for c in range(3)]
    torch.testing.assert_close(ovr, torch.stack(want), rtol=1e-12, atol=1e-12)
    with pytest.raises(metricc.MetricError, match="class indices"):
        m.loss(mode="multiclass")(p, y)


def test_input_checks_and_hints_are_the_shared_ones() -> None:
    loss = metricc.compile("auroc").loss()
    with pytest.raises(metricc.MetricError, match="from_logits=True"):
        loss(torch.tensor([0.5, 2.0]), torch.tensor([0.0, 1.0]))
    with pytest.raises(metricc.MetricError, match="NaN"):
        loss(torch.tensor([0.5, float("nan")]), torch.tensor([0.0, 1.0]))
    with pytest.warns(metricc.MetricWarning, match="looks like probabilities"):
        metricc.compile("auroc").loss(from_logits=True)(torch.rand(100), (torch.rand(100) > 0.5).float())
    for bad, match in (({"bins": 1}, "bins"), ({"tau": 0}, "tau"), ({"mode": "multilabl"}, "did you mean"),
                       ({"average": "micro"}, "average"), ({"memory_decay": 2}, "memory_decay")):
        with pytest.raises(metricc.MetricError, match=match):
            metricc.compile("auroc").loss(**bad)


def test_memory_decay_pools_curves_and_losses_pickle() -> None:
    m = metricc.compile("average_precision")
    loss = m.loss(from_logits=True, memory_decay=0.5, bins=32)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(50, generator=g, dtype=F64), (torch.rand(50, generator=g) < 0.3).to(F64)
    first = loss(x, y)
    assert not torch.equal(loss(x.flip(0), y), first)
    loss.reset_memory()
    torch.testing.assert_close(loss(x, y), first, rtol=0, atol=0)
    fresh = m.loss(from_logits=True, tau=0.05, bins=32)
    for back in (pickle.loads(pickle.dumps(fresh)), copy.deepcopy(fresh)):
        assert type(back) is type(fresh) and back.smooth_max.tau == 0.05
        torch.testing.assert_close(back(x, y), fresh(x, y), rtol=0, atol=0)


def test_wrong_way_warning_for_a_curve_metric() -> None:
    with pytest.warns(metricc.MetricWarning, match="wrong way"):
        metricc.compile("auroc", higher_is_better=False).loss()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metricc.compile("auroc").loss()


def test_torch_compile_fullgraph_in_a_fresh_process() -> None:
    code = textwrap.dedent("""
        import torch, metricc
        loss = metricc.compile("best_f1 + auroc").loss(from_logits=True, bins=32, memory_decay=0.9)
        x = torch.randn(64, dtype=torch.float64, requires_grad=True)
        hits = torch.arange(64) % 3 == 0
        fn = torch.compile(loss, fullgraph=True, backend="aot_eager")
        # 0/1 targets as float, bool and int: bool ones once failed to trace (bincount's data-dependent length)
        for y in (hits.double(), hits, hits.long()):
            loss.reset_memory(); x.grad = None
            got = fn(x, y); got.backward()
            g1 = x.grad.clone(); x.grad = None
            loss.reset_memory()
            want = loss(x, y); want.backward()
            assert torch.allclose(got, want, rtol=1e-12), (y.dtype, got, want)
            assert torch.allclose(g1, x.grad, rtol=1e-10), y.dtype
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=400,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


# --- 4. check ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["auroc", "partial_auroc", "2*auroc - 1"])
def test_check_finds_the_right_direction_along_feasible_moves(name: str) -> None:
    r = metricc.compile(name).check()
    assert r.moves == {"FN->TP": "increasing", "TN->FP": "decreasing"}, str(r)
    assert r.depends_on_predictions and not r.wrong_way()
    assert "sampled" in str(r) and "(symbolic)" in str(r)
    flipped = metricc.compile(name, higher_is_better=False).check()
    assert set(flipped.wrong_way()) == {"FN->TP", "TN->FP"}


@pytest.mark.parametrize("name", ["best_f1", "recall_at_precision"])
def test_the_smooth_maximum_is_monotone_and_check_says_so(name: str) -> None:
    """The log-mean-exp is nondecreasing in every f_k, so a positive rising past thresholds
    (FN->TP) never lowers best F1 or recall at precision (0.2's softmax-weighted mean did: mixed)."""
    r = metricc.compile(name).check()
    assert r.moves == {"FN->TP": "increasing", "TN->FP": "decreasing"}, str(r)
    assert not r.wrong_way()
    assert metricc.compile("1 - " + name).check().moves == {
        m: {"increasing": "decreasing", "decreasing": "increasing"}.get(d, d) for m, d in r.moves.items()}


def test_check_of_average_precision_reports_mixed_partials_without_flagging_them() -> None:
    r = metricc.compile("average_precision").check()
    assert r.moves["TN->FP"] == "decreasing" and not r.wrong_way()
    assert r.moves["FN->TP"] in ("increasing", "mixed")


# --- 5. verify -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["auroc", "average_precision", "partial_auroc", "recall_at_precision"])
def test_verify_proves_and_compares(name: str) -> None:
    r = metricc.compile(name).verify()
    assert r.ok and len(r.checks) == 6
    assert sum("SymPy derivative" in c.name for c in r.checks) == 2
    assert sum("finite differences" in c.name for c in r.checks) == 2


def test_verify_catches_a_wrong_gradient() -> None:
    from metricc.verify.curve import prove_gradient

    m = metricc.compile("auroc")
    broken = m.kernels_source.replace("return value, dTP, dFP", "return value, dTP * 1.001, dFP")
    assert prove_gradient(m.expr, m.kernels_source, 3)[0]
    assert not prove_gradient(m.expr, broken, 3)[0]


# --- 6. standalone files and the CLI -----------------------------------------------------------------------


def test_standalone_file_imports_only_torch_and_equals_the_loss(tmp_path: Path) -> None:
    assert [n for n, _ in SOURCES].index("metricc.runtime.curve_loss") == \
        [n for n, _ in SOURCES].index("metricc.runtime.curve") + 1
    m = metricc.compile("partial_auroc", max_fpr=0.2)
    src = standalone_source(m, from_logits=True, bins=48)
    assert "class PartialAurocLoss(CurveLoss):" in src
    imports = {line.split()[1].split(".")[0] for line in src.splitlines()
               if line.startswith(("import ", "from "))}
    assert "torch" in imports and imports - {"torch"} <= set(sys.stdlib_module_names), imports
    path = tmp_path / "pauc.py"
    path.write_text(src)
    mod = load_script(path, "pauc_standalone")
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(80, generator=g, dtype=F64, requires_grad=True), (torch.rand(80, generator=g) < 0.3).to(F64)
    a = mod.PartialAurocLoss()(x, y)
    (ga,) = torch.autograd.grad(a, x)
    b = m.loss(from_logits=True, bins=48)(x, y)
    (gb,) = torch.autograd.grad(b, x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(ga, gb, rtol=0, atol=0)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metricc", *args], capture_output=True, text=True,
                          timeout=400, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                      "OMP_NUM_THREADS": "1"})


def test_cli_list_grad_check_and_compile(tmp_path: Path) -> None:
    out = _cli("list")
    assert out.returncode == 0 and "auroc" in out.stdout and "best(f1)" in out.stdout
    out = _cli("grad", "auroc")
    assert out.returncode == 0 and "dterm/dTP_k" in out.stdout and "local forms" in out.stdout
    out = _cli("check", "auroc")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verification passed" in out.stdout
    out = _cli("compile", "auroc", "-o", str(tmp_path / "auroc_loss.py"))
    assert out.returncode == 0, out.stderr
    assert "class AurocLoss(CurveLoss):" in (tmp_path / "auroc_loss.py").read_text()


def test_metric_from_the_facade_equals_torchmetrics_over_batches() -> None:
    from torchmetrics.classification import BinaryAUROC, BinaryAveragePrecision

    gen = torch.Generator().manual_seed(3)
    ours = {"auroc": metricc.compile("auroc").metric(),
            "ap": metricc.compile("average_precision").metric(thresholds=50)}
    refs = {"auroc": BinaryAUROC(), "ap": BinaryAveragePrecision(thresholds=50)}
    for _ in range(4):
        p = torch.rand(40, generator=gen, dtype=torch.float64)
        y = (torch.rand(40, generator=gen) < 0.3).long()
        for k in ours:
            ours[k].update(p, y)
            refs[k].update(p, y)
    for k in ours:  # torchmetrics forms its curve in float32
        assert float(ours[k].compute()) == pytest.approx(float(refs[k].compute()), abs=2e-6)


@pytest.mark.parametrize("width", [1, 3])
def test_non_contiguous_multilabel_input_equals_the_contiguous_one(width: int) -> None:
    loss = metricc.compile("auroc").loss(from_logits=True, mode="multilabel", width=width)
    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = (torch.rand(40, 3, generator=torch.Generator().manual_seed(1)) < 0.3).double()
    a = x.clone().requires_grad_(True)
    b = x.clone().requires_grad_(True)
    va, vb = loss(a.T, y), loss(b.T.contiguous(), y)  # a transposed view: no .view(-1) possible
    va.backward()
    vb.backward()
    assert torch.equal(va, vb) and torch.equal(a.grad, b.grad)
