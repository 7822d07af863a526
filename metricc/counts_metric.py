"""The 2x2 statistic's facade: :class:`CountsMetric`, a metric over ``TP FP FN TN``.

It stands beside the K x K and curve facades on the neutral :class:`metricc.facade.Metric`:
the SymPy analysis of the counts, exact values at counts and scores on hard labels
(:class:`metricc.counts_scoring.CountsScoring`), constraints and decision thresholds
(:class:`metricc.constraints.ConstraintMethods`), which apply to this statistic only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import sympy

from .analysis.cache import cached
from .analysis.counts import Analysis, analyse
from .analysis.counts_check import CheckReport, check
from .analysis.statistics import STATISTICS, Statistic, analysis_errors, as_rational, check_counts_expr
from .constraints import ConstraintMethods
from .counts_scoring import CountsScoring
from .errors import MetricError
from .facade import Loss, Metric
from .keywords import check_passed_on
from .language.limits import check_constants
from .language.parse import Formula, substitute
from .language.symbols import COUNTS
from .library import micro_tn_refusal

if TYPE_CHECKING:
    from .constraints import ConstraintsCheckReport
    from .verify.counts import CountsSubject, VerificationReport

__all__ = ["CountsMetric"]


class CountsMetric(CountsScoring, ConstraintMethods, Metric):
    """A compiled 2x2 metric: its SymPy form, derivatives, exact scores, losses, constraints
    and decision thresholds.

    >>> import metricc
    >>> m = metricc.compile("2*TP / (2*TP + FP + FN)")
    >>> m.expr
    2*TP/(FN + FP + 2*TP)
    >>> m.value(tp=30, fp=5, fn=10, tn=955)
    0.8
    """

    statistic: ClassVar[Statistic] = STATISTICS["counts"]
    kind: ClassVar[str] = "2 x 2"
    check_report: ClassVar[type[Any]] = CheckReport

    def __init__(self, formula: Formula, params: Mapping[str, float], name: str | None,
                 higher_is_better: bool, constraints: tuple[Any, ...] = ()) -> None:
        super().__init__(formula, params, name, higher_is_better, constraints)
        subs = {sympy.Symbol(k): as_rational(k, v) for k, v in params.items()}
        expr = substitute(formula.expr, subs)
        check_counts_expr(expr, self.text)
        self.analysis: Analysis = analyse(expr)
        # Simplifying can combine constants (1e200*TP/(1e-200*FP) is 1e400*TP/FP).
        check_constants(self.analysis.expr, "the simplified formula")
        if not self.analysis.expr.free_symbols & set(COUNTS.values()):
            raise MetricError(f"formula {self.text.strip()!r} simplifies to the constant "
                              f"{self.analysis.expr}; a metric must depend on the counts")
        self._plain: CountsMetric | None = None  # with constraints: the objective alone

    # --- symbolic -------------------------------------------------------------------------
    @property
    def expr(self) -> sympy.Expr:
        """The simplified metric over ``Symbol('TP')`` ... ``Symbol('TN')``."""
        return self.analysis.expr

    @property
    def gradient(self) -> dict[str, sympy.Expr]:
        """``{"TP": d metric/d TP, "FP": ..., "FN": ..., "TN": ...}``."""
        with analysis_errors(self.text):  # computed on first use
            return dict(self._partials())

    def _partials(self) -> dict[str, sympy.Expr]:
        if "gradient" not in self.analysis.__dict__:  # not yet computed in this process
            result = cached("gradient", self._cache_key, lambda: self.analysis.gradient_result,
                            keep=lambda r: r[1], schema=tuple[dict[str, sympy.Expr], bool])
            self.analysis.__dict__["gradient"] = result[0]  # the cached_property's slot
        return self.analysis.gradient

    @property
    def undefined(self) -> list[sympy.Expr]:
        """Expressions whose vanishing leaves the metric undefined (``TP + FP`` for precision)."""
        with analysis_errors(self.text):  # computed on first use
            return list(self.analysis.undefined)

    def check(self) -> CheckReport | ConstraintsCheckReport:
        """Where the metric is undefined, its monotonicity in each count and its range
        (and, with constraints, whether each can be met).

        Decided symbolically where SymPy can, else by sampling (each verdict says
        which); see :func:`metricc.analysis.counts_check.check`. Computed once per metric.

        >>> import metricc
        >>> r = metricc.compile("f1").check()
        >>> r.monotonicity["TP"].direction, r.monotonicity["TN"].direction
        ('increasing', 'constant')
        >>> print(r.undefined[0])
        FN + FP + 2*TP = 0  (0/0)
        """
        report: CheckReport | ConstraintsCheckReport = super().check()
        return report

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
        counts, updated only in a training step: read, not written, under ``no_grad``
        or ``inference_mode``); see docs/distributed.md. ``soft_label`` (count the overlap
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
        if self.constraints:
            from .constraints import constrained_loss

            return constrained_loss(self, relaxation, warn_monotonicity, options)
        return super().loss(relaxation, warn_monotonicity=warn_monotonicity, **options)

    def _training_report(self) -> Any:
        """What the warning of ``loss()`` reads: ``check()``'s report where there is one, else
        the two moves' verdicts alone (the rest of a check is work no loss needs)."""
        if self._check is not None or self.constraints:
            return self.check()
        if self._moves is not None:
            return self._moves
        from .analysis.budget import limit
        from .analysis.counts_moves import MovesReport, check_moves

        def moves() -> Any:
            with limit(), analysis_errors(self.text):  # one budget, as in _run_check
                return check_moves(self.expr, self._partials(), higher_is_better=self.higher_is_better)

        self._moves = cached("moves", self._cache_key, moves, keep=lambda r: not r.budget_spent,
                             schema=MovesReport)
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

    def loss_attributes(self) -> dict[str, Any]:
        """The statistic's own class attributes of the loss class."""
        tn = COUNTS["TN"] in self.expr.free_symbols
        return {"micro_refusal": micro_tn_refusal(self.name) if tn else "",
                "__doc__": f"Loss for the metric {self.text.strip()!r} = {self.expr}."}

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
