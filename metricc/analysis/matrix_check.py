"""``check()`` of a K x K metric: where it is undefined, which way it trains, its range.

Takes data (the index-form expression and the generated gradient kernel), not the
facade; :meth:`metricc.matrix_metric.MatrixMetric.check` calls :func:`check`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from ..language.matrix import display
from ..language.symbols import C
from .domain import Domain, candidates, describe, negative_at, sample_points
from .matrix import entry_symbols, expand, is_nonnegative, positive_fallback

__all__ = ["MatrixCheckReport", "MatrixSingularity", "check", "matrix_domain", "matrix_domain_problem",
           "singularities"]


def matrix_domain(k: int) -> Domain:
    """What the domain check is told of a ``k x k`` matrix: ``k^2`` entries ``>= 0``, sampled
    log-uniformly after two plain matrices (all ones; 2 on the diagonal, 1 off it)."""
    entries = [s for row in entry_symbols(k) for s in row]
    simple = (tuple(1.0 for _ in entries), tuple(2.0 if i == j else 1.0 for i in range(k) for j in range(k)))
    names = tuple(f"C[{i},{j}]" for i in range(k) for j in range(k))
    return Domain(tuple(entries), simple + sample_points(k * k, seed=k), names)


def matrix_domain_problem(expr: sympy.Expr, matrices: dict[str, Any] | None = None,
                          sizes: Sequence[int] = (2, 3)) -> str | None:
    """Why a K x K metric is not real for some nonnegative matrix, or ``None``: each piece that
    needs a nonnegative base (:func:`metricc.analysis.domain.candidates`) not nonnegative by
    structure is written out for ``K`` in ``sizes`` and searched for a negative witness.

    >>> import metricc
    >>> print(matrix_domain_problem(metricc.compile("multiclass_mcc").expr))
    None
    """
    for base, is_log in candidates(expr):
        if not base.has(C) or is_nonnegative(base):
            continue
        for k in sizes:
            concrete, _ = expand(base, k, matrices)
            domain = matrix_domain(k)
            point = negative_at(concrete, domain)
            if point is not None:
                rows = [", ".join(f"{point[i * k + j]:g}" for j in range(k)) for i in range(k)]
                return describe(display(base), is_log, "C = [" + "; ".join(rows) + "]")
    return None


@dataclass(frozen=True)
class MatrixSingularity:
    expr: sympy.Expr
    relation: str
    reason: str

    def __str__(self) -> str:
        return f"{display(self.expr)} {self.relation}  ({self.reason})"


def singularities(expr: sympy.Expr) -> list[MatrixSingularity]:
    """Where a K x K metric is undefined (division by 0, log of 0) or not real."""
    out: list[MatrixSingularity] = []
    seen: set[sympy.Expr] = set()
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and node.exp.is_number and node.base.has(C):
            base = node.base
            if base in seen:
                continue
            if node.exp.is_negative:
                seen.add(base)
                if isinstance(base, sympy.Add) and positive_fallback(base) and \
                        len(base.args) == 3:
                    continue  # x + 1 - present(x) never vanishes
                out.append(MatrixSingularity(base, "= 0", "division by zero"))
            elif not node.exp.is_integer and not is_nonnegative(base):
                seen.add(base)
                out.append(MatrixSingularity(base, "< 0", "root of a negative number"))
        elif isinstance(node, sympy.log) and node.args[0].has(C):
            out.append(MatrixSingularity(node.args[0], "= 0", "log of 0"))
    return out


@dataclass(frozen=True)
class MatrixCheckReport:
    """What :meth:`metricc.matrix_metric.MatrixMetric.check` found.

    ``direction`` says how the metric moves when one sample of true class ``a``
    raises its true-class score, moving mass from ``C[a, b]`` to ``C[a, a]``: the
    directional derivative ``G[a, a] - G[a, b]``, evaluated at ``samples`` random
    matrices (K = 2..6, dense and sparse): ``increasing``, ``decreasing``,
    ``constant`` or ``mixed`` (then ``witness`` is a matrix where it has the
    unexpected sign). Sampled, not proved.
    """

    expr: sympy.Expr
    undefined: tuple[MatrixSingularity, ...]
    direction: str
    samples: int
    witness: list[list[float]] | None
    sampled_range: tuple[float, float] | None
    higher_is_better: bool
    #: Every K x K metric of the matrix depends on the predictions (the parser refuses
    #: one that does not); read by the facade's monotonicity warning as for 2x2 reports.
    depends_on_predictions: bool = True

    def wrong_way(self) -> dict[str, str]:
        bad = "decreasing" if self.higher_is_better else "increasing"
        if self.direction != bad:
            return {}
        return {"C[a,a]": f"the metric is {bad} as a sample's true-class score rises, so "
                          "minimising the loss lowers the true-class scores"}

    def __str__(self) -> str:
        lines = [f"metric: {display(self.expr)}"]
        if self.undefined:
            lines.append("undefined where:")
            lines.extend(f"  {s}" for s in self.undefined)
        else:
            lines.append("undefined where: nowhere (for nonnegative matrices)")
        lines.append(
            f"raising a sample's true-class score (mass from C[a,b] to C[a,a]): "
            f"{self.direction} (sampled at {self.samples} matrices, K = 2..6)")
        if self.witness is not None:
            lines.append(f"  e.g. at C = {self.witness}")
        if self.sampled_range is not None:
            lines.append("range: sampled values {:.4g} .. {:.4g}".format(*self.sampled_range))
        direction = "higher is better" if self.higher_is_better else "lower is better"
        lines.append(f"as a loss ({direction}): " + ("TRAINS THE WRONG WAY" if self.wrong_way()
                                                     else "no feasible move trains the wrong way"))
        return "\n".join(lines)


_CHECK_SAMPLES = 240


def check(expr: sympy.Expr, kernel: Callable[..., Any], params: Sequence[Any],
          num_classes: int | None, higher_is_better: bool) -> MatrixCheckReport:
    """Sample ``kernel`` (a loss class's ``matrix_and_gradient``) at random matrices.

    ``params`` are the K x K parameter tensors the kernel takes after ``eps``;
    ``num_classes`` fixes K where they do (else K = 2..6).

    >>> import metricc
    >>> m = metricc.compile("multiclass_mcc")
    >>> check(m.expr, m.loss_class.matrix_and_gradient, [], None, True).direction
    'increasing'
    """
    import torch

    rng = random.Random(20261130)
    pos = neg = 0
    witness: list[list[float]] | None = None
    values: list[float] = []
    sizes = [num_classes] if num_classes else [2, 3, 4, 5, 6]
    for n in range(_CHECK_SAMPLES):
        k = sizes[n % len(sizes)]
        sparse = n % 3 == 0
        m = torch.tensor([[0.0 if sparse and rng.random() < 0.4 else
                           round(10 ** rng.uniform(-1, 2), 3) for _ in range(k)]
                          for _ in range(k)], dtype=torch.float64)
        with torch.no_grad():
            v, g = kernel(m.unsqueeze(0), 0.0, *params)
        if not bool(torch.isfinite(v).all() and torch.isfinite(g).all()):
            continue
        values.append(float(v[0]))
        g = g[0]
        d = g.diagonal().unsqueeze(1) - g  # d[a, b] = G[a, a] - G[a, b]
        off = ~torch.eye(k, dtype=torch.bool) & (m > 0)
        d = d[off]
        if d.numel() == 0:
            continue
        tol = 1e-12 * max(1.0, float(g.abs().max()))
        up, down = bool((d > tol).any()), bool((d < -tol).any())
        pos += up
        neg += down
        unexpected = down if higher_is_better else up
        if unexpected and witness is None:
            witness = m.tolist()
    direction = ("mixed" if pos and neg else "increasing" if pos else
                 "decreasing" if neg else "constant")
    if direction in ("increasing", "decreasing", "constant"):
        witness = None
    return MatrixCheckReport(expr, tuple(singularities(expr)), direction, _CHECK_SAMPLES,
                             witness, (min(values), max(values)) if values else None,
                             higher_is_better)
