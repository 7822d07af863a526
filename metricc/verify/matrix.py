"""``verify()`` for K x K metrics: the generated kernels proved for small K, the loss checked.

Symbolic: the generated source of ``matrix_and_gradient`` is executed on a
``K x K`` matrix of SymPy symbols (numpy object arrays stand in for tensors, and
the broadcasting helpers are re-implemented on them), for K = 2 and 3; its value
and each of the K^2 gradient entries must equal SymPy's own metric, written out
for that K, and its derivative by each ``C_i_j``. Numeric, in float64: the
loss's gradient (symbolic and autograd backward, each relaxation) equals autograd
of an independent plain implementation (the written-out metric, the soft matrix
by explicit one-hot products) and finite differences (``gradcheck``).
"""

from __future__ import annotations

import ast
import itertools
from typing import Any

import sympy

from ..analysis.matrix import expand, guard_matrix
from ..errors import VerificationError
from ..language.symbols import EPS
from .counts import Check, VerificationReport, _against_reference, _ExactNumbers, symbolic_equal

#: A :class:`metricc.matrix_metric.MatrixMetric` (not imported: it imports this module).
MatrixMetric = Any

__all__ = ["verify_matrix"]


def _object_namespace(k: int) -> dict[str, Any]:
    """``torch`` and the kernel helpers, acting on numpy object arrays of SymPy expressions."""
    import types

    import numpy as np

    def vec(fn: Any) -> Any:
        return lambda x: np.vectorize(fn, otypes=[object])(x) if isinstance(x, np.ndarray) \
            else fn(x)

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

    def present(x: Any) -> Any:
        from ..language.symbols import Present

        return vec(Present)(x)

    def as_rows(x: Any, C: Any, dims: int) -> Any:
        return (np.zeros((C.shape[0],) + (1,) * (dims - 1), dtype=object) + x).reshape(-1)

    def as_matrices(x: Any, C: Any, dims: int) -> Any:
        r = C.shape[0]
        return (np.zeros((r, k, k) + (1,) * (dims - 3), dtype=object) + x).reshape(r, k, k)

    torch_ns = types.SimpleNamespace(
        sqrt=vec(sympy.sqrt), rsqrt=vec(lambda x: 1 / sympy.sqrt(x)), log=vec(sympy.log),
        exp=vec(sympy.exp), abs=vec(sympy.Abs), sign=vec(sympy.sign),
        maximum=np.vectorize(sympy.Max, otypes=[object]),
        minimum=np.vectorize(sympy.Min, otypes=[object]),
        clamp=lambda x, min=None, max=None: vec(
            lambda v: sympy.Min(sympy.Max(v, sympy.nsimplify(min)) if min is not None else v,
                                sympy.nsimplify(max)) if max is not None else
            sympy.Max(v, sympy.nsimplify(min)))(x),
    )
    return {
        "torch": torch_ns, "mx_size": lambda C: sympy.Integer(k), "mx_index": index,
        "mx_entry": entry, "mx_sum": sum_, "mx_delta": delta, "mx_present": present,
        "mx_rows": as_rows, "mx_matrices": as_matrices,
        "_sympy_Integer": sympy.Integer, "_sympy_Float": sympy.Float,
    }


def run_kernel_symbolically(source: str, k: int, entries: list[list[sympy.Symbol]],
                            params: list[Any]) -> tuple[sympy.Expr, list[list[sympy.Expr]]]:
    """``matrix_and_gradient`` of ``source`` on a symbolic ``k x k`` matrix."""
    import numpy as np

    tree = ast.fix_missing_locations(_ExactNumbers().visit(ast.parse(source)))
    namespace = _object_namespace(k)
    # Our own generated source (validated SymPy trees only), run on SymPy objects.
    exec(compile(tree, "<metricc verify matrix>", "exec"), namespace)
    m = np.empty((1, k, k), dtype=object)
    for i, j in itertools.product(range(k), range(k)):
        m[0, i, j] = entries[i][j]
    p = [np.array([[sympy.nsimplify(v) for v in row] for row in P], dtype=object)
         for P in params]
    value, grad = namespace["matrix_and_gradient"](m, EPS, *p)
    return value[0], [[grad[0, i, j] for j in range(k)] for i in range(k)]


