"""Raw exceptions and misleading messages (issue 36, point 8) and one output dtype for every
statistic's loss (point 9): each mistake gets a MetricError that says what was wrong and what
to do, and each message says what really differs."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import metricc
from metricc.decisions import BestFeasible
from metricc.runtime import hints
from metricc.standalone_file import standalone_source


@pytest.fixture(autouse=True)
def _fresh_hint_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probability hint counts scores over calls in this process: start each test afresh."""
    monkeypatch.setattr(hints, "_IN_UNIT_RUN", [0], raising=False)


# --- best_threshold takes a name or formula ---------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1, allow_nan=False), st.booleans()), min_size=2, max_size=30))
def test_best_threshold_compiles_a_name_or_formula(pairs: list[tuple[float, bool]]) -> None:
    scores = [s for s, _ in pairs]
    target = [int(t) for _, t in pairs]
    target[:2] = [1, 0]  # both classes
    want = metricc.compile("f1").best_threshold(scores, target)
    assert metricc.best_threshold("f1", scores, target) == want
    assert metricc.best_threshold("2*TP/(2*TP+FP+FN)", scores, target) == want


def test_best_threshold_refuses_a_non_metric_in_words() -> None:
    with pytest.raises(metricc.MetricError, match=r"best_threshold takes a compiled metric.*got int"):
        metricc.best_threshold(3, [0.2, 0.8], [0, 1])  # type: ignore[arg-type]
    with pytest.raises(metricc.MetricError, match="did you mean 'f1'"):
        metricc.best_threshold("f11", [0.2, 0.8], [0, 1])


def test_best_feasible_compiles_a_formula_with_constraints() -> None:
    keep = BestFeasible("precision subject to recall >= 0.5", keep="latest")
    assert keep.metric is metricc.compile("precision subject to recall >= 0.5")
    assert keep.update(0, [0.9, 0.2, 0.7, 0.1], [1, 1, 0, 0], state={"w": 1}).feasible


# --- row_losses checks its rows ---------------------------------------------------------------
@pytest.mark.parametrize("formula", ["f1", "precision subject to recall >= 0.5"])
def test_row_losses_refuses_one_dimensional_scores(formula: str) -> None:
    loss: Any = metricc.compile(formula).loss()
    s, y = torch.rand(8), (torch.rand(8) > 0.5).float()
    with pytest.raises(metricc.MetricError, match=r"row_losses takes floating-point scores of "
                       r"shape \(R, M\).*shape \(8,\).*s\.reshape\(1, -1\)"):
        loss.row_losses(s, y)
    # the fix the message names gives one row: the loss of the whole batch
    row = loss.row_losses(s.reshape(1, -1), y.reshape(1, -1))
    assert row.shape == (1,)


def test_row_losses_refuses_labels_and_weights_of_another_shape_or_dtype() -> None:
    loss: Any = metricc.compile("f1").loss()
    s = torch.rand(2, 8)
    with pytest.raises(metricc.MetricError, match=r"labels of the scores' shape \(2, 8\), got "
                       r"torch.float32 of shape \(2, 7\)"):
        loss.row_losses(s, torch.ones(2, 7))
    with pytest.raises(metricc.MetricError, match=r"got torch.int64 of shape \(2, 8\); use y.to"):
        loss.row_losses(s, torch.ones(2, 8, dtype=torch.long))
    with pytest.raises(metricc.MetricError, match=r"weights of the scores' shape.*shape \(8,\)"):
        loss.row_losses(s, torch.ones(2, 8), torch.ones(8))
    with pytest.raises(metricc.MetricError, match="takes tensors"):
        loss.row_losses(s.tolist(), torch.ones(2, 8))
    with pytest.raises(metricc.MetricError, match=r"\(R, M\) or \(N, R, M\)"):
        loss.row_losses(torch.rand(2, 2, 2, 2), torch.ones(2, 2, 2, 2))


# --- a standalone file's constructor says did-you-mean ----------------------------------------
def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses in the file look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


@pytest.mark.parametrize(("formula", "cls"), [("f1", "F1Loss"), ("quadratic_kappa", "QuadraticKappaLoss"),
                                              ("auroc", "AurocLoss")])
