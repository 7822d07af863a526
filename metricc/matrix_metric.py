"""``metricc.compile`` for K x K formulas: :class:`MatrixMetric`, the facade's K x K subclass.

What the K x K statistic changes in :class:`metricc.Metric`: K x K parameters (numbers or
formulas in ``i, j``), the index-form expression and its gradient ``d f / d C[a, b]``,
exact values of matrices and hard-label scores (:mod:`metricc.evaluate.matrix`), the
check report (:mod:`metricc.analysis.matrix_check`) and verification (``docs/matrix.md``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import sympy
from sympy import Indexed, Sum

from .analysis.matrix import gradient
from .analysis.matrix_check import MatrixCheckReport, MatrixSingularity, check, matrix_domain_problem, singularities
from .analysis.statistics import STATISTICS, Statistic, analysis_errors, as_rational, refuse_unreal
from .counts_scoring import stateful_module
from .errors import MetricError
from .facade import Metric, refusals
from .keywords import TORCHMETRICS_OPTIONS, check_passed_on, checked_keywords
from .language.matrix import MatrixFormula, display
from .language.parse import parse
from .language.symbols import A, B, C
from .runtime.options import class_count

if TYPE_CHECKING:
    from .evaluate.stateful import MatrixStatefulMetric
    from .runtime.matrix import MatrixLoss
    from .verify.counts import VerificationReport

__all__ = ["MatrixCheckReport", "MatrixMetric", "MatrixSingularity", "matrix_parameter",
           "parse_index_formula"]


def parse_index_formula(text: str) -> sympy.Expr:
    """A ``K x K`` parameter given as a formula in ``i`` and ``j`` (``"(i-j)^2"``).

    Returns index form over the indices :data:`A` (row) and :data:`B` (column).

    >>> parse_index_formula("(i-j)^2")
    (a - b)**2
    """
    wrapped = parse(f"sum(i, j, C[i, j] * ({text}))")
    if not isinstance(wrapped, MatrixFormula) or wrapped.matrix_parameters \
            or wrapped.parameters:
        raise MetricError(f"a matrix given as a formula may use only i, j, K and numbers, got "
                          f"{text!r}")
    s = wrapped.expr
    if not isinstance(s, Sum) or len(s.limits) != 2:  # pragma: no cover
        raise MetricError(f"could not read the matrix formula {text!r}")
    (i, _, _), (j, _, _) = s.limits
    body = s.function.xreplace({i: A, j: B})
    out = sympy.simplify(body / C[A, B])
    if out.has(C):
        raise MetricError(f"a matrix formula in i, j cannot use the confusion matrix: {text!r}")
    return out


def matrix_parameter(name: str, value: Any) -> sympy.Expr | tuple[tuple[float, ...], ...]:
    """A ``K x K`` parameter: a formula in ``i, j`` (index form over ``a, b``) or numbers."""
    if isinstance(value, sympy.Expr):
        return value
    if isinstance(value, str):
        return parse_index_formula(value)
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not value or \
            not all(isinstance(r, (list, tuple)) and len(r) == len(value) for r in value):
        raise MetricError(f"parameter {name} is a K x K matrix: give a square list of lists "
                          f"(or an array) of numbers, or a formula in i and j such as "
                          f"'(i-j)^2'; got {value!r}")
    for v in itertools.chain.from_iterable(value):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise MetricError(f"parameter {name} must hold finite numbers, got {v!r}")
    if len(value) < 2:
        raise MetricError(f"parameter {name} must be at least 2 x 2")
    return tuple(tuple(float(v) for v in r) for r in value)


def _matrix_tensor(matrix: Any) -> Any:
    """A confusion matrix for :meth:`MatrixMetric.value` as float64, or a MetricError."""
    import torch

    from .evaluate.counts import input_tensor

    m = input_tensor("the confusion matrix", matrix)
    if m.device.type == "meta":
        raise MetricError("the confusion matrix is a meta tensor, which holds no values; pass "
                          "real counts")
    if m.is_complex() or m.dtype == torch.bool or not (m.is_floating_point() or m.dtype.is_signed
                                                         or m.dtype == torch.uint8):
        raise MetricError(f"a confusion matrix holds real counts, got a tensor of {m.dtype}")
    return m.to(torch.float64)


class MatrixMetric(Metric):
    """A compiled K x K metric: index-form SymPy, its gradient, exact scores and losses.

    >>> import metricc
    >>> m = metricc.compile("multiclass_accuracy")
    >>> m.score([0, 1, 2, 2], [0, 2, 2, 1], num_classes=3)
    0.5
    >>> m.gradient_text
    'delta(a, b)/n - sum(i, C[i, i])/n**2'
    """

    statistic: ClassVar[Statistic] = STATISTICS["matrix"]
    kind: ClassVar[str] = "K x K"
    check_report: ClassVar[type[Any]] = MatrixCheckReport

    def __init__(self, formula: MatrixFormula, params: Mapping[str, Any], name: str | None,
                 higher_is_better: bool, constraints: tuple[Any, ...] = ()) -> None:
        super().__init__(formula, params, name, higher_is_better, constraints)
        expr = formula.expr
        scalars = {sympy.Symbol(k): as_rational(k, params[k]) for k in formula.parameters}
        expr = expr.xreplace(scalars)
        self.matrix_values: dict[str, tuple[tuple[float, ...], ...]] = {}
        subs: dict[sympy.Expr, sympy.Expr] = {}
        for pname in formula.matrix_parameters:
            value = matrix_parameter(pname, params[pname])
            if isinstance(value, sympy.Expr):
                for node in expr.atoms(Indexed):
                    if str(node.base) == pname:
                        i, j = node.indices
                        subs[node] = value.xreplace({A: i, B: j})
            else:
                self.matrix_values[pname] = value
        self._expr: sympy.Expr = expr.xreplace(subs) if subs else expr
        sizes = {len(v) for v in self.matrix_values.values()}
        if len(sizes) > 1:
            raise MetricError(f"the K x K parameters have different sizes: {sorted(sizes)}")
        #: The number of classes, when a parameter matrix fixes it.
        self.num_classes: int | None = sizes.pop() if sizes else None
        with analysis_errors(self.text):
            refuse_unreal(self.text, matrix_domain_problem(
                self._expr, self.matrix_values, (self.num_classes,) if self.num_classes else (2, 3)),
                "confusion matrices")
        self._gradient: sympy.Expr | None = None

    not_applicable: ClassVar[Mapping[str, str]] = refusals(
        threshold="best_threshold and BestFeasible apply to binary decisions; a K x K metric "
                  "scores the argmax over classes",
        constraints="constraints apply to 2 x 2 metrics; a K x K metric is one number of the "
                    "whole matrix",
        verify_subject="verify() builds the K x K subject itself (verify.matrix.MatrixSubject)")

    # --- symbolic --------------------------------------------------------------------------
    @property
    def expr(self) -> sympy.Expr:
        """The metric in index form over :data:`C` and ``K`` (``expr_text`` reads it)."""
        return self._expr

    @property
    def matrix_parameters(self) -> tuple[str, ...]:
        """Names of the K x K parameters given as numbers (kernel arguments after ``eps``)."""
        return tuple(sorted(self.matrix_values))

    @property
    def expr_text(self) -> str:
        """The metric in the formula language."""
        return display(self.expr)

    @property
    def gradient_expr(self) -> sympy.Expr:
        """``d metric / d C[a, b]`` in index form (symbolic in K)."""
        if self._gradient is None:
            self._gradient = gradient(self.expr)
        return self._gradient

    @property
    def gradient_text(self) -> str:
        return display(self.gradient_expr)

    @property
    def gradient(self) -> dict[str, sympy.Expr]:
        """``{"C[a,b]": d metric / d C[a, b]}``."""
        return {"C[a,b]": self.gradient_expr}

    @property
    def undefined(self) -> list[sympy.Expr]:
        """Expressions whose vanishing leaves the metric undefined."""
        return [s.expr for s in singularities(self.expr) if s.relation == "= 0"]

    def loss_attributes(self) -> dict[str, Any]:
        return {"matrix_parameters": self.matrix_parameters,
                "matrix_values": tuple(self.matrix_values[k] for k in self.matrix_parameters),
                "__doc__": f"Loss for the K x K metric {self.text.strip()!r}."}

    #: Options of the other statistics' ``score``/``metric`` that a K x K metric has no use for.
    _NOT_MATRIX_SCORE_OPTIONS: ClassVar[Mapping[str, str]] = {
        "average": "a K x K metric is one number of the whole matrix: no classes to average",
        "threshold": "a K x K metric scores the argmax over classes, not a threshold",
    }

    def _refuse_options(self, **given: Any) -> None:
        for key, value in given.items():
            if value is not None:
                raise MetricError(f"{key}={value!r} does not apply to a K x K metric: "
                                  f"{self._NOT_MATRIX_SCORE_OPTIONS[key]}")

    def _option_hint(self, key: str) -> str:
        if key in ("mode", "average", "classes", "class_weights"):
            return (" (a K x K metric is one metric of the whole matrix: no classes to pick or "
                    "average)")
        return ""

    def _params(self) -> list[Any]:
        import torch

        return [torch.tensor(self.matrix_values[p], dtype=torch.float64)
                for p in self.matrix_parameters]

    # --- numeric ---------------------------------------------------------------------------
    @checked_keywords()
    def value(self, matrix: Any, *, zero_division: float | None = None) -> Any:
        """The exact metric of a ``(K, K)`` confusion matrix (rows true, columns predicted),
        or of each in an ``(R, K, K)`` batch (a float64 tensor then).

        >>> import metricc
        >>> metricc.compile("quadratic_kappa").value([[5, 1], [2, 4]])
        0.5
        """
        import torch

        m = _matrix_tensor(matrix)
        single = m.dim() == 2
        if single:
            m = m.unsqueeze(0)
        if m.dim() != 3 or m.shape[-1] != m.shape[-2] or m.shape[-1] < 2:
            raise MetricError(f"a confusion matrix must be K x K with K >= 2, got shape "
                              f"{tuple(m.shape) if not single else tuple(m.shape[1:])}")
        if not bool(torch.isfinite(m).all()) or bool((m < 0).any()):
            raise MetricError("a confusion matrix holds finite counts >= 0")
        k = m.shape[-1]
        if self.num_classes is not None and k != self.num_classes:
            raise MetricError(f"this metric's K x K parameters are {self.num_classes} x "
                              f"{self.num_classes}, but the matrix has {k} classes")
        out = self.loss_class.matrix_value(m, 0.0, *self._params())
        bad = ~torch.isfinite(out)
        if bool(bad.any()):
            if zero_division is None:
                where = " or ".join(f"{display(d)} = 0" for d in self.undefined) or \
                    "this matrix"
                raise MetricError(f"the metric is undefined here ({where}); pass "
                                  "zero_division=<value> to choose what such a case scores")
            out = torch.where(bad, torch.full_like(out, float(zero_division)), out)
        return float(out[0]) if single else out

    @checked_keywords()
    def score(self, preds: Any, target: Any, *, num_classes: int | None = None,
              ignore_index: int | None = None, zero_division: float | None = None,
              mode: str = "multiclass", num_labels: int | None = None, from_logits: bool = False,
              average: str | None = None, threshold: float | None = None) -> float:
        """The exact metric on hard labels.

        ``preds``: ``(N, K, *)`` scores (argmax over dim 1) or ``(N, *)`` class
        labels with ``num_classes``; ``target``: ``(N, *)`` class indices;
        ``ignore_index`` drops elements with that target. ``from_logits`` is accepted
        and changes nothing (the argmax of logits and of probabilities is the same);
        ``average`` and ``threshold`` do not apply and are refused.
        """
        from .evaluate.matrix import hard_confusion_matrix
        from .runtime.modes import MULTICLASS, look_up_mode
        from .runtime.options import check_flag

        check_flag("from_logits", from_logits)
        num_classes = class_count(num_classes, num_labels)
        if look_up_mode(mode) is not MULTICLASS:  # the K x K matrix has no other mode
            raise MetricError(f"a K x K metric scores multiclass labels; mode={mode!r} does not "
                              "apply")
        self._refuse_options(average=average, threshold=threshold)
        m = hard_confusion_matrix(preds, target, num_classes or self.num_classes, ignore_index,
                                  None if num_classes else self._classes_from())
        if not bool(m.sum() > 0):
            raise MetricError("score() needs at least one (not ignored) element")
        return float(self.value(m, zero_division=zero_division))

    @checked_keywords(TORCHMETRICS_OPTIONS)
    def metric(self, *, num_classes: int | None = None,
               ignore_index: int | None = None, zero_division: float | None = 0.0,
               validate_args: bool = True, mode: str = "multiclass", num_labels: int | None = None,
               average: str | None = None, threshold: float | None = None,
               **kwargs: Any) -> MatrixStatefulMetric:
        """A ``torchmetrics.Metric`` of this formula on hard labels, exact over batches and ranks.

        Its state is the ``(K, K)`` hard confusion matrix, summed over ``update()``
        calls and (by torchmetrics' sync) over ranks; ``compute()`` evaluates the
        formula on it, ``zero_division`` where it is undefined (``None`` raises).
        Other keyword arguments go to ``torchmetrics.Metric``.

        >>> import torch, metricc
        >>> qwk = metricc.compile("quadratic_kappa").metric(num_classes=3)
        >>> qwk.update(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 2, 2, 1]))
        >>> round(float(qwk.compute()), 4)
        0.6364
        """
        from .runtime.modes import MULTICLASS, look_up_mode

        if look_up_mode(mode) is not MULTICLASS:
            raise MetricError(f"a K x K metric scores multiclass labels; mode={mode!r} does not "
                              "apply")
        self._refuse_options(average=average, threshold=threshold)
        num_classes = class_count(num_classes, num_labels)
        k = num_classes if num_classes is not None else self.num_classes
        if k is None:
            raise MetricError("metric() of a K x K formula needs num_classes=<K>")
        if self.num_classes is not None and k != self.num_classes:
            raise MetricError(f"this metric's K x K parameters are {self.num_classes} x "
                              f"{self.num_classes}, but num_classes={k}")
        return stateful_module().MatrixStatefulMetric(
            self.value, self.text.strip(), self.higher_is_better, k, ignore_index=ignore_index,
            zero_division=zero_division, validate_args=validate_args,
            classes_from=None if num_classes is not None else self._classes_from(), **kwargs)

    def _classes_from(self) -> str | None:
        """Where the number of classes comes from when the user passes none: the K x K
        parameters (for the messages of ``score`` and ``metric``), or ``None``."""
        if self.num_classes is None:
            return None
        names = sorted(self.matrix_values)
        return (f"this metric's K x K parameter{'s' if len(names) > 1 else ''} "
                f"{', '.join(names)} {'are' if len(names) > 1 else 'is'} "
                f"{self.num_classes} x {self.num_classes}")

    # --- analysis --------------------------------------------------------------------------
    def check(self) -> MatrixCheckReport:
        """Where the metric is undefined, and which way it moves when a sample's
        true-class score rises (mass moves from ``C[a, b]`` to ``C[a, a]``).

        >>> import metricc
        >>> metricc.compile("multiclass_mcc").check().direction
        'increasing'
        >>> metricc.compile("quadratic_kappa").check().direction  # see docs/matrix.md
        'mixed'
        """
        report: Any = super().check()
        return report

    def _training_report(self) -> MatrixCheckReport:
        return self.check()  # the sampled check is what the warning reads

    def _run_check(self) -> MatrixCheckReport:
        return check(self.expr, self.loss_class.matrix_and_gradient, self._params(),
                     self.num_classes, self.higher_is_better)

    def loss(self, relaxation: str | None = None, *, warn_monotonicity: bool = True,
             **options: Any) -> MatrixLoss:
        """A ``torch.nn.Module``: ``1 - metric`` (or the metric, lower is better) on the soft
        K x K matrix; options as in :class:`metricc.runtime.matrix.MatrixLoss`.

        >>> import torch, metricc
        >>> loss = metricc.compile("quadratic_kappa").loss("linear", from_logits=True)
        >>> x = torch.randn(8, 4, requires_grad=True)
        >>> loss(x, torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])).backward()
        """
        module: Any = super().loss(relaxation, warn_monotonicity=warn_monotonicity,
                            **options)
        return module

    def verify(self, derivatives: Any = None, **options: Any) -> VerificationReport:
        """Prove the generated kernels against SymPy for small K, and compare the loss's
        gradient with autograd and finite differences; see :mod:`metricc.verify.matrix`."""
        from .verify.matrix import MatrixSubject, verify_matrix_data

        if derivatives is not None:
            raise MetricError("derivatives= checks 2 x 2 partials; a K x K metric has one "
                              "gradient d f / d C[a, b] (see gradient_text)")
        check_passed_on("verify", options, verify_matrix_data)
        subject = MatrixSubject(self.expr, self.kernels_source, tuple(self.matrix_parameters),
                                dict(self.matrix_values), self.higher_is_better, self.loss,
                                self.num_classes)
        return verify_matrix_data(subject, **options)
