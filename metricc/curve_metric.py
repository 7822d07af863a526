"""``metricc.compile`` for curve formulas: :class:`CurveMetric`, the facade's curve subclass.

What the curve statistic changes in :class:`metricc.Metric`: the index-form expression over
reductions (``area``, ``steps``, ``best``; ``docs/curve.md``), its gradient given as local
forms, exact values on curve points (:mod:`metricc.evaluate.curve_formula`) and exact scores
of scores and labels (one sort, ties as scikit-learn: :mod:`metricc.evaluate.curve`), the
check report (:mod:`metricc.analysis.curve_check`), verification (:mod:`metricc.verify.curve`)
and the loss (:class:`metricc.runtime.curve_loss.CurveLoss`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import sympy

from .analysis.curve import DEFAULT_TAU, DEFAULT_TAU_GATE, PairTerm, curve_undefined_where, local_form, outer_form
from .analysis.curve_bounds import check_bounds
from .analysis.curve_check import CurveCheckReport, check, curve_domain_problem, sample_curves
from .analysis.statistics import STATISTICS, Statistic, analysis_errors, as_rational, refuse_unreal
from .errors import MetricError
from .facade import Metric, refusals
from .keywords import TORCHMETRICS_OPTIONS, check_passed_on, checked_keywords
from .language.curve import AreaWithin, CurveFormula, CurveReduction
from .runtime.options import DEFAULT_MODE, class_count

if TYPE_CHECKING:
    from .runtime.curve_loss import CurveLoss
    from .verify.counts import VerificationReport

__all__ = ["CurveCheckReport", "CurveMetric"]

#: Loss options of the 2x2 and K x K losses that a curve loss has no use for, and why.
_NOT_CURVE_OPTIONS = {
    "amplifier": "the relaxation is the soft histogram: bins, width, space, clip",
    "slope": "the relaxation is the soft histogram: bins, width, space, clip",
    "temperature": "the relaxation is the soft histogram: bins, width, space, clip; best() "
                   "has tau and tau_gate",
    "multidim_average": "a curve pools every element of the batch",
    "ignore_index": "drop those elements, or give them weight 0",
    "backward": "the backward is always the symbolic one",
}


def _check_ranges(formula: CurveFormula, params: Mapping[str, Any], expr: sympy.Expr, what: str) -> None:
    """``max_fpr`` in (0, 1]; any ``area(y, x, lo, hi)`` range non-empty and within the range
    of ``x``; every ``best(f, g >= b)`` bound within the range of ``g`` (:func:`check_bounds`)."""
    v = params.get("max_fpr")
    if "max_fpr" in formula.parameters and v is not None and not (0 < float(v) <= 1):
        raise MetricError(f"max_fpr must be in (0, 1] (the ROC area is taken over fpr in [0, max_fpr], "
                          f"as scikit-learn's roc_auc_score(max_fpr=...)), got {v!r}")
    for node in expr.atoms(AreaWithin):
        lo, hi = node.args[2:]
        if lo.is_number and hi.is_number and not bool(lo < hi):
            raise MetricError(f"area(y, x, {lo}, {hi}): the range [lo, hi] is empty; write lo < hi")
    check_bounds(formula.expr, params, what)


def _reduction_samples(nodes: tuple[CurveReduction, ...]) -> tuple[tuple[float, ...], ...]:
    """Rows ``(r_0, ..., P, N)``: the reductions' exact values, with the totals, on random monotone
    curves (where the curve's domain check looks for a negative base)."""
    from .evaluate.curve_formula import evaluate_curve

    rows: list[tuple[float, ...]] = []
    with np.errstate(all="ignore"):
        for tp, fp, P, N in sample_curves(120):
            cols = [np.broadcast_to(evaluate_curve(node, tp, fp, P, N), P.shape) for node in nodes]
            rows += [tuple(map(float, row)) for row in zip(*cols, P, N, strict=True)]
    return tuple(rows)


def _exact_value(expr: sympy.Expr, s: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> float:
    """The formula on the exact curve of one column (every distinct score a threshold)."""
    from .evaluate.curve import exact_curve
    from .evaluate.curve_formula import evaluate_curve

    c = exact_curve(s, y, w)
    # exact_curve: descending thresholds; the formula's points ascend, then the top point
    tp, fp = np.r_[c.tp[::-1], 0.0], np.r_[c.fp[::-1], 0.0]
    value = float(evaluate_curve(expr, tp, fp, c.pos, c.neg))
    if not np.isfinite(value):
        raise MetricError(f"the metric is undefined on these labels (P = {c.pos:g}, N = {c.neg:g}): "
                          "a curve needs positives and negatives")
    return value


def _score_inputs(preds: Any, target: Any, mode: str | None, n: int | None,
                  ignore_index: int | None, from_logits: bool) -> np.ndarray:
    """``score()``'s shared options checked on a curve's inputs (the mode against the shapes,
    the size of dim 1, ``ignore_index``'s type); the scores to rank: multiclass logits as
    their log-softmax (the softmax's order without its ties in saturation), else as given."""
    from .evaluate.threshold import as_array
    from .runtime.modes import BINARY, MULTICLASS, MULTILABEL, look_up_mode

    s, t = as_array(preds, "preds"), as_array(target, "target")
    kind = (BINARY if s.ndim == 1 else MULTICLASS if s.ndim == 2 and t.shape == s.shape[:1]
            else MULTILABEL if s.ndim == 2 and t.shape == s.shape else None)  # what the shapes say
    if mode is not None:
        mode = look_up_mode(mode)
        if kind is not None and mode is not kind:
            want = {"binary": "(N,) scores and (N,) 0/1 labels",
                    "multiclass": "(N, C) scores and (N,) class indices",
                    "multilabel": "(N, C) scores and (N, C) 0/1 labels"}[mode]
            raise MetricError(f"mode={mode!r} takes {want}; got preds {s.shape} and target {t.shape}")
    if n is not None:
        if kind is BINARY:
            raise MetricError("binary scores take neither num_classes nor num_labels; pass "
                              "mode='multilabel' or 'multiclass' with (N, C) scores")
        if s.ndim == 2 and s.shape[1] != n:
            raise MetricError(f"num_classes={n} but preds have {s.shape[1]} columns")
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int)):
        raise MetricError(f"ignore_index must be an int or None, got {ignore_index!r}")
    if from_logits and kind is not None and kind.exclusive and s.size:
        s = s.astype(np.float64)
        s = s - np.logaddexp.reduce(s, axis=1, keepdims=True)  # log-softmax: no ties at 0 or 1
    return s