def test_standalone_constructor_typo_gets_did_you_mean(tmp_path: Path, formula: str, cls: str) -> None:
    path = tmp_path / f"{cls.lower()}_file.py"
    path.write_text(standalone_source(metricc.compile(formula), warn_monotonicity=False),
                    encoding="utf-8")
    module = _load(path, f"{cls.lower()}_file")
    loss_class = getattr(module, cls)
    with pytest.raises(ValueError, match=r"unknown loss option 'from_logit' \(did you mean "
                       r"'from_logits'\?\); options are .*from_logits") as e:
        loss_class(from_logit=True)
    assert type(e.value).__name__ == "MetricError"  # the file's own copy of metricc's class
    # the message is the in-process one, word for word
    with pytest.raises(metricc.MetricError) as here:
        metricc.compile(formula).loss(from_logit=True, warn_monotonicity=False)
    assert str(e.value) == str(here.value)
    assert loss_class(from_logits=True).from_logits is True  # the real option still works


# --- one-vs-rest curve scores say what is wrong with the classes ------------------------------
def test_one_column_of_scores_is_not_called_a_missing_class() -> None:
    auroc = metricc.compile("auroc")
    with pytest.raises(metricc.MetricError) as e:
        auroc.score(np.random.default_rng(0).random((6, 1)), np.zeros(6, dtype=int))
    assert "0..0" not in str(e.value) and "missing []" not in str(e.value)
    assert "2 or more classes, got one column (shape (6, 1))" in str(e.value)
    assert "shape (N,)" in str(e.value)


def test_absent_and_out_of_range_classes_are_named() -> None:
    auroc, s = metricc.compile("auroc"), np.random.default_rng(1).random((6, 4))
    with pytest.raises(metricc.MetricError, match=r"every class 0..3 .* in the target; missing "
                       r"\[2, 3\]: drop the columns"):
        auroc.score(s, [0, 1, 1, 0, 1, 0])
    with pytest.raises(metricc.MetricError, match=r"target holds class 4, but the scores have 4 "
                       r"columns \(classes 0..3\)"):
        auroc.score(s, [0, 1, 2, 3, 4, 0])
    with pytest.raises(metricc.MetricError, match=r"target holds class -1"):
        auroc.score(s, [0, 1, 2, 3, -1, 0])
    # all present: the one-vs-rest macro average, as scikit-learn's
    sklearn = pytest.importorskip("sklearn.metrics")
    y = [0, 1, 2, 3, 1, 0]
    want = sklearn.roc_auc_score(y, s / s.sum(1, keepdims=True), multi_class="ovr")
    assert auroc.score(s / s.sum(1, keepdims=True), y) == pytest.approx(want, rel=1e-12)


# --- chained comparisons ----------------------------------------------------------------------
@pytest.mark.parametrize(("formula", "constraints", "column", "first"), [
    ("precision subject to recall >= 0.8 >= 0.8", None, 36, "recall >= 0.8"),
    ("precision", ["recall >= 0.8 >= 0.8"], 15, "recall >= 0.8"),
    ("precision subject to fpr <= 0.1, 0.8 <= recall <= 0.9", None, 48, "0.8 <= recall"),
    ("precision subject to fpr <= 0.1 and 0.8 <= recall <= 0.9", None, 51, "0.8 <= recall"),
    ("best(recall, precision >= 0.9 >= 0.8)", None, 31, "precision >= 0.9"),
])
def test_a_chained_comparison_gets_a_clear_positioned_error(
        formula: str, constraints: list[str] | None, column: int, first: str) -> None:
    with pytest.raises(metricc.MetricSyntaxError) as e:
        metricc.compile(formula, constraints=constraints)
    assert e.value.reason.startswith(f"comparisons do not chain: '{first}' already compares")
    assert "write each bound on its own" in e.value.reason
    assert (e.value.line, e.value.column) == (1, column)
    text = constraints[0] if constraints else formula
    assert text[column - 1:column + 1] in (">=", "<=")  # the caret is under the second one


def test_best_threshold_constraints_chained_get_the_same_message() -> None:
    with pytest.raises(metricc.MetricSyntaxError, match="comparisons do not chain"):
        metricc.best_threshold("precision", [0.2, 0.8], [0, 1], constraints=["recall >= 0.5 >= 0.1"])


