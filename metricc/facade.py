"""The one facade: :class:`Metric`, what ``metricc.compile`` returns for every statistic.

The behaviour every statistic shares (name, parameters, direction, pickling, ``loss()``
option checks and the monotonicity warning, ``check()``, ``verify()``, the loss class
and its standalone file) is written here once; :class:`Metric` itself is the 2x2
metric over ``TP FP FN TN``, and :class:`metricc.matrix_metric.MatrixMetric`, the
K x K one, overrides what that statistic changes. The work is done by the stages
(``language``, ``analysis``, ``emit``, ``evaluate``, ``verify``; ``docs/architecture.md``),
which receive data, never this object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import sympy

from .analysis.cache import cached, expression_key
from .analysis.counts import Analysis, analyse
from .analysis.counts_check import CheckReport, check
from .analysis.statistics import (
    STATISTICS,
    Statistic,
    analysis_errors,
    as_rational,
    check_counts_expr,
    training_warning,
)
from .constraints import ConstraintMethods
from .counts_scoring import CountsScoring
from .errors import MetricError, MetricWarning, suggest
from .keywords import check_passed_on
from .language.limits import check_constants
from .language.parse import Formula, substitute
from .language.symbols import COUNTS
from .library import micro_tn_refusal

if TYPE_CHECKING:
    from torch import Tensor

    from .analysis.curve_check import CurveCheckReport
    from .analysis.matrix_check import MatrixCheckReport
    from .verify.counts import CountsSubject, VerificationReport

# emit (through SymPy's TorchPrinter) and evaluate import torch: they are imported where
# first needed, so that `metricc grad`/`metricc list` never load torch.

__all__ = ["Loss", "Metric"]


class Loss(Protocol):
    """What every ``Metric.loss()`` returns (``MetricLoss``, ``ConstrainedLoss``, ``MatrixLoss``):
    a ``torch.nn.Module`` called as ``loss(input, target)`` (2x2 and K x K losses also take
    ``weight=``), with a memory of past batches that ``reset_memory()`` empties."""

    def __call__(self, input: Tensor, target: Tensor) -> Tensor: ...

    def reset_memory(self) -> None: ...


class Metric(CountsScoring, ConstraintMethods):
    """A compiled metric: its SymPy form, derivatives, exact scores and losses.

    >>> import metricc
    >>> m = metricc.compile("2*TP / (2*TP + FP + FN)")
    >>> m.expr
    2*TP/(FN + FP + 2*TP)
    >>> m.value(tp=30, fp=5, fn=10, tn=955)
    0.8
    """

    statistic: ClassVar[Statistic] = STATISTICS["counts"]
    #: ``(formula, params, higher_is_better, constraints) -> Metric``: how a metric is compiled
    #: again when unpickled; :mod:`metricc.metric` sets it to its cached ``compile``.
    rebuild: ClassVar[Callable[..., Metric] | None] = None
    #: Names of K x K parameters given as numbers (kernel arguments after ``eps``).
    matrix_parameters: tuple[str, ...] = ()

    def __init__(self, formula: Formula, params: Mapping[str, float], name: str | None,
                 higher_is_better: bool, constraints: tuple[Any, ...] = ()) -> None:
        self._init_common(formula, params, name, higher_is_better, constraints)
        subs = {sympy.Symbol(k): as_rational(k, v) for k, v in params.items()}
        expr = substitute(formula.expr, subs)
        check_counts_expr(expr, self.text)
        self.analysis: Analysis = analyse(expr)
        # Simplifying can combine constants (1e200*TP/(1e-200*FP) is 1e400*TP/FP).
        check_constants(self.analysis.expr, "the simplified formula")
        if not self.analysis.expr.free_symbols & set(COUNTS.values()):
            raise MetricError(f"formula {self.text.strip()!r} simplifies to the constant "
                              f"{self.analysis.expr}; a metric must depend on the counts")
        self._plain: Metric | None = None  # with constraints: the objective alone

    def _init_common(self, formula: Any, params: Mapping[str, Any], name: str | None,
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
            tuple(c.text for c in self.constraints[len(formula.constraints):]))

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

    # --- symbolic -------------------------------------------------------------------------
    @property
    def expr(self) -> sympy.Expr:
        """The simplified metric over ``Symbol('TP')`` ... ``Symbol('TN')``."""
        return self.analysis.expr

    @property
    def expr_text(self) -> str:
        """The metric as text (the formula language; ``repr`` and ``metricc grad`` print it)."""
        return str(self.expr)

    @property
    def gradient(self) -> dict[str, sympy.Expr]:
        """``{"TP": d metric/d TP, "FP": ..., "FN": ..., "TN": ...}``."""
        with analysis_errors(self.text):  # computed on first use
            return dict(self._partials())

    def _cache_key(self) -> tuple[Any, ...]:
        """What a derived result depends on, for the opt-in disk cache (:mod:`metricc.analysis.cache`)."""
        return (self.statistic.name, self.text.strip(), sorted(self.parameters.items()),
                expression_key(self.expr), self.higher_is_better)

    def _partials(self) -> dict[str, sympy.Expr]:
        if "gradient" not in self.analysis.__dict__:  # not yet computed in this process
            result = cached("gradient", self._cache_key, lambda: self.analysis.gradient_result,
                            keep=lambda r: r[1])
            self.analysis.__dict__["gradient"] = result[0]  # the cached_property's slot
        return self.analysis.gradient

    @property
    def undefined(self) -> list[sympy.Expr]:
        """Expressions whose vanishing leaves the metric undefined (``TP + FP`` for precision)."""
        with analysis_errors(self.text):  # computed on first use
            return list(self.analysis.undefined)

    @property
    def kernels_source(self) -> str:
        """The generated torch source of the statistic's two kernels (value; value and gradient)."""
        if self._kernels_source is None:
            from .emit.loss_class import KERNEL_EMITTERS

            self._kernels_source = KERNEL_EMITTERS[self.statistic.name](
                self.expr, self.matrix_parameters)
        return self._kernels_source

    def check(self) -> CheckReport | MatrixCheckReport | CurveCheckReport:
        """Where the metric is undefined, its monotonicity in each count and its range
        (a :class:`~metricc.analysis.matrix_check.MatrixCheckReport` for K x K metrics).

        Decided symbolically where SymPy can, else by sampling (each verdict says
        which); see :func:`metricc.analysis.counts_check.check`. Computed once per metric.

        >>> import metricc
        >>> r = metricc.compile("f1").check()
        >>> r.monotonicity["TP"].direction, r.monotonicity["TN"].direction
        ('increasing', 'constant')
        >>> print(r.undefined[0])
        FN + FP + 2*TP = 0  (0/0)
        """
        if self._check is None:
            if self.constraints:  # the constraints' own metrics cache their reports
                self._check = self._run_check()
            else:  # not a report the time budget cut short: a faster run may prove more
                self._check = cached("check", self._cache_key, self._run_check,
                                     keep=lambda r: not getattr(r, "budget_spent", False),
                                     own=self.expr)
        return self._check

    def _training_report(self) -> Any:
        """What the warning of ``loss()`` reads: ``check()``'s report where there is one, else
        the two moves' verdicts alone (the rest of a check is work no loss needs)."""
        if self._check is not None or self.constraints:
            return self.check()
        if self._moves is not None:
            return self._moves
        from .analysis.budget import limit
        from .analysis.counts_moves import check_moves

        def moves() -> Any:
            with limit(), analysis_errors(self.text):  # one budget, as in _run_check
                return check_moves(self.expr, self._partials(), higher_is_better=self.higher_is_better)

        self._moves = cached("moves", self._cache_key, moves, keep=lambda r: not r.budget_spent)
        return self._moves

    def _run_check(self) -> Any:
        from .analysis.budget import limit

        # One budget for simplifying the partials and for the proofs on them.
        with limit(), analysis_errors(self.text):
            report: Any = check(self.expr, self._partials(),
                                higher_is_better=self.higher_is_better)
        if self.constraints:  # and whether each constraint can be met
            from .constraints import ConstraintsCheckReport, check_constraint

            report = ConstraintsCheckReport(
                report, tuple(check_constraint(c) for c in self.constraints))
        return report

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

    def loss_attributes(self) -> dict[str, Any]:
        """The statistic's own class attributes of the loss class."""
        tn = COUNTS["TN"] in self.expr.free_symbols
        return {"micro_refusal": micro_tn_refusal(self.name) if tn else "",
                "__doc__": f"Loss for the metric {self.text.strip()!r} = {self.expr}."}

    def loss(self, relaxation: str | None = None, *, warn_monotonicity: bool = True,
             **options: Any) -> Loss:
        """A ``torch.nn.Module`` computing ``1 - metric`` on the relaxed confusion matrix.

        ``relaxation``: ``anyloss`` (the default, except in multiclass mode), ``linear``,
        ``sigmoid``, or ``softmax`` (the multiclass default: the relaxed argmax
        ``softmax(logits / temperature)``, see docs/modes.md).
        Options: ``amplifier`` (73), ``slope``/``offset`` (sigmoid relaxation),
        ``temperature`` (1, softmax relaxation), ``alpha`` (self_adjusting relaxation):
        an option of another relaxation than the one in use (``loss("linear",
        amplifier=20)``) is a :class:`MetricError` naming the relaxation's options;
        ``from_logits``, ``backward`` (``"symbolic"`` or ``"autograd"``),
        ``multidim_average`` (``"global"`` or ``"samplewise"``), ``reduction``, ``eps``,
        ``mode`` (``"binary"``, ``"multiclass"``, ``"multilabel"``), ``average``
        (``"micro"``, ``"macro"``, ``"weighted"``, ``"none"``), ``ignore_index``,
        ``classes``, ``class_weights`` (see docs/modes.md);
        ``sync_dist``/``process_group`` (sum the counts over ranks: the exact global-batch
        metric under DDP) and ``memory_decay`` (add a decayed memory of past batches'
        counts); see docs/distributed.md. ``soft_label`` (count the overlap
        ``min(a, y)``: the optimum is ``input == target`` for soft targets) and the
        module's ``weight=`` argument (a per-element weight map):
        see docs/weights-and-soft-labels.md.

        A :class:`metricc.MetricWarning` is issued when :meth:`check` finds the
        metric moving the wrong way along a move a batch allows (decreasing as a
        positive's score turns an FN into a TP, or increasing as a negative's turns
        a TN into an FP; reversed when lower is better), or not depending on the
        predictions at all (``P/N``); pass
        ``warn_monotonicity=False`` (or filter ``MetricWarning`` with the
        :mod:`warnings` module) to silence it.

        With constraints, the loss is a
        :class:`~metricc.runtime.constrained.ConstrainedLoss` (binary mode, one
        confusion matrix per batch) and takes ``multiplier_lr`` (0.2),
        ``penalty`` (1.0), ``max_multiplier`` (100) and ``multiplier_rates``
        (``"hard"``) too, and its AnyLoss ``amplifier`` defaults to 10, not 73
        (``metricc.runtime.constraint_defaults.CONSTRAINED_DEFAULTS``, chosen in
        docs/constrained_defaults.md); it warns once when a constraint stays violated
        while its multiplier grows. See ``docs/constraints.md``.

        >>> import torch, metricc
        >>> loss = metricc.compile("f1").loss()
        >>> x = torch.tensor([0.9, 0.2, 0.8], requires_grad=True)
        >>> round(loss(x, torch.tensor([1.0, 0.0, 1.0])).item(), 4)
        0.0
        """
        if self.constraints:
            from .constraints import constrained_loss

            return constrained_loss(self, relaxation, warn_monotonicity, options)
        from .emit.loss_class import loss_parameters
        from .runtime.options import check_flag

        check_flag("warn_monotonicity", warn_monotonicity)
        allowed = [p.name for p in loss_parameters(self.statistic)]
        for key in options:
            if key not in allowed:
                raise MetricError(f"unknown loss option {key!r}{suggest(key, allowed)}"
                                  f"{self._option_hint(key)}; options are {', '.join(allowed)}")
        # No relaxation given: the runtime class's own default decides (one rule for the
        # API, the CLI and standalone files).
        module: Loss = self.loss_class(*(() if relaxation is None else (relaxation,)), **options)
        from .runtime.relax import refuse_foreign_options

        # the relaxation in use (its default included) takes every relaxation option given
        refuse_foreign_options(getattr(module, "relaxation", ""), options)
        if warn_monotonicity:
            self._warn_monotonicity()
        return module

    def _option_hint(self, key: str) -> str:
        """More to say about an unknown loss option (K x K metrics explain missing modes)."""
        return ""

    def _warn_monotonicity(self) -> None:
        import warnings

        why = training_warning(self._training_report(), self.name or self.text.strip(),
                               self.higher_is_better)
        if why is not None:
            warnings.warn(why, MetricWarning, stacklevel=3)

    def verify(self, derivatives: Mapping[str, str] | None = None, **options: Any) -> VerificationReport:
        """Check the gradient three ways; raise :class:`VerificationError` on any mismatch.

        Symbolically: the code the backward runs equals SymPy's derivatives of the
        metric and of the relaxation, and each of the user's ``derivatives``
        (formula text per count) equals the true partial. Numerically, in float64:
        symbolic backward = autograd of an independent implementation = finite
        differences (``torch.autograd.gradcheck``) for every relaxation.

        With constraints, the objective's kernels and every constraint's are
        verified (checks named ``constraint <text>: ...``).

        >>> import metricc
        >>> metricc.compile("f1").verify(derivatives={"TP": "2*(FP+FN)/(2*TP+FP+FN)^2"}).ok
        True
        """
        from .verify.counts import verify_counts

        check_passed_on("verify", options, verify_counts)
        if self.constraints:
            from .constraints import verify_constraints

            return verify_constraints(self, derivatives, options)
        return verify_counts(self.verify_subject(options.get("numeric", True)), derivatives,
                             **options)

    def verify_subject(self, numeric: bool = True) -> CountsSubject:
        """This metric as :func:`metricc.verify.counts.verify_counts` reads it: data (the
        formula, kernels, parameters, direction, the loss builder), not the facade.

        ``numeric``: whether the numeric checks will run; only they need to know that the
        metric ignores the predictions (``check()``, which costs an analysis).
        """
        from .verify.counts import CountsSubject

        constant = numeric and not self.check().depends_on_predictions
        return CountsSubject(self.expr, self.kernels_source, dict(self.parameters),
                             self.higher_is_better, self.loss, constant=bool(constant))
