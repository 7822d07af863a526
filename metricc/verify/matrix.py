"""``verify()`` for K x K metrics: what the matrix changes in the shared harness.

Symbolic: the generated source of ``matrix_and_gradient`` is executed on a
``K x K`` matrix of SymPy symbols (numpy object arrays stand in for tensors, the
function table's stand-ins for ``torch``, and the broadcasting helpers are
re-implemented on them), for K = 2 and 3; its value and each of the K^2 gradient
entries must equal SymPy's own metric, written out for that K, and its derivative
by each ``C_i_j``. Numeric, in float64 (:mod:`metricc.verify.numeric`): the loss's
gradient (symbolic and autograd backward, each relaxation) equals autograd of an
independent plain implementation (the written-out metric, the soft matrix by explicit
one-hot products) and finite differences.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from ..analysis.budget import PROOF_SECONDS, limit
from ..analysis.matrix import expand, guard_matrix
from ..language.functions import KERNEL_METHODS
from ..language.symbols import EPS, Present
from .numeric import against_reference, reference_lambdify
from .proofs import as_printed, equal_at_points, run_symbolically, vectorized_torch
from .report import Check, VerificationReport, finish

__all__ = ["MatrixSubject", "kernel_namespace", "run_kernel_symbolically",
           "verify_matrix_data"]


@dataclass(frozen=True)
class MatrixSubject:
    """What the K x K checks need: data, not the facade. ``loss(relaxation, **options)``
    builds the loss module; ``matrix_values`` holds each weight parameter's K x K values."""

    expr: sympy.Expr
    kernels_source: str
    matrix_parameters: Sequence[str]
    matrix_values: Mapping[str, Any]
    higher_is_better: bool
    loss: Callable[..., Any]
    num_classes: int | None = None