# --- a shape message that names the same shape twice ------------------------------------------
def test_soft_curve_weight_messages_name_what_differs() -> None:
    from metricc.runtime.curve import soft_curve

    s, y = torch.rand(256), (torch.rand(256) > 0.5).float()
    with pytest.raises(metricc.MetricError) as e:
        soft_curve(s, y, torch.ones(256, dtype=torch.long), from_logits=False)
    assert str(e.value) == "weight must be a floating-point tensor, got torch.int64; use weight.float()"
    with pytest.raises(metricc.MetricError, match=r"^weight must be a tensor of shape \(256,\), got \(255,\)$"):
        soft_curve(s, y, torch.ones(255), from_logits=False)
    with pytest.raises(metricc.MetricError, match=r"shape \(256, 3\) or \(256,\) \(one weight per "
                       r"sample\), got \(3,\)"):
        soft_curve(torch.rand(256, 3), torch.ones(256, 3), torch.ones(3), from_logits=False)
    with pytest.raises(metricc.MetricError, match="weight is on meta but the scores on cpu"):
        soft_curve(s, y, torch.ones(256, device="meta"), from_logits=False)
    with pytest.raises(metricc.MetricError, match=r"^target must be real 0/1 labels, got torch.complex64$"):
        soft_curve(s, y.to(torch.complex64), from_logits=False)
    # the weights it takes still weigh: weight 2 on every score is the unweighted curve twice
    tp, fp, *_ = soft_curve(s, y, torch.full((256,), 2.0), from_logits=False)
    tp1, fp1, *_ = soft_curve(s, y, from_logits=False)
    torch.testing.assert_close(tp, 2 * tp1)
    torch.testing.assert_close(fp, 2 * fp1)


# --- size limits name the real cause ----------------------------------------------------------
def test_a_large_formula_without_bindings_is_not_told_about_bindings() -> None:
    big = " + ".join(f"log(TP + {i})" for i in range(1, 300))
    with pytest.raises(metricc.MetricError) as e:
        metricc.compile(big)
    assert "binding" not in str(e.value)
    assert str(e.value) == ("formula is too large to analyse (more than 600 operations); write it "
                            "with fewer terms")
    deep = "(" * 70 + "TP" + " + 1)*FP" * 70
    with pytest.raises(metricc.MetricError) as e:
        metricc.compile(deep)
    assert "binding" not in str(e.value)
    assert "nests more than 60 operations deep; write it with fewer nested functions" in str(e.value)


def test_a_large_binding_chain_is_told_about_bindings() -> None:
    chain = "b0 = TP\n" + "".join(f"b{i} = b{i - 1}*(b{i - 1} + 1)\n" for i in range(1, 12)) + "b11"
    with pytest.raises(metricc.MetricError, match=r"more than 600 operations once its bindings are "
                       r"substituted\); write it with fewer terms, or fewer or smaller bindings"):
        metricc.compile(chain)


def test_named_metrics_count_at_their_full_size() -> None:
    many = " + ".join(f"log({m} + {i})" for i, m in enumerate(["mcc", "cohen_kappa"] * 20, start=1))
    with pytest.raises(metricc.MetricError, match=r"once its named metrics are substituted\); "
                       r"write it with fewer terms, or fewer or smaller named metrics"):
        metricc.compile(many)


# --- num_classes is named only where the user passed it ----------------------------------------
def test_classes_fixed_by_a_parameter_matrix_are_said_to_be() -> None:
    cost = metricc.compile("expected_cost", M=torch.tensor([[0.0, 1.0], [1.0, 0.0]]))  # type: ignore[arg-type]
    preds, target = torch.rand(6, 3), torch.tensor([0, 1, 2, 0, 1, 2])
    for call in (lambda: cost.score(preds, target), lambda: cost.metric().update(preds, target)):
        with pytest.raises(metricc.MetricError) as e:
            call()
        assert "num_classes" not in str(e.value)
        assert str(e.value) == ("this metric's K x K parameter M is 2 x 2, but preds has 3 classes "
                                "on dim 1")
    with pytest.raises(metricc.MetricError, match=r"class indices in 0..1 \(this metric's K x K "
                       r"parameter M is 2 x 2\)"):
        cost.score(torch.tensor([0, 1, 1]), torch.tensor([0, 2, 1]))
    # where the user passes num_classes, the message names it
    with pytest.raises(metricc.MetricError, match=r"^num_classes=4, but preds has 3 classes on dim 1$"):
        metricc.compile("quadratic_kappa").score(preds, target, num_classes=4)
    # and a matching matrix scores as before (scikit-learn's misclassification rate)
    assert cost.score(torch.tensor([0, 1, 1, 0]), torch.tensor([0, 1, 0, 0])) == 0.25


