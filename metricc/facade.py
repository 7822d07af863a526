"""The neutral base of every statistic's facade: :class:`Metric`, what ``metricc.compile`` returns.

The behaviour every statistic shares (name, parameters, direction, pickling, ``loss()``
option checks and the monotonicity warning, the cached ``check()``, the loss class and
its kernels) is written here once. Each statistic's facade stands beside the others and
declares its statistic: :class:`metricc.counts_metric.CountsMetric` (the 2x2 counts),
:class:`metricc.matrix_metric.MatrixMetric` (K x K), :class:`metricc.curve_metric.CurveMetric`
(the ROC/PR curve). A public method a statistic has no meaning for raises a
:class:`~metricc.errors.MetricError` with the statistic's reason. The work is done by the
stages (``language``, ``analysis``, ``emit``, ``evaluate``, ``verify``;
``docs/architecture.md``), which receive data, never this object.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Protocol

import sympy

from .analysis.cache import cached, expression_key
from .analysis.statistics import Statistic, resolve, statistic_of, training_warning
from .errors import MetricError, MetricWarning, unknown_loss_option

if TYPE_CHECKING:
    from torch import Tensor

    from .verify.report import VerificationReport

# emit (through SymPy's TorchPrinter) and evaluate import torch: they are imported where
# first needed, so that `metricc grad`/`metricc list` never load torch.

__all__ = ["Loss", "Metric", "refusals"]


def refusals(*, threshold: str, constraints: str, verify_subject: str) -> dict[str, str]:
    """``Metric.not_applicable`` of a statistic without decision thresholds and constraints:
    every method of each family refused with the family's reason.

    >>> sorted(refusals(threshold="t", constraints="c", verify_subject="v").items())[:2]
    [('best_threshold', 't'), ('constraint_scores', 'c')]
    """
    return {**dict.fromkeys(("best_threshold", "decision_objective"), threshold),
            **dict.fromkeys(("parse_constraints", "constraint_scores", "feasible"), constraints),
            "verify_subject": verify_subject}


class Loss(Protocol):
    """What every ``Metric.loss()`` returns (``MetricLoss``, ``ConstrainedLoss``, ``MatrixLoss``):
    a ``torch.nn.Module`` called as ``loss(input, target)`` (2x2 and K x K losses also take
    ``weight=``), with a memory of past batches that ``reset_memory()`` empties."""

    def __call__(self, input: Tensor, target: Tensor) -> Tensor: ...

    def reset_memory(self) -> None: ...


class Metric:
    """A compiled metric: what ``metricc.compile`` returns for every statistic.

    This base holds what every statistic shares: name, parameters, direction, pickling,
    ``loss()`` option checks and the wrong-way warning, the cached ``check()``, the loss
    class and its kernels. Each statistic's facade subclasses it and declares
    ``statistic`` (:class:`metricc.counts_metric.CountsMetric` for the 2x2 counts,
    :class:`metricc.matrix_metric.MatrixMetric`, :class:`metricc.curve_metric.CurveMetric`);
    a public method that does not apply to a statistic raises a :class:`MetricError`
    saying why (``not_applicable``), never another statistic's answer.

    >>> import metricc
    >>> [type(metricc.compile(f)).__name__ for f in ("f1", "quadratic_kappa", "auroc")]
    ['CountsMetric', 'MatrixMetric', 'CurveMetric']
    >>> isinstance(metricc.compile("auroc"), metricc.Metric)
    True
    """

    #: The statistic this facade compiles (declared once, by each statistic's facade).
    statistic: ClassVar[Statistic]
    #: The type of ``check()``'s report: a disk-cache entry of another type is not served.
    check_report: ClassVar[type[Any]]
    #: How messages name this statistic's metrics ("2 x 2", "K x K", "curve").
    kind: ClassVar[str] = ""
    #: ``{method: why}``: the public methods that do not apply to this statistic.
    not_applicable: ClassVar[Mapping[str, str]] = {}
    #: ``(formula, params, higher_is_better, constraints) -> Metric``: how a metric is compiled
    #: again when unpickled; :mod:`metricc.metric` sets it to its cached ``compile``.
    rebuild: ClassVar[Callable[..., Metric] | None] = None

    def __new__(cls, formula: Any, *args: Any, **kwargs: Any) -> Metric:
        # 0.2 built 2x2 metrics as Metric(formula, params, name, higher_is_better): the
        # base still takes any parsed formula and builds its statistic's facade.
        if cls is Metric:
            cls = resolve(statistic_of(formula).facade)
        return object.__new__(cls)

    def __init__(self, formula: Any, params: Mapping[str, Any], name: str | None,
                 higher_is_better: bool, constraints: tuple[Any, ...] = ()) -> None:
        self.formula = formula
        #: :class:`metricc.constraints.Constraint`\ s to meet while optimising (``docs/constraints.md``)
        self.constraints = tuple(constraints)
        self.text: str = formula.text
        self.name = name
        self.parameters = dict(params)
        self.higher_is_better = higher_is_better
        self._kernels_source: str | None = None
        self._loss_class: type[Any] | None = None
        self._check: Any = None
        self._moves: Any = None  # the verdicts a loss's warning reads, before a whole check()
        #: How to compile this metric again: ``compile``'s arguments (see ``__reduce__``).
        self._spec: tuple[Any, ...] = (
            self.text, tuple(self.parameters.items()), higher_is_better,
            tuple(c.text for c in self.constraints[len(getattr(formula, "constraints", ())):]))

    def __reduce__(self) -> tuple[Any, ...]:
        # The generated loss class cannot be pickled: a Metric travels as its formula,
        # parameters and direction (compile's own arguments), and is compiled again where
        # it lands, from compile's cache in a process that compiled it already (e.g.
        # inside a pickled StatefulMetric, or a pickled loss).
        return self._recipe

    @property
    def _recipe(self) -> tuple[Any, ...]:
        """``(function, args)`` that compile this metric again (``__reduce__``'s answer)."""
        return self.__dict__.get("_constraint_recipe") or (type(self).rebuild, self._spec)

    def __repr__(self) -> str:
        label = self.name or self.text.strip()
        extra = f", constraints={[c.text for c in self.constraints]}" if self.constraints else ""
        return (f"{type(self).__name__}({label!r}, expr={self.expr_text}, "
                f"higher_is_better={self.higher_is_better}{extra})")

    def _refuse(self, method: str) -> NoReturn:
        why = self.not_applicable.get(method, "it is not defined for this statistic")
        raise MetricError(f"{method}() does not apply to the {self.kind or self.statistic.name} metric "
                          f"{(self.name or self.text.strip())!r}: {why}")

    # --- what each statistic provides (or refuses with its reason) -----------------------
    @property
    def matrix_parameters(self) -> tuple[str, ...]:
        """Names of K x K parameters given as numbers (kernel arguments after ``eps``)."""
        return ()

    @property
    def expr(self) -> sympy.Expr:
        """The metric's SymPy expression over its statistic's symbols."""
        raise NotImplementedError

    @property
    def expr_text(self) -> str:
        """The metric as text (the formula language; ``repr`` and ``metricc grad`` print it)."""
        return str(self.expr)

    @property
    def gradient(self) -> dict[str, sympy.Expr]:
        """The derivatives the backward runs, by name."""
        raise NotImplementedError

    @property
    def undefined(self) -> list[sympy.Expr]:
        """Expressions whose vanishing leaves the metric undefined."""
        raise NotImplementedError

    def loss_attributes(self) -> dict[str, Any]:
        """The statistic's own class attributes of the loss class."""
        raise NotImplementedError

    def _run_check(self) -> Any:
        raise NotImplementedError

    def _training_report(self) -> Any:
        """What the warning of ``loss()`` reads: the statistic's ``check()`` report."""
        return self.check()

    def verify(self, derivatives: Mapping[str, str] | None = None, **options: Any) -> VerificationReport:
        """Check the generated gradient against SymPy, autograd and finite differences."""
        raise NotImplementedError

    def value(self, *args: Any, **kwargs: Any) -> Any:
        """The exact metric of the statistic's entries (counts, a matrix, curve points)."""
        self._refuse("value")

    def score(self, *args: Any, **kwargs: Any) -> Any:
        """The exact metric of predictions against labels."""
        self._refuse("score")

    def metric(self, *args: Any, **kwargs: Any) -> Any:
        """A ``torchmetrics.Metric`` of this formula, exact over batches and ranks."""
        self._refuse("metric")

    def best_threshold(self, *args: Any, **kwargs: Any) -> Any:
        """The decision threshold optimising this metric on held-out scores."""
        self._refuse("best_threshold")

    def decision_objective(self, *args: Any, **kwargs: Any) -> Any:
        """This metric as the decision stage reads it."""
        self._refuse("decision_objective")

    def parse_constraints(self, *args: Any, **kwargs: Any) -> Any:
        """Constraint texts as constraints on this metric's statistic."""
        self._refuse("parse_constraints")

    def constraint_scores(self, *args: Any, **kwargs: Any) -> Any:
        """Each constraint's metric on hard predictions."""
        self._refuse("constraint_scores")

    def feasible(self, *args: Any, **kwargs: Any) -> Any:
        """Whether every constraint holds on hard predictions."""
        self._refuse("feasible")

    def pass_judge(self, **options: Any) -> Any:
        """What :class:`metricc.BestFeasible` of this metric is when the statistic judges passes
        itself (``None``: the 2 x 2 judge of :meth:`decision_objective`)."""
        return None

    def verify_subject(self, *args: Any, **kwargs: Any) -> Any:
        """This metric as the 2x2 verify stage reads it."""
        self._refuse("verify_subject")

    # --- shared by every statistic -------------------------------------------------------
    def _cache_key(self) -> tuple[Any, ...]:
        """What a derived result depends on, for the opt-in disk cache (:mod:`metricc.analysis.cache`)."""
        return (self.statistic.name, self.text.strip(), sorted(self.parameters.items()),
                expression_key(self.expr), self.higher_is_better)

    @property
    def kernels_source(self) -> str:
        """The generated torch source of the statistic's two kernels (value; value and gradient)."""
        if self._kernels_source is None:
            emit = resolve(self.statistic.emitter)  # the statistic's declared kernel writer
            self._kernels_source = emit(self.kernel_exprs, self.matrix_parameters)
        return self._kernels_source

    @property
    def kernel_exprs(self) -> Any:
        """What the kernel writer is given: the metric's expression (a statistic whose kernels
        compute more, such as the groups' constraint violations, gives those too)."""
        return self.expr

    def check(self) -> Any:
        """Where the metric is undefined and which way it trains: the statistic's check
        report, computed once per metric (and kept by the opt-in disk cache when complete)."""
        if self._check is None:
            if self.constraints:  # the constraints' own metrics cache their reports
                self._check = self._run_check()
            else:  # not a report the time budget cut short: a faster run may prove more
                self._check = cached("check", self._cache_key, self._run_check,
                                     keep=lambda r: not getattr(r, "budget_spent", False),
                                     own=self.expr, schema=self.check_report)
        return self._check

    @property
    def loss_class(self) -> type[Any]:
        """The subclass of the statistic's runtime loss (:class:`metricc.runtime.loss.MetricLoss`,
        :class:`metricc.runtime.matrix.MatrixLoss`) holding the generated kernels."""
        if self._loss_class is None:
            from .emit.loss_class import build_loss_class, loss_class_name

            self._loss_class = build_loss_class(
                self.statistic, self.kernels_source, loss_class_name(self.name, self.statistic),
                {"formula": self.text.strip(), "higher_is_better": self.higher_is_better,
                 **self.loss_attributes()}, self._recipe)
        return self._loss_class

    def loss(self, relaxation: str | None = None, *, warn_monotonicity: bool = True,
             **options: Any) -> Loss:
        """A ``torch.nn.Module`` computing ``1 - metric`` (the metric itself when lower is
        better) on the statistic's relaxed form; each facade documents its options. Options
        the statistic's runtime loss does not take are refused with a did-you-mean, and a
        :class:`metricc.MetricWarning` says when :meth:`check` finds the metric moving the
        wrong way (``warn_monotonicity=False`` silences it).
        """
        from .emit.loss_class import loss_parameters
        from .runtime.options import check_flag
        from .runtime.relax import refuse_foreign_options

        check_flag("warn_monotonicity", warn_monotonicity)
        allowed = [p.name for p in loss_parameters(self.statistic)]
        for key in options:
            if key not in allowed:
                raise unknown_loss_option(key, allowed, self._option_hint(key))
        # No relaxation given: the runtime class's own default decides (one rule for the
        # API, the CLI and standalone files).
        module: Loss = self.loss_class(*(() if relaxation is None else (relaxation,)), **options)
        # the relaxation in use (its default included) takes every relaxation option given
        refuse_foreign_options(getattr(module, "relaxation", ""), options)
        if warn_monotonicity:
            self._warn_monotonicity()
        return module

    def standalone(self, path: str | os.PathLike[str] | None = None, relaxation: str | None = None,
                   *, class_name: str | None = None, warn_monotonicity: bool = True,
                   **loss_options: Any) -> str:
        """This metric's loss as one Python module that needs only torch (``metricc compile``).

        Returns the module's text and, given a ``path``, writes it there. Its class is named as
        :attr:`loss_class` (or ``class_name``) and takes every option of :meth:`loss`;
        ``relaxation`` and ``loss_options`` become its defaults, checked as :meth:`loss` does.

        >>> import metricc
        >>> text = metricc.compile("f1").standalone(amplifier=50.0)
        >>> "class F1Loss(MetricLoss):" in text and "amplifier: float = 50.0," in text
        True
        """
        from .standalone_file import standalone_source, write_standalone

        return write_standalone(path, standalone_source(
            self, class_name, relaxation, warn_monotonicity=warn_monotonicity, **loss_options))

    def _option_hint(self, key: str) -> str:
        """More to say about an unknown loss option (K x K metrics explain missing modes)."""
        return ""

    def _warn_monotonicity(self) -> None:
        import warnings

        why = training_warning(self._training_report(), self.name or self.text.strip(),
                               self.higher_is_better)
        if why is not None:
            from .evaluate.threshold import outside_stacklevel

            warnings.warn(why, MetricWarning, stacklevel=outside_stacklevel())