def _equal(a: sympy.Expr, b: sympy.Expr, seed: int, prove: bool
           ) -> tuple[bool, str, dict[str, float] | None]:
    """``a == b`` for nonnegative entries: exact random points, then (``prove``) ``cancel``.

    The written-out K = 3 metrics (and the larger K = 2 ones) are rational functions
    whose ``cancel`` takes minutes, so those are compared at exact random points
    only; for a rational function a nonzero difference vanishing at 8 random
    rational points is itself a coincidence of probability ~0.
    """
    if prove and sympy.count_ops(a) + sympy.count_ops(b) <= 400:
        return symbolic_equal(a, b, seed)
    import random

    diff = a - b
    symbols = sorted(a.free_symbols | b.free_symbols, key=lambda s: s.name)
    rng = random.Random(seed)
    points = 8
    for _ in range(points):
        pt = {s: sympy.Rational(rng.randint(1, 60), rng.randint(1, 7)) for s in symbols}
        val = sympy.N(diff.xreplace(pt), 30)
        ref = sympy.N(a.xreplace(pt), 30)
        if val.has(sympy.nan, sympy.zoo) or val.is_finite is False:
            continue
        if abs(complex(val)) > 1e-20 * (1 + abs(complex(ref))):
            return False, "differs", {s.name: float(v) for s, v in pt.items()}
    return True, f"equal at {points} random exact points", None


def _symbolic_checks(metric: MatrixMetric, report: VerificationReport, seed: int,
                     sizes: tuple[int, ...]) -> None:
    guarded = guard_matrix(metric.expr, EPS)
    for k in sizes:
        if metric.num_classes is not None and k != metric.num_classes:
            continue
        f, sym = expand(guarded, k, metric.matrix_values)
        params = [metric.matrix_values[p] for p in metric.matrix_parameters]
        value, grad = run_kernel_symbolically(metric.kernels_source, k, sym, params)
        prove = k == 2
        ok, how, cex = _equal(value, f, seed, prove)
        report.checks.append(Check(f"K={k}: generated matrix_value == guarded metric", ok, how,
                                   cex))
        fails = []
        hows = set()
        for i, j in itertools.product(range(k), range(k)):
            ok, how, cex = _equal(grad[i][j], sympy.diff(f, sym[i][j]), seed, prove)
            hows.add(how)
            if not ok:
                fails.append((i, j, cex))
        report.checks.append(Check(
            f"K={k}: generated gradient == d metric / d C[i,j] for all {k * k} entries",
            not fails, "; ".join(sorted(hows)) if not fails else f"differs at C[{fails[0][0]},"
            f"{fails[0][1]}]", fails[0][2] if fails else None))


def _reference_loss(metric: MatrixMetric, k: int, relaxation: str, temperature: float,
                    eps: float) -> Any:
    """An independent float64 implementation: written-out metric, explicit soft matrix."""
    import torch

    f, sym = expand(guard_matrix(metric.expr, EPS).xreplace({EPS: sympy.Float(eps)}), k,
                    metric.matrix_values)
    flat = list(itertools.chain.from_iterable(sym))
    fn = sympy.lambdify(flat, f, modules=[{"sqrt": torch.sqrt, "log": torch.log,
                                           "exp": torch.exp, "Abs": torch.abs,
                                           "Present": lambda v: (v > 0).to(v.dtype)}, "math"])

    def loss(x: Any, y: Any) -> Any:
        z = x / temperature if relaxation == "softmax" else x
        e = torch.exp(z - z.max(1, keepdim=True).values)
        q = e / e.sum(1, keepdim=True)
        onehot = torch.stack([(y == i).to(q.dtype) for i in range(k)], 1)
        entries = [(onehot[:, i] * q[:, j]).sum() for i in range(k) for j in range(k)]
        value = torch.as_tensor(fn(*entries), dtype=torch.float64)
        return 1 - value if metric.higher_is_better else value

    return loss


def _numeric_checks(metric: MatrixMetric, report: VerificationReport, seed: int,
                    size: int, k: int) -> None:
    import torch

    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, k, (size,), generator=gen)
    y[:k] = torch.arange(k)
    x0 = torch.randn(size, k, generator=gen, dtype=torch.float64)
    eps, temperature = 1e-7, 0.5
    for relaxation in ("linear", "softmax"):
        _against_reference(
            report, f"{relaxation}/{{backward}}",
            lambda b, rel=relaxation: metric.loss(rel, backward=b, from_logits=True, eps=eps,
                                                  temperature=temperature),
            x0, y, _reference_loss(metric, k, relaxation, temperature, eps),
            f"float64, N={size}, K={k}")


def verify_matrix(metric: MatrixMetric, *, seed: int = 0, size: int = 24,
                  sizes: tuple[int, ...] = (2, 3), numeric: bool = True,
                  raise_on_failure: bool = True, **unused: Any) -> VerificationReport:
    """Run every check on a K x K ``metric``; raise :class:`VerificationError` on a failure.

    >>> import metricc
    >>> metricc.compile("multiclass_accuracy").verify().ok
    True
    """
    if unused:
        from ..errors import MetricError

        raise MetricError(f"verify() of a K x K metric takes no {', '.join(unused)}")
    report = VerificationReport()
    _symbolic_checks(metric, report, seed, sizes)
    if numeric:
        _numeric_checks(metric, report, seed, size, metric.num_classes or 4)
    if raise_on_failure and not report.ok:
        err = VerificationError(str(report))
        err.report = report  # type: ignore[attr-defined]
        raise err
    return report
