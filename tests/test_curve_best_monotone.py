"""Issue 38: the relaxed ``best()`` is a monotone smooth maximum, ``tau log(mean_k exp(f_k/tau))``.

0.2's softmax-weighted mean ``sum_k softmax(f/tau)_k f_k`` fell when an ``f_k`` more than ``tau``
below it rose (``(0.5, 0.47) -> (0.5, 0.48)`` lowers it): the trap that trained
``precision_at_recall`` models to rank backwards (docs/curve.md). These properties run the
generated kernels: with ``P = 1`` (``N = 1``) ``recall`` is ``TP_k`` (``fpr`` is ``FP_k``) up to
``eps``, so raising one ``TP_k`` raises exactly one ``f_k`` and leaves the bound alone.
"""

from __future__ import annotations

import math

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import metricc
from metricc.analysis.curve import DEFAULT_TAU

TAU, TAU_GATE, EPS = DEFAULT_TAU, 0.001, 1e-12
F64 = torch.float64
_UNIT = st.floats(0.0, 1.0, allow_nan=False)


def _value(formula: str, tp: list[float], fp: list[float]) -> float:
    loss = metricc.compile(formula).loss_class
    one = torch.ones((), dtype=F64)
    return float(loss.curve_value(torch.tensor(tp, dtype=F64), torch.tensor(fp, dtype=F64), one,
                                  one, EPS, TAU, TAU_GATE))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), t=st.integers(2, 40), step=st.floats(1e-4, 0.5))
@example(data=None, t=2, step=0.01)  # (0.5, 0.47) -> (0.5, 0.48): 0.2's relaxation fell here
def test_best_is_nondecreasing_in_each_value(data: st.DataObject | None, t: int, step: float) -> None:
    if data is None:
        f, k = [0.5, 0.47], 1
    else:
        f = data.draw(st.lists(_UNIT, min_size=t, max_size=t))
        k = data.draw(st.integers(0, t - 1))
    raised = [*f]
    raised[k] = min(1.0, f[k] + step)
    zeros = [0.0] * len(f)
    assert _value("best(recall)", raised, zeros) >= _value("best(recall)", f, zeros) - 1e-12


@settings(max_examples=60, deadline=None)
@given(data=st.data(), t=st.integers(2, 40), step=st.floats(1e-4, 0.5), bound=st.floats(0.05, 0.95))
@example(data=None, t=2, step=0.01, bound=0.5)
def test_best_with_a_bound_is_nondecreasing_in_each_value(data: st.DataObject | None, t: int,
                                                          step: float, bound: float) -> None:
    """``best(recall, fpr <= b)``: the gate reads ``FP_k`` only, so it stays where it is."""
    if data is None:
        f, fp, k = [0.5, 0.47], [0.0, 0.0], 1
    else:
        f = data.draw(st.lists(_UNIT, min_size=t, max_size=t))
        fp = data.draw(st.lists(_UNIT, min_size=t, max_size=t))
        k = data.draw(st.integers(0, t - 1))
    raised = [*f]
    raised[k] = min(1.0, f[k] + step)
    formula = f"best(recall, fpr <= {bound:.6f})"
    assert _value(formula, raised, fp) >= _value(formula, f, fp) - 1e-12


@settings(max_examples=60, deadline=None)
@given(f=st.lists(_UNIT, min_size=1, max_size=60))
def test_best_lies_within_tau_log_t_below_the_maximum(f: list[float]) -> None:
    r = _value("best(recall)", f, [0.0] * len(f))
    top = max(f) / (1 + EPS)
    assert top - TAU * math.log(len(f)) - 1e-9 <= r <= top + 1e-12


def test_the_gradient_of_best_is_nonnegative_on_every_threshold() -> None:
    """``dR/df_k = softmax(f/tau)_k``: no threshold's value is pushed down (the loss's gradient)."""
    g = torch.Generator().manual_seed(0)
    for formula in ("best(recall)", "best(recall, fpr <= 0.3)"):
        kernel = metricc.compile(formula).loss_class.curve_and_gradient
        tp, fp = torch.rand(3, 50, generator=g, dtype=F64), torch.rand(3, 50, generator=g, dtype=F64)
        one = torch.ones(3, dtype=F64)
        _, d_tp, _ = kernel(tp, fp, one, one, EPS, TAU, TAU_GATE)
        assert float(d_tp.min()) >= 0.0 and float(d_tp.sum()) > 0.5
