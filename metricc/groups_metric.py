"""``metricc.compile`` for group formulas: :class:`GroupMetric`, the facade of the group statistic.

What the group statistic changes in :class:`metricc.Metric`: the index-form expression over
reductions (``gap``, ``ratio``, ``worst``, ``groupmax``, ``groupmean``, ``vsrest``;
``docs/groups.md``) and its ``subject to`` clause, the gradient as local forms, exact values at
counts per group (:mod:`metricc.evaluate.groups`), the check report
(:mod:`metricc.analysis.groups_check`), verification (:mod:`metricc.verify.groups`), decision
thresholds per group with a stated confidence (:mod:`metricc.evaluate.group_thresholds`) and
the loss (:class:`metricc.runtime.groups.GroupLoss`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import sympy

from .analysis.groups import (
    DEFAULT_GROUP_TAU,
    group_domain_problem,
    group_forms,
    group_undefined_where,
    local_term,
)
from .analysis.groups_check import GroupCheckReport, check, sample_group_counts
from .analysis.statistics import STATISTICS, Statistic, analysis_errors, as_rational, refuse_unreal
from .errors import MetricError
from .facade import Metric
from .keywords import TORCHMETRICS_OPTIONS, check_passed_on, checked_keywords
from .language.groups import GroupFormula
from .runtime.options import check_flag, class_count

if TYPE_CHECKING:
    from .verify.report import VerificationReport

__all__ = ["GroupCheckReport", "GroupMetric"]

_NOT_GROUP_OPTIONS = {
    "mode": "a group metric is over binary decisions: scores (N,) and 0/1 labels (N,)",
    "multidim_average": "the counts of each group pool the whole batch",
    "ignore_index": "give those samples weight 0",
    "backward": "the backward is always the symbolic one",
    "bins": "the relaxation is over predictions, not a curve",
}
_CONSTRAINTS_HERE = ("a group formula takes its bounds in its own clause: "
                     "'accuracy subject to gap(recall) <= 0.05'")


def _need_groups(groups: Any, method: str) -> None:
    if groups is None:
        raise MetricError(f"{method}() of a group metric needs each sample's group: groups=[...] "
                          "(one label per sample, fairlearn's sensitive_features)")


def _violation(c: Any) -> sympy.Expr:
    """``v > 0`` where the constraint is violated: ``lhs - rhs`` for ``<=``, else ``rhs - lhs``."""
    return c.lhs - c.rhs if c.op == "<=" else c.rhs - c.lhs


def _reduction_samples(nodes: tuple[Any, ...]) -> tuple[tuple[float, ...], ...]:
    """Rows ``(r_0, ..., TP, FP, FN, TN)``: the reductions' exact values, with the overall
    counts, at random counts of three groups (where the domain check looks for a negative base)."""
    from .evaluate.groups import evaluate_groups

    rows = []
    for counts in sample_group_counts(60):
        values = evaluate_groups(list(nodes), counts, zero_division=0.0)
        rows.append((*map(float, values), *map(float, counts.sum(0))))
    return tuple(rows)


class GroupMetric(Metric):
    """A compiled group metric: 2 x 2 formulas taken per group and reduced over groups.

    >>> import metricc
    >>> m = metricc.compile("equal_opportunity_difference")
    >>> m.expr_text
    'gap(TP/(FN + TP))'
    >>> m.score([0.9, 0.2, 0.8, 0.7], [1, 1, 1, 0], groups=["a", "a", "b", "b"])
    0.5
    """

    statistic: ClassVar[Statistic] = STATISTICS["groups"]
    kind: ClassVar[str] = "group"
    check_report: ClassVar[type[Any]] = GroupCheckReport
    not_applicable: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys(("parse_constraints", "constraint_scores", "feasible"), _CONSTRAINTS_HERE),
        "decision_objective": "best_threshold(..., groups=) chooses a group metric's thresholds",
        "verify_subject": "verify() proves the group kernels itself (metricc.verify.groups)"}

    def __init__(self, formula: GroupFormula, params: Mapping[str, Any], name: str | None,
                 higher_is_better: bool, constraints: tuple[Any, ...] = ()) -> None:
        super().__init__(formula, params, name, higher_is_better, constraints)
        subs = {sympy.Symbol(k): as_rational(k, params[k]) for k in formula.parameters}
        self._expr: sympy.Expr = formula.expr.xreplace(subs)
        self.group_constraints = tuple(type(c)(c.text, c.lhs.xreplace(subs), c.op, c.rhs.xreplace(subs))
                                       for c in formula.group_constraints)
        self._exprs = (self._expr, *(_violation(c) for c in self.group_constraints))
        with analysis_errors(self.text):
            for e in self._exprs:
                refuse_unreal(self.text, group_domain_problem(e, _reduction_samples), "group counts")
            self._forms = group_forms(self._exprs)
            self._terms = [local_term(node) for node in self._forms.nodes]

    # --- symbolic --------------------------------------------------------------------------
    @property
    def expr(self) -> sympy.Expr:
        """The metric in index form: an outer expression over reductions and the overall counts."""
        return self._expr

    @property
    def kernel_exprs(self) -> sympy.Tuple:
        """What the kernels compute: the metric, then each constraint's violation (> 0: violated)."""
        return sympy.Tuple(*self._exprs)

    @property
    def gradient(self) -> dict[str, sympy.Expr]:
        """The gradient as local forms (symbolic in the number of groups ``G``): for the metric
        ``h(r_0, ..., TP, FP, FN, TN)``, ``dh/dr_j`` and ``dh/dTP`` (overall counts), and each
        reduction's local ``df/dTP ... df/dTN`` at a group's counts (``docs/groups.md``)."""
        out: dict[str, sympy.Expr] = {}
        for j, (node, t) in enumerate(zip(self._forms.nodes, self._terms, strict=True)):
            out[f"r{j}"] = node
            out[f"dh/dr{j}"] = self._forms.reduction_partials[0][j]
            out.update({f"r{j}: df/d{c}": d for c, d in zip(("TP", "FP", "FN", "TN"), t.partials,
                                                             strict=True)})
        out.update({f"dh/d{c}": d for c, d in zip(("TP", "FP", "FN", "TN"),
                                                   self._forms.count_partials[0], strict=True)})
        return out

    @property
    def undefined(self) -> list[sympy.Expr]:
        """Expressions whose vanishing leaves a group out of a reduction, or the metric undefined."""
        return [e for _, e in group_undefined_where(self._exprs)]

    def loss_attributes(self) -> dict[str, Any]:
        specs = tuple((c.text, c.op, float(c.rhs) if c.rhs.is_number else 0.0)
                      for c in self.group_constraints)
        return {"__doc__": f"Loss for the group metric {self.text.strip()!r} = {self.expr_text}.",
                "constraint_specs": specs}

    def _option_hint(self, key: str) -> str:
        why = _NOT_GROUP_OPTIONS.get(key)
        return f" (a group loss has no {key}: {why})" if why else ""

    # --- numeric ---------------------------------------------------------------------------
    @checked_keywords()
    def value(self, tp: Any, fp: Any, fn: Any, tn: Any, *, zero_division: float | None = None) -> float:
        """The exact metric at counts per group: ``tp, fp, fn, tn`` each ``(G,)``.

        >>> import metricc
        >>> metricc.compile("gap(recall)").value([3, 1], [0, 0], [1, 3], [5, 5])
        0.5
        """
        from .evaluate.groups import evaluate_groups

        arrays = [np.asarray(a, dtype=np.float64).reshape(-1) for a in (tp, fp, fn, tn)]
        if len({a.shape for a in arrays}) != 1 or not all(np.isfinite(a).all() and (a >= 0).all()
                                                          for a in arrays):
            raise MetricError("tp, fp, fn, tn must be finite counts >= 0 of one shape (G,)")
        return self._finite(evaluate_groups([self._expr], np.stack(arrays, 1), zero_division)[0])

    def _finite(self, v: float) -> float:
        if not np.isfinite(v):
            raise MetricError(f"the metric {(self.name or self.text.strip())!r} is undefined at these "
                              "counts (a ratio whose largest group value is 0, or an overall rate "
                              "with no samples); pass zero_division=<value> where a rate is undefined")
        return float(v)

    @checked_keywords()
    def score(self, preds: Any, target: Any, *, groups: Any = None, sample_weight: Any = None,
              threshold: float | Sequence[float] = 0.5, from_logits: bool = False,
              zero_division: float | None = None, mode: str | None = None, num_classes: int | None = None,
              num_labels: int | None = None, average: str | None = None,
              ignore_index: int | None = None) -> float:
        """The exact metric of scores (or 0/1 decisions) against 0/1 labels, per group.

        ``groups``: one label per sample (any hashable values; fairlearn's
        ``sensitive_features``) or soft memberships ``(N, G)``. ``threshold``: one probability
        (``sigmoid(logit)`` with ``from_logits``), or one per group in the sorted order of the
        group labels (what ``best_threshold(..., per_group=True)`` returns). ``zero_division``:
        the value of a rate undefined in a group (fairlearn's and scikit-learn's is 0); without
        it such a group is an error naming it. Equals ``fairlearn.metrics``.
        """
        from .runtime.modes import look_up_mode

        if (mode is not None and look_up_mode(mode).class_dim) or class_count(num_classes, num_labels) is not None \
                or average is not None or ignore_index is not None:
            raise MetricError("a group metric is over binary decisions: scores (N,) and 0/1 labels "
                              "(N,); mode, num_classes, average and ignore_index do not apply")
        _need_groups(groups, "score")
        return self._finite(self._exact([self._expr], preds, target, groups, threshold, from_logits,
                                        zero_division, sample_weight)[0])

    @staticmethod
    def _exact(exprs: list[sympy.Expr], preds: Any, target: Any, groups: Any, threshold: Any,
               from_logits: bool, zero_division: float | None, sample_weight: Any = None) -> np.ndarray:
        """The exact values of ``exprs`` at the hard decisions per group (checked inputs): what
        ``score()`` and :class:`metricc.BestFeasible`'s passes read."""
        from .evaluate.group_thresholds import decide
        from .evaluate.groups import evaluate_groups, group_count_table, group_ids
        from .evaluate.threshold import as_array

        s, y = as_array(preds, "preds").reshape(-1), as_array(target, "target").reshape(-1)
        if s.shape != y.shape:
            raise MetricError(f"preds and target must have one entry per sample, got {s.shape} and {y.shape}")
        if not np.isin(y, (0, 1)).all():
            raise MetricError("target must hold 0/1 labels")
        if not np.isfinite(s).all():
            raise MetricError(f"preds hold {int((~np.isfinite(s)).sum())} NaN or infinite values; a "
                              "decision cannot be taken on them (check the model's outputs)")
        codes, labels = group_ids(groups, s.shape[0])
        w = None if sample_weight is None else as_array(sample_weight, "sample_weight").reshape(-1)
        counts = group_count_table(decide(s, codes, threshold, from_logits), y, codes, w, len(labels))
        return evaluate_groups(exprs, counts, zero_division, labels)

    @checked_keywords(("num_groups", "threshold", "from_logits", "zero_division", *TORCHMETRICS_OPTIONS))
    def metric(self, **kwargs: Any) -> Any:
        """A ``torchmetrics.Metric`` of this formula: ``update(preds, target, groups)`` sums the
        ``G x 4`` counts (over batches and ranks), ``compute()`` the exact value."""
        try:
            from .evaluate.groups_stateful import GroupStatefulMetric
        except ImportError as e:  # torchmetrics is optional
            raise MetricError("metric() needs torchmetrics: pip install 'metricc[torchmetrics]'") from e
        return GroupStatefulMetric(self._expr, self.name or self.text.strip(),
                                   higher_is_better=self.higher_is_better, **kwargs)

    def best_threshold(self, scores: Any, target: Any, *, groups: Any = None, per_group: bool = False,
                       constraints: Sequence[str] | None = None, confidence: float | None = None,
                       from_logits: bool = False, zero_division: float | None = None) -> Any:
        """Decision thresholds for this group metric on held-out scores: one for every group, or
        one per group with ``per_group=True`` (in the sorted order of the group labels). The
        formula's own bounds (``subject to gap(recall) <= 0.05``) must hold on these scores;
        2 x 2 ``constraints`` (``["recall >= 0.8"]``) must hold in every group; with
        ``confidence=c``, on new data with probability at least ``c`` for all groups together
        (exact Clopper-Pearson bounds per group, Bonferroni across groups), and a group too
        small to certify is named. See :func:`metricc.evaluate.group_thresholds.choose_group_thresholds`.

        >>> import metricc
        >>> m = metricc.compile("worst_group_accuracy")
        >>> m.best_threshold([0.9, 0.4, 0.6, 0.3], [1, 0, 1, 0], groups=[0, 0, 1, 1], per_group=True)
        GroupThresholdChoice(threshold=[0.9, 0.6], value=1.0, groups=[0, 1], confidence=None, bounds=None)
        """
        from .evaluate.group_thresholds import choose_group_thresholds
        from .evaluate.groups import evaluate_groups
        from .metric import compile

        _need_groups(groups, "best_threshold")
        check_flag("per_group", per_group)
        bounds = compile("accuracy").decision_objective(constraints or []).constraints

        exprs = list(self._exprs)

        def value(counts: np.ndarray) -> np.ndarray:
            # the metric where the formula's own bounds (subject to gap(recall) <= 0.05) hold on
            # these counts, NaN (not a candidate) where one does not
            v = evaluate_groups(exprs, counts, zero_division)
            met = np.all(v[1:] <= 1e-12, axis=0) if len(exprs) > 1 else True
            return np.where(met, v[0], np.nan)

        return choose_group_thresholds(value, self.higher_is_better, self.name or self.text.strip(),
                                       scores, target, groups, per_group=per_group,
                                       constraints=bounds, confidence=confidence, from_logits=from_logits)

    def pass_judge(self, **options: Any) -> Any:
        """What :class:`metricc.BestFeasible` of this metric is: a judge of whole validation
        passes (:class:`metricc.evaluate.group_passes.GroupPasses`; ``update`` takes ``groups=``)."""
        from .evaluate.group_passes import GroupPasses

        exprs, zero_division = list(self._exprs), options.get("zero_division")

        def values(preds: Any, target: Any, groups: Any, threshold: Any, from_logits: bool) -> np.ndarray:
            return self._exact(exprs, preds, target, groups, threshold, from_logits, zero_division)

        options.pop("passes", None)
        options.pop("zero_division", None)
        return GroupPasses(values, [c.text for c in self.group_constraints], self.higher_is_better, **options)

    # --- analysis --------------------------------------------------------------------------
    def _run_check(self) -> GroupCheckReport:
        from .analysis.budget import limit

        with limit(), analysis_errors(self.text):
            return check(self._expr, self.loss_class.group_and_gradient,
                         group_undefined_where(self._exprs), self.higher_is_better, DEFAULT_GROUP_TAU,
                         tuple(c.text for c in self.group_constraints))

    def verify(self, derivatives: Any = None, **options: Any) -> VerificationReport:
        """Prove the generated gradient against SymPy for G = 2 and 3, and compare the loss's
        gradient with autograd of a plain float64 implementation and finite differences; see
        :mod:`metricc.verify.groups`."""
        from .verify.groups import verify_groups

        if derivatives is not None:
            raise MetricError("derivatives= checks 2 x 2 partials; a group metric's gradient is given "
                              "by its local forms (see gradient)")
        check_passed_on("verify", options, verify_groups)
        return verify_groups(self.kernel_exprs, self.kernels_source, self.loss_class,
                             self.name or self.text.strip(), **options)