def _symbolic_matrix(k: int) -> type:
    """A numpy object array class with the tensor methods kernels call on ``C``."""
    import numpy as np

    def method(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda self, *a: fn(*a)

    methods = {n: method(fn) for n, fn in KERNEL_METHODS.items()}
    return type(f"SymbolicMatrix{k}", (np.ndarray,), methods)


def kernel_namespace(k: int) -> dict[str, Any]:
    """``torch`` and the kernel helpers of :mod:`metricc.runtime.matrix`, acting on numpy
    object arrays of SymPy expressions, for ``k`` classes."""
    import numpy as np

    def index(C: Any, dims: int, axis: int) -> Any:
        shape = [1] * dims
        shape[axis] = k
        return np.array([sympy.Integer(i) for i in range(k)], dtype=object).reshape(shape)

    def entry(M: Any, dims: int, row_axis: int, col_axis: int) -> Any:
        M = np.asarray(M, dtype=object)
        if M.ndim == 2:
            M = M[None]
        shape = [1] * dims
        shape[0] = M.shape[0]
        if row_axis == col_axis:
            shape[row_axis] = k
            return np.diagonal(M, axis1=-2, axis2=-1).reshape(shape)
        if row_axis > col_axis:
            M, row_axis, col_axis = np.swapaxes(M, -1, -2), col_axis, row_axis
        shape[row_axis] = shape[col_axis] = k
        return M.reshape(shape)

    def sum_(x: Any, dims: tuple[int, ...], K: Any) -> Any:
        for d in dims:
            if isinstance(x, np.ndarray) and x.ndim > d and x.shape[d] != 1:
                x = x.sum(axis=d, keepdims=True)
            else:
                x = x * K
        return x

    def delta(i: Any, j: Any) -> Any:
        return np.vectorize(lambda a, b: sympy.Integer(int(a == b)), otypes=[object])(i, j)

    def as_rows(x: Any, C: Any, dims: int) -> Any:
        return (np.zeros((C.shape[0],) + (1,) * (dims - 1), dtype=object) + x).reshape(-1)

    def as_matrices(x: Any, C: Any, dims: int) -> Any:
        r = C.shape[0]
        return (np.zeros((r, k, k) + (1,) * (dims - 3), dtype=object) + x).reshape(r, k, k)

    present = np.vectorize(Present, otypes=[object])
    return {
        "torch": vectorized_torch(), "mx_size": lambda C: sympy.Integer(k), "mx_index": index,
        "mx_entry": entry, "mx_sum": sum_, "mx_delta": delta,
        "mx_present": lambda x: present(x) if isinstance(x, np.ndarray) else Present(x),
        "mx_rows": as_rows, "mx_matrices": as_matrices,
    }


def run_kernel_symbolically(source: str, k: int, entries: list[list[sympy.Symbol]],
                            params: list[Any]) -> tuple[sympy.Expr, list[list[sympy.Expr]]]:
    """``matrix_and_gradient`` of ``source`` on a symbolic ``k x k`` matrix."""
    import numpy as np

    m = np.array([entries], dtype=object)  # (1, k, k): a batch of one
    p = [np.array([[sympy.nsimplify(v) for v in row] for row in P], dtype=object)
         for P in params]
    value, grad = run_symbolically(source, "matrix_and_gradient", m.view(_symbolic_matrix(k)), EPS,
                                   *p, namespace=kernel_namespace(k))
    return value[0], [[grad[0, i, j] for j in range(k)] for i in range(k)]


def _symbolic_checks(metric: MatrixSubject, report: VerificationReport, seed: int,
                     sizes: tuple[int, ...]) -> None:
    guarded = guard_matrix(metric.expr, EPS)
    for k in sizes:
        if metric.num_classes is not None and k != metric.num_classes:
            continue
        f, sym = expand(guarded, k, dict(metric.matrix_values))
        f = as_printed(f)  # constants past 2**53 are float64 literals in the kernel
        params = [metric.matrix_values[p] for p in metric.matrix_parameters]
        value, grad = run_kernel_symbolically(metric.kernels_source, k, sym, params)
        prove = k == 2
        ok, how, cex = equal_at_points(value, f, seed, prove)
        report.checks.append(Check(f"K={k}: generated matrix_value == guarded metric", ok, how,
                                   cex))
        fails = []
        hows = set()
        for i, j in itertools.product(range(k), range(k)):
            ok, how, cex = equal_at_points(grad[i][j], sympy.diff(f, sym[i][j]), seed, prove)
            hows.add(how)
            if not ok:
                fails.append((i, j, cex))
        report.checks.append(Check(
            f"K={k}: generated gradient == d metric / d C[i,j] for all {k * k} entries",
            not fails, "; ".join(sorted(hows)) if not fails else f"differs at C[{fails[0][0]},"
            f"{fails[0][1]}]", fails[0][2] if fails else None))


def _reference_loss(metric: MatrixSubject, k: int, relaxation: str, temperature: float,
                    eps: float) -> Any:
    """An independent float64 implementation: written-out metric, explicit soft matrix."""
    import torch

    f, sym = expand(guard_matrix(metric.expr, EPS).xreplace({EPS: sympy.Float(eps)}), k,
                    dict(metric.matrix_values))
    fn = reference_lambdify(list(itertools.chain.from_iterable(sym)), f)

    def loss(x: Any, y: Any) -> Any:
        z = x / temperature if relaxation == "softmax" else x
        e = torch.exp(z - z.max(1, keepdim=True).values)
        q = e / e.sum(1, keepdim=True)
        onehot = torch.stack([(y == i).to(q.dtype) for i in range(k)], 1)
        entries = [(onehot[:, i] * q[:, j]).sum() for i in range(k) for j in range(k)]
        value = torch.as_tensor(fn(*entries), dtype=torch.float64)
        return 1 - value if metric.higher_is_better else value

    return loss


def _numeric_checks(metric: MatrixSubject, report: VerificationReport, seed: int,
                    size: int, k: int) -> None:
    import torch

    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, k, (size,), generator=gen)
    y[:k] = torch.arange(k)
    x0 = torch.randn(size, k, generator=gen, dtype=torch.float64)
    eps, temperature = 1e-7, 0.5
    for relaxation in ("linear", "softmax"):
        against_reference(
            report, f"{relaxation}/{{backward}}",
            lambda b, rel=relaxation: metric.loss(  # temperature: softmax's own option
                rel, backward=b, from_logits=True, eps=eps, warn_monotonicity=False,
                **({"temperature": temperature} if rel == "softmax" else {})),
            x0, y, _reference_loss(metric, k, relaxation, temperature, eps),
            f"float64, N={size}, K={k}")


def verify_matrix_data(metric: MatrixSubject, *, seed: int = 0, size: int = 24,
                       sizes: tuple[int, ...] = (2, 3), numeric: bool = True,
                       raise_on_failure: bool = True) -> VerificationReport:
    """Run every check on a K x K metric given as data."""
    report = VerificationReport()
    with limit(2 * PROOF_SECONDS):  # proofs past it are skipped; the checks still run (as 2 x 2)
        _symbolic_checks(metric, report, seed, sizes)
    if numeric:
        _numeric_checks(metric, report, seed, size, metric.num_classes or 4)
    return finish(report, raise_on_failure)