# --- an (N, C) input to a binary loss ---------------------------------------------------------
@pytest.mark.parametrize("formula", ["f1", "auroc"])
def test_class_scores_in_binary_mode_hint_multiclass(formula: str) -> None:
    loss = metricc.compile(formula).loss()
    x, t = torch.softmax(torch.randn(8, 3), 1), torch.randint(0, 3, (8,))
    with pytest.raises(metricc.MetricError, match=r"got \(8, 3\) and \(8,\): input looks like "
                       r"scores of 3 classes on dim 1 and target like class indices; pass "
                       r"mode='multiclass'"):
        loss(x, t)
    metricc.compile(formula).loss(mode="multiclass")(x, t)  # the fix works
    with pytest.raises(metricc.MetricError, match="mode='multiclass'"):
        metricc.compile("f1").score(x, t)
    # other mismatches keep the plain message
    with pytest.raises(metricc.MetricError) as e:
        loss(torch.rand(8, 3), torch.randint(0, 2, (8, 4)).float())
    assert "multiclass" not in str(e.value) and "predictions first" in str(e.value)


# --- probabilities passed as logits, in a small batch -----------------------------------------
def _probability_hints(loss: Any, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> int:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for x, y in batches:
            loss(x, y)
    return sum("looks like probabilities" in str(w.message) for w in seen)


@pytest.mark.parametrize("formula", ["f1", "auroc"])
def test_32_probabilities_with_from_logits_get_the_hint(formula: str) -> None:
    g = torch.Generator().manual_seed(5)
    x, y = torch.rand(32, generator=g), (torch.rand(32, generator=g) > 0.5).float()
    loss = metricc.compile(formula).loss(from_logits=True)
    with pytest.warns(metricc.MetricWarning, match=r"all 32 scores lie in \[0, 1\]"):
        loss(x, y)
    # once per run of such scores, not at every batch
    assert _probability_hints(loss, [(x, y)] * 5) == 0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([0.01, 0.3, 1.0, 3.0]), st.integers(1, 32))
def test_logits_never_get_the_hint(seed: int, spread: float, batch: int) -> None:
    """Logits about 0, of any spread (a fresh model's are near 0): 40 batches, no hint."""
    hints._IN_UNIT_RUN[0] = 0
    g = torch.Generator().manual_seed(seed)
    batches = [(spread * torch.randn(batch, generator=g), (torch.rand(batch, generator=g) > 0.5).float())
               for _ in range(40)]
    assert _probability_hints(metricc.compile("f1").loss(from_logits=True), batches) == 0


# --- one output dtype for every statistic's loss ----------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("formula", ["f1", "quadratic_kappa", "auroc", "average_precision"])
def test_every_statistic_returns_float32_for_half_input(formula: str, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(6)
    metric = metricc.compile(formula)
    if metric.statistic.name == "matrix":
        x, y = torch.randn(64, 3, generator=g), torch.randint(0, 3, (64,), generator=g)
        loss = metric.loss(from_logits=True)
    else:
        x, y = torch.rand(64, generator=g), (torch.rand(64, generator=g) > 0.5).float()
        loss = metric.loss()
    x = x.to(dtype).requires_grad_(True)
    out = loss(x, y)
    want = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    assert out.dtype == want
    out.backward()
    assert x.grad is not None and x.grad.dtype == dtype and bool(torch.isfinite(x.grad).all())
    # the half loss is the float32 loss of the same (rounded) scores
    ref = loss(x.detach().to(torch.float32), y)
    torch.testing.assert_close(out.detach(), ref.to(want), rtol=1e-6, atol=1e-6)


def test_reduction_none_curve_losses_follow_the_same_rule() -> None:
    loss = metricc.compile("auroc").loss(mode="multiclass", reduction="none", from_logits=True)
    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(7)).half()
    out = loss(x, torch.arange(40) % 3)
    assert out.shape == (3,) and out.dtype == torch.float32

