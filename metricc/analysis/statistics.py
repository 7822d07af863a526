"""The statistic seam: what a metric is computed from, described once per statistic.

A *statistic* is what the generated kernels take: the 2x2 confusion counts
(``counts``), the whole K x K matrix (``matrix``), the 2x2 counts at every threshold of
the ROC/PR curve (``curve``) or the 2x2 counts of every group (``groups``).
:data:`STATISTICS` registers one :class:`Statistic` per statistic; a parsed formula
names its statistic (``Formula.statistic``) and every stage that differs by
statistic looks the description up here, or keys its own small registry by
:attr:`Statistic.name` (the facades in :mod:`metricc.metric`, the kernel emitters
in :mod:`metricc.emit.kernels`, the standalone docstrings, the CLI's ``grad``).

>>> STATISTICS["matrix"].loss_class
'metricc.runtime.matrix.MatrixLoss'
>>> resolve(STATISTICS["counts"].loss_class).__name__
'MetricLoss'
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sympy

from ..errors import MetricError
from ..language.symbols import COUNTS, DERIVED
from . import counts, curve, groups, matrix

__all__ = ["STATISTICS", "Statistic", "analysis_errors", "as_rational", "check_counts_expr", "refuse_unreal",
           "resolve", "statistic_of", "training_warning"]


@dataclass(frozen=True)
class Statistic:
    """One statistic: the names users write, how its formulas are analysed, what the kernels are.

    ``loss_class`` is the dotted path of the runtime ``torch.nn.Module`` that generated
    loss classes subclass (resolved with :func:`resolve`, so that analysing a formula
    does not import torch); ``kernel_helpers`` are the names of that module the
    generated kernels call besides ``torch``.
    """

    name: str
    #: The names users write in formulas of this statistic.
    symbols: tuple[str, ...]
    #: Whether an expression is >= 0 wherever the statistic's entries are (counts >= 0).
    is_nonnegative: Callable[[sympy.Expr], bool]
    #: The derivatives the backward needs: ``{"TP": ...}`` or ``{"C[a,b]": ...}``.
    differentiate: Callable[[sympy.Expr], Mapping[str, sympy.Expr]]
    #: The zero-division guard of the loss (``eps`` in every singular spot).
    guard: Callable[[sympy.Expr], sympy.Expr]
    kernel_names: tuple[str, str]
    #: The kernels' leading arguments (K x K kernels then take the matrix parameters).
    kernel_args: tuple[str, ...]
    loss_class: str
    kernel_helpers: tuple[str, ...]
    #: What the loss class of a formula without a name is called.
    unnamed_loss: str
    #: Dotted paths, resolved on first use (so that analysing a formula imports no torch):
    #: the statistic's facade (a :class:`metricc.facade.Metric` subclass),
    facade: str
    #: its kernel writer ``(expr, matrix parameter names) -> source``,
    emitter: str
    #: how ``metricc grad`` prints its derivatives ``(metric, latex) -> exit code``,
    grad_printer: str
    #: and the docstring of its standalone file ``(metric, class name, defaults) -> lines``.
    standalone_doc: str
    #: Its own torch-only runtime modules, pasted into standalone files after the shared ones
    #: (each may import the shared runtime and the modules before it).
    runtime_modules: tuple[str, ...] = ()


def _curve_nonnegative(e: sympy.Expr) -> bool:
    # a reduction's sign depends on its local formulas: only plain totals are known >= 0
    return bool(e.xreplace({s: sympy.Symbol(s.name, nonnegative=True) for s in e.free_symbols}
                           ).is_nonnegative) and not e.has(sympy.Function)


def _curve_partials(e: sympy.Expr) -> dict[str, sympy.Expr]:
    """The curve's local forms: ``dh/dr_j`` of the outer expression per reduction ``r_j``
    (each reduction's own partials are in :func:`metricc.analysis.curve.local_form`)."""
    form = curve.outer_form(e)
    return {f"d/d{node}": d for node, d in zip(form.nodes, form.partials, strict=True)}


def _group_partials(e: sympy.Expr) -> dict[str, sympy.Expr]:
    """The group statistic's local forms: ``dh/dr_j`` per reduction, ``dh/dTP ...`` at the overall
    counts (each reduction's own partials are in :func:`metricc.analysis.groups.local_term`)."""
    forms = groups.group_forms((e,))
    out = {f"d/d{node}": d for node, d in zip(forms.nodes, forms.reduction_partials[0], strict=True)}
    out.update({f"d/d{c}": d for c, d in zip(COUNTS, forms.count_partials[0], strict=True)})
    return out


STATISTICS: dict[str, Statistic] = {
    "counts": Statistic(
        name="counts", symbols=(*COUNTS, *DERIVED), is_nonnegative=counts.is_nonnegative,
        differentiate=counts.partials, guard=counts.guard,
        kernel_names=("metric_value", "metric_and_coefficients"),
        kernel_args=("TP", "FP", "FN", "TN", "eps"),
        loss_class="metricc.runtime.loss.MetricLoss", kernel_helpers=(),
        unnamed_loss="CustomMetricLoss", facade="metricc.counts_metric.CountsMetric",
        emitter="metricc.emit.counts.emit_kernels", grad_printer="metricc.cli.counts_grad",
        standalone_doc="metricc.standalone_file.counts_doc"),
    "matrix": Statistic(
        name="matrix", symbols=("C", "K", "n", "row", "col", "sum", "present"),
        is_nonnegative=matrix.is_nonnegative,
        differentiate=lambda e: {"C[a,b]": matrix.gradient(e)}, guard=matrix.guard_matrix,
        kernel_names=("matrix_value", "matrix_and_gradient"), kernel_args=("C", "eps"),
        loss_class="metricc.runtime.matrix.MatrixLoss",
        kernel_helpers=("mx_size", "mx_index", "mx_entry", "mx_sum", "mx_delta", "mx_present",
                        "mx_rows", "mx_matrices"),
        unnamed_loss="CustomMatrixMetricLoss", facade="metricc.matrix_metric.MatrixMetric",
        emitter="metricc.emit.matrix.emit_matrix_kernels", grad_printer="metricc.cli.matrix_grad",
        standalone_doc="metricc.standalone_file.matrix_doc",
        runtime_modules=("metricc.runtime.matrix",)),
    "curve": Statistic(
        name="curve", symbols=("area", "steps", "best", "P", "N", "n"),
        is_nonnegative=_curve_nonnegative, differentiate=_curve_partials,
        guard=lambda e: curve.outer_form(e).value,
        kernel_names=("curve_value", "curve_and_gradient"),
        kernel_args=("TP", "FP", "P", "N", "eps", "tau", "tau_gate"),
        loss_class="metricc.runtime.curve_loss.CurveLoss", kernel_helpers=(),
        unnamed_loss="CustomCurveMetricLoss", facade="metricc.curve_metric.CurveMetric",
        emitter="metricc.emit.curve.emit_curve_kernels", grad_printer="metricc.cli.curve_grad",
        standalone_doc="metricc.standalone_file.curve_doc",
        runtime_modules=("metricc.runtime.curve_histogram", "metricc.runtime.curve",
                         "metricc.runtime.curve_loss")),
    "groups": Statistic(
        name="groups", symbols=("gap", "ratio", "worst", "groupmax", "groupmean", "vsrest", *COUNTS),
        is_nonnegative=_curve_nonnegative, differentiate=_group_partials,
        guard=lambda e: groups.group_forms((e,)).values[0],
        kernel_names=("group_value", "group_and_gradient"),
        kernel_args=("TP", "FP", "FN", "TN", "eps", "tau"),
        loss_class="metricc.runtime.groups.GroupLoss", kernel_helpers=("grp_reduce",),
        unnamed_loss="CustomGroupMetricLoss", facade="metricc.groups_metric.GroupMetric",
        emitter="metricc.emit.groups.emit_group_kernels", grad_printer="metricc.cli.groups_grad",
        standalone_doc="metricc.standalone_file.groups_doc",
        runtime_modules=("metricc.runtime.group_counts", "metricc.runtime.groups")),
}


def statistic_of(parsed: Any) -> Statistic:
    """The :class:`Statistic` a parsed formula (``Formula``, ``MatrixFormula``) is over."""
    try:
        return STATISTICS[parsed.statistic]
    except (AttributeError, KeyError):
        raise MetricError(f"internal: {type(parsed).__name__} names no registered statistic "
                          f"(known: {', '.join(STATISTICS)})") from None


def resolve(path: str) -> Any:
    """The object a dotted path ``package.module.Name`` names (imported on first use)."""
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def as_rational(name: str, value: Any) -> sympy.Expr:
    """A scalar parameter's value as an exact SymPy number (both statistics substitute them).

    >>> as_rational("beta", 0.3)
    3/10
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MetricError(f"parameter {name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise MetricError(f"parameter {name} must be finite, got {value!r}")
    # str() keeps what the user typed: 0.3 becomes 3/10, not 5404319552844595/18014398509481984.
    return sympy.Rational(str(value)) if isinstance(value, float) else sympy.Integer(value)


def check_counts_expr(expr: sympy.Expr, text: str) -> None:
    """Refuse a 2x2 formula no loss can be built from (constant, complex, never real)."""
    if expr.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise MetricError(f"formula {text.strip()!r} divides by zero for every input")
    if not expr.free_symbols & set(COUNTS.values()):
        raise MetricError(
            f"formula {text.strip()!r} depends on no count; a metric must use at "
            "least one of TP, FP, FN, TN (or P, N, PP, PN, n)"
        )
    if expr.has(sympy.I) or any(a.is_number and a.is_extended_real is False
                                for a in sympy.preorder_traversal(expr)):
        raise MetricError(f"formula {text.strip()!r} is complex-valued")
    from .domain import domain_problem

    refuse_unreal(text, domain_problem(expr), "counts")


def refuse_unreal(text: str, problem: str | None, over: str) -> None:
    """Refuse a formula of any statistic that the domain check found not real somewhere
    (``problem``, from :mod:`metricc.analysis.domain`) for all ``over`` (counts, matrices, curves):
    the loss would be NaN, with NaN gradients, wherever a batch lands there."""
    if problem is not None:
        raise MetricError(f"formula {text.strip()!r} is not real for all {over}: {problem}")


@contextmanager
def analysis_errors(text: str) -> Iterator[None]:
    """SymPy can fail deep inside on exotic input; the user gets a metricc error."""
    try:
        yield
    except RecursionError:
        raise MetricError("formula nests too deeply to analyse; split it with let-bindings") from None
    except MetricError:
        raise
    except (ArithmeticError, TypeError, ValueError, AttributeError, NotImplementedError) as e:
        raise MetricError(f"could not analyse formula {text.strip()!r}: {e}") from None


def training_warning(report: Any, label: str, higher_is_better: bool) -> str | None:
    """Why a loss built from a metric with this check ``report`` would not train, or ``None``.

    ``report`` is any statistic's check report: ``depends_on_predictions`` and
    ``wrong_way()`` (``{move: why}``) are what every report provides.
    """
    if not report.depends_on_predictions:
        return (f"the loss for {label!r} does not depend on the predictions: raising a "
                "positive's score (FN -> TP) or a negative's (TN -> FP) leaves the metric "
                "unchanged, so its gradient is zero everywhere and it cannot train (it depends "
                "only on P and N, which the labels fix). Check the formula; silence this with "
                "loss(..., warn_monotonicity=False).")
    wrong = report.wrong_way()
    if not wrong:
        return None
    fix = ("compile it with higher_is_better=False (metricc CLI: --lower-is-better) if "
           "lower values are better" if higher_is_better else
           "compile it with higher_is_better=True (metricc CLI: --higher-is-better) if "
           "higher values are better")
    return (f"the loss for {label!r} would train the wrong way: " + "; ".join(wrong.values())
            + f". Check the formula, or {fix}; silence this with loss(..., "
            "warn_monotonicity=False).")
