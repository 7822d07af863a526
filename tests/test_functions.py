"""The one function table: every name a generated kernel calls exists in every namespace
that executes kernels, and every function and named metric verifies (issue 24 point 3)."""

from __future__ import annotations

import ast
import math

import numpy as np
import pytest
import sympy
import torch

import metricc
import metricc.runtime.matrix as runtime_matrix
from metricc.language.functions import FUNCTIONS, KERNEL_METHODS, TORCH_CALLS, sympy_torch
from metricc.language.symbols import EPS
from metricc.library import MATRIX_METRICS, METRICS
from metricc.runtime.symbolic import HOST_MATH
from metricc.verify.matrix import kernel_namespace, run_kernel_symbolically
from metricc.verify.proofs import vectorized_torch

#: One 2x2 formula per function of the language (every function in one kernel each).
COUNT_FORMULAS = {
    "sqrt": "sqrt(TP/(TP+FP))", "log": "log(TP+1)/log(n+2)", "exp": "exp(-FP/(TP+1))",
    "abs": "abs(TP/(TP+FN) - TN/(TN+FP))", "min": "min(TP/(TP+FP), TP/(TP+FN), 0.9)",
    "max": "max(TP/(TP+FP), TP/(TP+FN), 0.1)",
}
#: One K x K formula per function, the helpers included.
MATRIX_FORMULAS = {
    "sqrt": "sqrt(sum(i, C[i,i]) / n)", "log": "log(sum(i, C[i,i]) + 1) / log(n + 2)",
    "exp": "exp(-sum(i, j, C[i,j] * (1 - delta(i, j))) / n)",
    "abs": "abs(sum(i,C[i,i])/n - 0.5)", "min": "min(sum(i, C[i,i]) / n, 0.9)",
    "max": "max(sum(i, C[i,i]) / n, sum(i, C[i,i]) / (n + 1) + 0.05, 0.1)", "sum": "sum(i, C[i,i]) / n",
    "row": "sum(i, C[i,i] / (row(i) + 1))", "col": "sum(j, C[j,j] / (col(j) + 1))",
    "present": "sum(i, present(row(i))*C[i,i])/n",
    "delta": "sum(i, j, delta(i, j) * C[i,j]) / n",
}


def _names(source: str) -> tuple[set[str], set[str], set[str]]:
    """``torch.X`` attributes, ``C.X`` methods and bare helper names a kernel calls."""
    torch_names, methods, helpers = set(), set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            (torch_names if node.value.id == "torch" else methods).add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            helpers.add(node.func.id)
    return torch_names, methods, helpers


def _sources() -> dict[str, str]:
    out = {}
    for name in [*METRICS, *MATRIX_METRICS]:
        out[name] = metricc.compile(name).kernels_source
    for f in [*COUNT_FORMULAS.values(), *MATRIX_FORMULAS.values()]:
        out[f] = metricc.compile(f).kernels_source
    return out


def test_every_function_has_a_formula_here() -> None:
    assert set(COUNT_FORMULAS) == {n for n, f in FUNCTIONS.items() if not f.matrix_only}
    assert set(MATRIX_FORMULAS) == set(FUNCTIONS)


def test_every_kernel_name_exists_in_every_namespace() -> None:
    stand_in, vectorized = sympy_torch(), vectorized_torch()
    matrix_ns = kernel_namespace(3)
    seen_torch: set[str] = set()
    for what, source in _sources().items():
        torch_names, methods, helpers = _names(source)
        seen_torch |= torch_names
        assert torch_names <= set(TORCH_CALLS), (what, torch_names - set(TORCH_CALLS))
        # torch.autograd.grad in a kernel was the abs() bug: a kernel calls functions only
        assert all(callable(getattr(torch, n)) for n in torch_names), what
        assert all(hasattr(stand_in, n) and hasattr(vectorized, n) for n in torch_names), what
        assert methods <= set(KERNEL_METHODS) | {"torch"}, (what, methods)
        assert all(hasattr(torch.Tensor, m) for m in methods - {"torch"}), what
        kernel_helpers = {h for h in helpers if h.startswith("_")}
        assert kernel_helpers <= set(matrix_ns), (what, kernel_helpers - set(matrix_ns))
        assert all(hasattr(runtime_matrix, h) for h in kernel_helpers), what
    # the table's names are the ones kernels actually use (plus the relaxations' sigmoid)
    assert {"sqrt", "log", "exp", "abs", "minimum", "maximum"} <= seen_torch