class CurveMetric(Metric):
    """A compiled curve metric: reductions over the 2x2 counts at every threshold.

    >>> import metricc
    >>> m = metricc.compile("auroc")
    >>> m.expr_text
    'area(TP/(FN + TP), FP/(FP + TN))'
    >>> m.score([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    0.75
    """

    statistic: ClassVar[Statistic] = STATISTICS["curve"]
    kind: ClassVar[str] = "curve"
    check_report: ClassVar[type[Any]] = CurveCheckReport
    not_applicable: ClassVar[Mapping[str, str]] = refusals(
        threshold="best_threshold and BestFeasible apply to metrics at one threshold; a curve "
                  "metric is over all of them (best(f) is the best value of f over thresholds)",
        constraints="constraints apply to 2 x 2 metrics; write the bound into best(): "
                    "best(recall, precision >= 0.9)",
        verify_subject="verify() proves the curve kernels itself (metricc.verify.curve)")

    def __init__(self, formula: CurveFormula, params: Mapping[str, Any], name: str | None,
                 higher_is_better: bool, constraints: tuple[Any, ...] = ()) -> None:
        super().__init__(formula, params, name, higher_is_better, constraints)
        subs = {sympy.Symbol(k): as_rational(k, params[k]) for k in formula.parameters}
        self._expr: sympy.Expr = formula.expr.xreplace(subs)
        _check_ranges(formula, params, self._expr, name or "the curve formula")
        with analysis_errors(self.text):
            refuse_unreal(self.text, curve_domain_problem(self._expr, _reduction_samples), "curves")
            self._outer = outer_form(self._expr)
            self._locals = [local_form(node) for node in self._outer.nodes]

    # --- symbolic --------------------------------------------------------------------------
    @property
    def expr(self) -> sympy.Expr:
        """The metric in index form: an outer expression over reduction nodes, ``P``, ``N``."""
        return self._expr

    @property
    def expr_text(self) -> str:
        """The metric in the formula language (``area(y, x)`` with ``y, x`` over the counts)."""
        return str(self._expr)

    @property
    def gradient(self) -> dict[str, sympy.Expr]:
        """The gradient as local forms (symbolic in the number of thresholds ``T``).

        For the metric ``h(r_0, r_1, ...)`` over reductions ``r_j``: ``dV/dr_j`` (``dh/dr{j}``),
        and each reduction's local partials: for ``area``/``steps``, a sum over neighbouring
        points of ``term(c_k, c_{k+1})``, ``d term/d TP_k`` (``r{j}: dterm/dTP_k``) and
        ``d term/d TP_{k+1}`` (``TP1, FP1...`` are the counts at ``k + 1``), so
        ``dr_j/dTP_k = dterm/dTP_k + dterm/dTP_{k+1}`` at ``k - 1``; for ``best``, the local
        ``df/dTP`` of the smooth maximum (docs/curve.md). All eps-guarded, as the kernels.
        """
        out: dict[str, sympy.Expr] = {}
        for j, (node, t) in enumerate(zip(self._outer.nodes, self._locals, strict=True)):
            out[f"r{j}"] = node
            out[f"dh/dr{j}"] = self._outer.partials[j]
            if isinstance(t, PairTerm):
                out.update({f"r{j}: term": t.term, f"r{j}: dterm/dTP_k": t.cur_tp,
                            f"r{j}: dterm/dFP_k": t.cur_fp, f"r{j}: dterm/dTP_k+1": t.next_tp,
                            f"r{j}: dterm/dFP_k+1": t.next_fp})
            else:
                out.update({f"r{j}: f": t.f, f"r{j}: df/dTP": t.f_tp, f"r{j}: df/dFP": t.f_fp})
                if t.d is not None and t.d_tp is not None and t.d_fp is not None:
                    out.update({f"r{j}: bound d": t.d, f"r{j}: dd/dTP": t.d_tp,
                                f"r{j}: dd/dFP": t.d_fp})
        return out

    @property
    def undefined(self) -> list[sympy.Expr]:
        """Expressions whose vanishing (at some threshold, or outside) leaves the metric undefined."""
        return [e for _, e in curve_undefined_where(self._expr)]

    def loss_attributes(self) -> dict[str, Any]:
        return {"__doc__": f"Loss for the curve metric {self.text.strip()!r} = {self.expr_text}."}

    def _option_hint(self, key: str) -> str:
        why = _NOT_CURVE_OPTIONS.get(key)
        return f" (a curve loss has no {key}: {why})" if why else ""

    # --- numeric ---------------------------------------------------------------------------
    @checked_keywords()
    def value(self, tp: Any, fp: Any, P: Any, N: Any) -> Any:
        """The exact metric of given curve points: ``tp[k], fp[k]`` ascending in threshold
        (``k = 0``: everything positive, ``tp = P, fp = N``; last: the top point ``0, 0``), as
        arrays ``(T,)`` (a float) or ``(..., T)`` with totals ``(...)`` (an array).

        >>> import metricc
        >>> metricc.compile("auroc").value([2, 2, 1, 1, 0], [2, 1, 1, 0, 0], 2, 2)
        0.75
        """
        from .evaluate.curve_formula import evaluate_curve

        arrays = [np.asarray(a, dtype=np.float64) for a in (tp, fp)]
        if arrays[0].shape != arrays[1].shape or arrays[0].ndim < 1 or arrays[0].shape[-1] < 2:
            raise MetricError(f"tp and fp must be curves of one shape (..., T) with T >= 2 points, got "
                              f"{arrays[0].shape} and {arrays[1].shape}")
        if not all(np.isfinite(a).all() and (a >= 0).all() for a in arrays):
            raise MetricError("tp and fp hold finite counts >= 0")
        out = evaluate_curve(self._expr, arrays[0], arrays[1], P, N)
        if not np.isfinite(out).all():
            raise MetricError("the metric is undefined on this curve (P or N is 0?); check the totals")
        return float(out) if out.ndim == 0 else out

    @checked_keywords()
    def score(self, preds: Any, target: Any, *, sample_weight: Any = None,
              average: str | None = "macro", mode: str | None = None, num_classes: int | None = None,
              num_labels: int | None = None, ignore_index: int | None = None,
              from_logits: bool = False, threshold: float | None = None) -> float | np.ndarray:
        """The exact metric of scores against labels: every distinct score a threshold.

        ``preds`` ``(N,)`` and 0/1 ``target`` ``(N,)`` (binary); ``(N, C)`` both (multilabel);
        ``(N, C)`` class probabilities and ``(N,)`` class indices (multiclass one-vs-rest).
        ``mode`` (``None``: read from the shapes) checks the shapes, and ``num_classes`` (or
        torchmetrics' ``num_labels``) the size of dim 1. ``average`` (``"macro"``,
        ``"weighted"`` by positives, ``"micro"`` pooling the columns, ``None`` one per column)
        as scikit-learn's for AUROC and average precision, and the same rule for any other
        formula. ``ignore_index`` leaves out the elements with that target. ``from_logits``:
        multiclass logits are ranked by their log-softmax (the order of the softmax, without
        its ties in saturation); binary and multilabel logits rank as their sigmoids do, so
        nothing changes. ``threshold`` does not apply: the curve is over every threshold.
        Equals ``roc_auc_score``, ``average_precision_score`` (``max_fpr=``), torchmetrics'
        fixed-precision/recall metrics, with ties.
        """
        from .evaluate.curve import column_average
        from .runtime.options import check_flag

        if threshold is not None:
            raise MetricError(f"threshold={threshold!r} does not apply to a curve metric: the curve is "
                              "taken over every threshold (best(f) picks the best one)")
        check_flag("from_logits", from_logits)
        scores = _score_inputs(preds, target, mode, class_count(num_classes, num_labels), ignore_index,
                               from_logits)

        def one(s: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> float:
            return _exact_value(self._expr, s, y, w)

        return column_average(one, scores, target, sample_weight, average=average,
                              what=self.name or "the curve metric", ignore_index=ignore_index)

    @checked_keywords(("num_labels", "num_classes", "ignore_index", "from_logits", *TORCHMETRICS_OPTIONS))
    def metric(self, *, thresholds: Any = None, average: str | None = "macro",
               mode: str = DEFAULT_MODE, **kwargs: Any) -> Any:
        """A ``torchmetrics.Metric`` of this curve formula, exact over batches and ranks
        (``thresholds=T``: binned, ``O(T)`` state); see ``metricc.evaluate.curve_stateful``."""
        try:
            from .evaluate.curve_stateful import CurveStatefulMetric
        except ImportError as e:  # torchmetrics is optional
            raise MetricError("metric() needs torchmetrics: pip install 'metricc[torchmetrics]'") from e
        return CurveStatefulMetric(self._expr, dict(self.parameters), thresholds=thresholds,
                                   average=average, mode=mode, **kwargs)

    # --- analysis --------------------------------------------------------------------------
    def check(self) -> CurveCheckReport:
        """Where the metric is undefined, and which way it moves along the moves a batch allows
        (sampled on random monotone curves; local formulas symbolically where SymPy can).

        >>> import metricc
        >>> metricc.compile("auroc").check().moves
        {'FN->TP': 'increasing', 'TN->FP': 'decreasing'}
        """
        report: Any = super().check()
        return report

    def _training_report(self) -> CurveCheckReport:
        return self.check()  # the sampled check is what the warning reads

    def _run_check(self) -> CurveCheckReport:
        from .analysis.budget import limit

        with limit(), analysis_errors(self.text):
            return check(self._expr, self.loss_class.curve_and_gradient, curve_undefined_where(self._expr),
                         self.higher_is_better, DEFAULT_TAU, DEFAULT_TAU_GATE)

    def loss(self, relaxation: str | None = None, *, warn_monotonicity: bool = True,
             **options: Any) -> CurveLoss:
        """A ``torch.nn.Module``: ``1 - metric`` (or the metric, lower is better) on the soft
        curve; options as in :class:`metricc.runtime.curve_loss.CurveLoss`.

        >>> import torch, metricc
        >>> loss = metricc.compile("auroc").loss(from_logits=True, bins=64)
        >>> x = torch.randn(32, requires_grad=True)
        >>> loss(x, (torch.arange(32) % 2).float()).backward()
        """
        module: Any = super().loss(relaxation, warn_monotonicity=warn_monotonicity,
                            **options)
        return module

    def verify(self, derivatives: Any = None, **options: Any) -> VerificationReport:
        """Prove the generated gradient against SymPy for T = 3 and 4, and compare the loss's
        gradient with autograd of a plain float64 implementation and finite differences; see
        :mod:`metricc.verify.curve`."""
        from .verify.curve import verify_curve

        if derivatives is not None:
            raise MetricError("derivatives= checks 2 x 2 partials; a curve metric's gradient is given "
                              "by its local forms (see gradient)")
        check_passed_on("verify", options, verify_curve)
        return verify_curve(self._expr, self.kernels_source, self.loss_class, self.name or self.text.strip(),
                            **options)
