"""Input validation of the loss modules (issue 5 item 4): each mistake a MetricError
that names the problem and the fix; none of it in the way of torch.compile."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import metricc
import metricc.runtime.modes
from metricc.runtime.counts import soft_counts


@pytest.fixture(scope="module")
def f1() -> metricc.Metric:
    return metricc.compile("f1")


def probs(n: int = 8) -> torch.Tensor:
    return torch.linspace(0.05, 0.95, n)


def labels(n: int = 8) -> torch.Tensor:
    return (torch.arange(n) % 2).float()


@pytest.mark.parametrize(("input", "target", "pattern"), [
    (probs(8), labels(7), r"same shape.*\(8,\) and \(7,\).*predictions first"),
    (probs(8).reshape(2, 4), labels(8), r"same shape"),
    (torch.arange(8), labels(8), r"floating-point.*torch.int64.*input.float\(\)"),
    (torch.ones(8, dtype=torch.bool), labels(8), r"floating-point.*torch.bool"),
    (probs(8), labels(8).to(torch.complex64), r"target must be real"),
    (probs(8), labels(8).to("meta"), r"on cpu but target on meta.*one device"),
    (probs(8).tolist(), labels(8), r"must be tensors.*list"),
])
def test_static_mistakes(f1: metricc.Metric, input: object, target: object, pattern: str) -> None:
    for validate_args in (True, False):  # free checks: always on
        with pytest.raises(metricc.MetricError, match=pattern):
            f1.loss(validate_args=validate_args)(input, target)


def test_mask_in_0_255(f1: metricc.Metric) -> None:
    mask = (labels(8) * 255).to(torch.uint8)
    with pytest.raises(metricc.MetricError, match=r"outside \[0, 1\].*max 255.*target / 255"):
        f1.loss()(probs(8), mask)
    # the fix the message gives works
    fixed = f1.loss()(probs(8), mask / 255)
    assert fixed.item() == pytest.approx(f1.loss()(probs(8), labels(8)).item())


def test_negative_targets_hint_at_swapped_arguments(f1: metricc.Metric) -> None:
    logits = torch.linspace(-3, 3, 8)
    with pytest.raises(metricc.MetricError, match=r"target has values outside.*swapped"):
        f1.loss()(labels(8), logits)


def test_probabilities_out_of_range_suggest_from_logits(f1: metricc.Metric) -> None:
    logits = torch.linspace(-3, 3, 8)
    with pytest.raises(metricc.MetricError,
                       match=r"input has values outside \[0, 1\].*from_logits=True"):
        f1.loss()(logits, labels(8))
    # with from_logits=True the same input is fine
    assert torch.isfinite(f1.loss(from_logits=True)(logits, labels(8)))


@pytest.mark.parametrize(("bad", "pattern"), [(float("nan"), "NaN"), (float("inf"), "inf"),
                                              (float("-inf"), "-inf")])
@pytest.mark.parametrize("from_logits", [False, True])
def test_nonfinite_input(f1: metricc.Metric, bad: float, pattern: str, from_logits: bool) -> None:
    x = probs(8).clone()
    x[3] = bad
    with pytest.raises(metricc.MetricError, match=f"input contains {pattern}"):
        f1.loss(from_logits=from_logits)(x, labels(8))


def test_nan_target(f1: metricc.Metric) -> None:
    y = labels(8).clone()
    y[0] = float("nan")
    with pytest.raises(metricc.MetricError, match="target contains NaN"):
        f1.loss()(probs(8), y)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=32), min_size=1, max_size=12))
@example([1.0000001192092896])  # the float32 after 1
@example([-1.401298464324817e-45, 0.5])  # the negative float32 nearest 0
@example([1.401298464324817e-45, 1.0, -0.0])  # all in [0, 1]
@example([float("nan")])
@example([float("inf"), 0.0])
def test_float32_labels_are_checked_as_float64_ones_are(values: list[float]) -> None:
    """float32 labels are range-checked on their bit patterns (an integer min/max); float64
    labels by their values. Both accept exactly the labels in [0, 1] (-0.0 and subnormals
    included) and refuse NaN, infinities and everything outside with the same message."""
    x = torch.zeros(len(values))
    outcomes = []
    for dtype in (torch.float32, torch.float64):
        try:
            metricc.runtime.modes.validate_inputs(x, torch.tensor(values, dtype=dtype),
                                                  metricc.runtime.modes.BINARY, True, None, True)
            outcomes.append("ok")
        except metricc.MetricError as e:
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1]
    assert (outcomes[0] == "ok") == all(0 <= v <= 1 for v in values)


def test_integer_bool_and_soft_targets_are_accepted(f1: metricc.Metric) -> None:
    expected = f1.loss()(probs(8), labels(8)).item()
    for target in (labels(8).long(), labels(8).bool(), labels(8).to(torch.uint8),
                   labels(8).double()):
        assert f1.loss()(probs(8), target).item() == pytest.approx(expected)
    soft = torch.full((8,), 0.5)
    assert torch.isfinite(f1.loss()(probs(8), soft))


# --- multiclass and multilabel ----------------------------------------------------------


def class_probs(n: int = 2, c: int = 3, m: int = 4) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.softmax(torch.randn(n, c, m, generator=g), dim=1)


@pytest.mark.parametrize(("bad", "pattern"), [(3, r"class index 3.*3 classes \(indices 0 to 2\)"),
                                              (-1, r"class index -1.*ignore_index=-1")])
def test_class_indices_out_of_range(f1: metricc.Metric, bad: int, pattern: str) -> None:
    target = torch.zeros(2, 4, dtype=torch.long)
    target[1, 2] = bad
    loss = f1.loss(mode="multiclass")
    with pytest.raises(metricc.MetricError, match=pattern):
        loss(class_probs(), target)
    target[1, 2] = 1
    assert torch.isfinite(loss(class_probs(), target))


def test_ignored_values_are_not_range_checked(f1: metricc.Metric) -> None:
    """255 marks 'void' in segmentation masks; with ignore_index=255 it is fine."""
    target = torch.zeros(2, 4, dtype=torch.long)
    target[0, 0] = 255
    target[1, 1] = 2
    assert torch.isfinite(f1.loss(mode="multiclass", ignore_index=255)(class_probs(), target))
    mask = labels(8).long()
    mask[3] = 255
    assert torch.isfinite(f1.loss(ignore_index=255)(probs(8), mask))
    with pytest.raises(metricc.MetricError, match="ignore_index=255"):
        f1.loss()(probs(8), mask)


def test_multilabel_mask_in_0_255(f1: metricc.Metric) -> None:
    target = (torch.rand(2, 3, 4) > 0.5).to(torch.uint8) * 255
    with pytest.raises(metricc.MetricError, match=r"multilabel targets.*target / 255"):
        f1.loss(mode="multilabel")(class_probs(), target)


def test_multiclass_logits_without_from_logits(f1: metricc.Metric) -> None:
    logits = torch.randn(2, 3, 4) * 3
    target = torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(metricc.MetricError, match=r"from_logits=True.*softmax"):
        f1.loss(mode="multiclass")(logits, target)
    assert torch.isfinite(f1.loss(mode="multiclass", from_logits=True)(logits, target))


def test_validate_args_false_skips_the_data_checks(f1: metricc.Metric) -> None:
    """Without validation an out-of-range input is used as it is (the user's call)."""
    x = torch.tensor([1.5, -0.5, 0.25, 0.75], dtype=torch.float64)
    y = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    with pytest.raises(metricc.MetricError):
        f1.loss("linear")(x, y)
    got = f1.loss("linear", validate_args=False)(x, y)
    tp, fp, fn, _ = soft_counts(x.reshape(1, -1), y.reshape(1, -1), None)
    expected = 1 - 2 * tp / (2 * tp + fp + fn + 1e-7)
    assert got.item() == pytest.approx(expected.item())


def test_validate_args_is_a_loss_option(f1: metricc.Metric) -> None:
    assert f1.loss(validate_args=False).validate_args is False
    assert f1.loss().validate_args is True


def test_validation_survives_torch_compile_fullgraph(f1: metricc.Metric) -> None:
    """Data-dependent checks are skipped while tracing, so fullgraph=True compiles
    with validate_args=True; the compiled loss and gradient equal eager's."""
    loss = f1.loss(validate_args=True)
    compiled = torch.compile(loss, fullgraph=True)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, generator=g)
    y = (torch.rand(64, generator=g) > 0.5).float()
    xc = x.clone().requires_grad_()
    value = compiled(xc, y)
    value.backward()
    xe = x.clone().requires_grad_()
    expected = loss(xe, y)
    expected.backward()
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(xc.grad, xe.grad)
    # Eager still validates what the compiled graph cannot.
    with pytest.raises(metricc.MetricError, match="from_logits=True"):
        loss(x * 4 - 2, y)