def test_host_math_is_the_tables_float_twin() -> None:
    twins = {n: c.host for n, c in TORCH_CALLS.items() if c.host is not None}
    assert set(vars(HOST_MATH)) == set(twins)
    points = [0.0, 0.25, 1.0, 2.5, 1e-300, 7e12, math.nan, math.inf]
    for name, fn in twins.items():
        ours = getattr(HOST_MATH, name)
        for x in points:
            if name == "where":
                args: tuple[float, ...] = (x > 1, x, 2.0)
            elif name in ("maximum", "minimum"):
                args = (x, 1.0)
            else:
                args = (x,)
            try:
                want = fn(*args)
            except (ArithmeticError, ValueError) as e:
                with pytest.raises(type(e)):
                    ours(*args)
                continue
            got = ours(*args)
            assert got == want or (math.isnan(got) and math.isnan(want)), (name, x)
    assert HOST_MATH.clamp(5.0, min=0.0, max=1.0) == twins["clamp"](5.0, min=0.0, max=1.0) == 1.0


def test_sympy_stand_ins_compute_what_the_torch_names_mean() -> None:
    x = torch.tensor([0.3, 2.0], dtype=torch.float64)
    for name in ("sqrt", "rsqrt", "log", "exp", "abs", "sign", "sigmoid"):
        want = getattr(torch, name)(x)
        got = [float(TORCH_CALLS[name].sympy(sympy.Rational(str(float(v))))) for v in x]
        assert got == pytest.approx(want.tolist(), rel=1e-12), name
    vec = vectorized_torch().minimum(np.array([sympy.Integer(1), sympy.Integer(5)], dtype=object),
                                     sympy.Integer(3))
    assert list(vec) == [1, 3]


def test_kernel_runs_on_symbols_with_c_new_zeros() -> None:
    # the K x K writer patches C.new_zeros(()) into the text; the stand-in must have it
    m = metricc.compile("min(sum(i, C[i,i]) / n, 0.9)")
    assert "C.new_zeros(())" in m.kernels_source
    sym = [[sympy.Symbol(f"C_{i}_{j}", nonnegative=True) for j in range(2)] for i in range(2)]
    value, grad = run_kernel_symbolically(m.kernels_source, 2, sym, [])
    pt = {sym[0][0]: 3, sym[0][1]: 1, sym[1][0]: 0, sym[1][1]: 4}
    assert float(value.xreplace(pt).subs(EPS, 0)) == pytest.approx(7 / 8)
    # below the 0.9 cap: d/dC[0,0] of trace/n = (n - trace)/n^2 = 1/64
    assert float(grad[0][0].xreplace(pt).subs(EPS, 0)) == pytest.approx(1 / 64)


REGRESSIONS = [
    ("min(sum(i, C[i,i]) / n, 0.9)", {}),  # AttributeError: new_zeros
    ("min(multiclass_mcc, quadratic_kappa)", {}),
    ("multiclass_balanced_accuracy", {}),  # NameError: Present
    ("sum(i, present(row(i))*C[i,i])/n", {}),
    ("abs(sum(i,C[i,i])/n - 0.5)", {}),  # 'SimpleNamespace' has no attribute 'imag'
    ("1 - n * sum(i, j, W[i,j] * C[i,j]) / sum(i, j, W[i,j] * row(i) * col(j))",
     {"W": "sqrt(i+j+1)^3*log(i+2)^2/(exp(j/(K+1))+1)"}),  # log() of an int
]


@pytest.mark.parametrize(("formula", "params"), REGRESSIONS)
def test_issue_24_regressions_verify(formula: str, params: dict[str, str]) -> None:
    report = metricc.compile(formula, **params).verify()
    assert report.ok
    assert any(c.name.startswith("K=2: generated gradient") for c in report.checks)
    assert sum("finite differences" in c.name for c in report.checks) == 4


def test_abs_gradient_is_sign_not_re_im() -> None:
    source = metricc.compile("abs(sum(i,C[i,i])/n - 0.5)").kernels_source
    assert "torch.sign" in source and "imag" not in source and "autograd" not in source


@pytest.mark.parametrize("name", sorted({m.formula: n for n, m in MATRIX_METRICS.items()}.values()))
def test_every_named_matrix_metric_verifies(name: str) -> None:
    report = metricc.compile(name).verify()
    assert report.ok and len(report.checks) >= 8


@pytest.mark.parametrize("function", sorted(COUNT_FORMULAS))
def test_every_function_verifies_on_counts(function: str) -> None:
    report = metricc.compile(COUNT_FORMULAS[function]).verify()
    assert report.ok and any(c.name == "generated g1 == d/dTP - d/dFN" for c in report.checks)


@pytest.mark.parametrize("function", sorted(MATRIX_FORMULAS))
def test_every_function_verifies_on_the_matrix(function: str) -> None:
    report = metricc.compile(MATRIX_FORMULAS[function]).verify(sizes=(2,))
    assert report.ok and any(c.name.startswith("K=2: generated matrix_value") for c in report.checks)
