"""The 2x2 half of :class:`metricc.Metric`: exact values at counts and scores on hard labels.

A mixin of the facade: ``value``, ``score``, ``metric`` (a torchmetrics ``Metric``) and
``best_threshold`` over ``TP FP FN TN``, each handing data (the generated value
kernel, the options) to :mod:`metricc.evaluate`. K x K metrics override them
(:mod:`metricc.matrix_metric`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .errors import MetricError
from .keywords import TORCHMETRICS_OPTIONS, checked_keywords
from .language.symbols import COUNTS
from .library import micro_tn_refusal
from .runtime.options import DEFAULT_MODE, class_count

if TYPE_CHECKING:
    import sympy

    from .constraints import Constraint
    from .evaluate.objective import CountsObjective
    from .evaluate.stateful import StatefulMetric
    from .evaluate.threshold import ThresholdChoice

__all__ = ["CountsScoring", "stateful_module"]

_COUNT_ARGS = ("tp", "fp", "fn", "tn")


class CountsScoring:
    """``value``/``score``/``metric``/``best_threshold`` of a 2x2 metric (see :class:`metricc.Metric`)."""

    expr: sympy.Expr
    name: str | None
    text: str
    higher_is_better: bool
    constraints: tuple[Any, ...]
    loss_class: Any
    if TYPE_CHECKING:  # given by the class this mixes into (a property of Metric)
        @property
        def undefined(self) -> list[sympy.Expr]: ...

        def parse_constraints(self, texts: Iterable[str]) -> tuple[Constraint, ...]: ...

    @checked_keywords()
    def value(self, tp: Any = None, fp: Any = None, fn: Any = None, tn: Any = None, *,
              zero_division: float | None = None) -> Any:
        """The exact metric at the given counts: a float for numbers, a tensor for tensors.

        Where the metric is undefined (``0/0`` and the like) it raises
        :class:`MetricError`, or returns ``zero_division`` when that is given.
        Counts the formula does not use may be left out.
        """
        from .evaluate.values import exact_value

        given = dict(zip(_COUNT_ARGS, (tp, fp, fn, tn), strict=False))
        used = {s.name.lower() for s in self.expr.free_symbols}
        missing = [k for k in _COUNT_ARGS if given[k] is None and k in used]
        if missing:
            raise MetricError(f"value() needs {', '.join(missing)} for this metric")
        return exact_value(self.loss_class.metric_value, [given[k] for k in _COUNT_ARGS],
                           zero_division, lambda: [str(d) for d in self.undefined])

    @checked_keywords()
    def score(self, preds: Any, target: Any, threshold: float | None = None, *,
              zero_division: float | None = None, mode: str = DEFAULT_MODE,
              average: str = "macro", ignore_index: int | None = None, classes: Any = None,
              class_weights: Any = None, num_classes: int | None = None,
              from_logits: bool = False, multidim_average: str = "global",
              reduction: str = "mean", num_labels: int | None = None) -> Any:
        """The exact metric on hard labels: ``preds >= threshold`` against 0/1 ``target``.

        ``preds`` may hold probabilities or 0/1 labels (tensors, arrays or lists),
        or logits with ``from_logits=True``: the decision is then
        ``sigmoid(logit) >= threshold``, the threshold a probability in ``[0, 1]``
        (0.5, the default, is logit 0), as in :meth:`metric`, :meth:`best_threshold`
        and :class:`~metricc.decisions.BestFeasible` (one rule:
        :mod:`metricc.evaluate.scale`). Without ``from_logits``, binary and multilabel
        scores outside ``[0, 1]`` are refused at the default threshold, as the loss
        refuses them, and an explicit ``threshold`` applies to the scores on their own
        scale (margins, say). Multiclass scores may be logits or probabilities: the
        prediction is their argmax, and a ``threshold`` is refused.
        ``multidim_average="samplewise"`` scores each sample on its own and
        combines them by ``reduction`` (``mean``, ``sum``, ``none``: a float64
        tensor per sample), skipping samples with neither target nor prediction,
        as the loss does.
        ``mode="multiclass"`` takes ``(N, C, *)`` scores (argmax) or ``(N, *)``
        integer labels with ``num_classes``, against ``(N, *)`` class indices
        or ``(N, C, *)`` one-hot targets; ``mode="multilabel"`` thresholds
        ``(N, C, *)`` scores against 0/1 targets. ``average`` (``micro``,
        ``macro``, ``weighted``; ``none`` returns a float64 tensor of per-class
        values), ``ignore_index``, ``classes`` and ``class_weights`` act as in
        :meth:`loss`; classes with neither target nor prediction are left out
        of ``macro``/``weighted`` averages (``docs/modes.md``).

        >>> import metricc
        >>> metricc.compile("recall").score([0, 1, 2, 2], [0, 2, 2, 1], mode="multiclass",
        ...                                 num_classes=3, average="micro")
        0.5
        """
        from .evaluate.counts import score
        from .runtime.modes import look_up_mode

        mode = look_up_mode(mode)  # the one check; score and its stages take the object
        num_classes = class_count(num_classes, num_labels)
        if mode.exclusive and average == "micro" and COUNTS["TN"] in self.expr.free_symbols:
            raise MetricError(micro_tn_refusal(self.name))
        return score(self.value, preds, target, threshold, zero_division=zero_division,
                     mode=mode, average=average, ignore_index=ignore_index, classes=classes,
                     class_weights=class_weights, num_classes=num_classes,
                     from_logits=from_logits, multidim_average=multidim_average,
                     reduction=reduction)

    @checked_keywords(TORCHMETRICS_OPTIONS)
    def metric(self, *, mode: str = DEFAULT_MODE, num_classes: int | None = None,
               threshold: float | None = None, from_logits: bool = False, average: str = "macro",
               multidim_average: str = "global", ignore_index: int | None = None,
               classes: Any = None, class_weights: Any = None,
               zero_division: float | None = 0.0, absent_classes: str = "torchmetrics",
               validate_args: bool = True, num_labels: int | None = None,
               **kwargs: Any) -> StatefulMetric:
        """A ``torchmetrics.Metric`` of this formula on hard labels, exact over batches and ranks.

        Its states are the confusion counts of each class, summed over
        ``update()`` calls and (by torchmetrics' sync) over ranks; ``compute()``
        evaluates the formula on them. ``mode``, ``average`` (``micro``,
        ``macro``, ``weighted``, ``none``), ``multidim_average`` (``global``,
        ``samplewise``), ``ignore_index``, ``classes`` and ``class_weights``
        act as in :meth:`loss` and :meth:`score`; ``num_classes`` (the size of
        dim 1) is required for ``multiclass`` and ``multilabel``. Predictions
        are ``preds >= threshold`` (``sigmoid(preds) >= threshold`` when
        ``from_logits``: the threshold is always a probability in ``[0, 1]``, 0.5 by
        default, as in :meth:`score` and :meth:`best_threshold`) or the argmax over
        classes (``multiclass``, which refuses a threshold). ``zero_division`` is the
        value of a confusion matrix where the formula is undefined (``0/0``):
        ``0`` like torchmetrics and scikit-learn, ``float('nan')``, or ``None``
        to raise. ``absent_classes`` decides whether ``macro`` averages count a
        class with no target and no prediction: ``"torchmetrics"`` (skip it
        in multiclass, score it ``zero_division`` in multilabel),
        ``"skip"`` (metricc's loss and score rule, docs/modes.md) or
        ``"include"``. Other keyword arguments go to ``torchmetrics.Metric``
        (``sync_on_compute``, ``process_group``, ...); any other keyword is a
        :class:`MetricError` with a did-you-mean. Binary and multilabel integer
        predictions other than 0 and 1 are refused. Supported for 2x2 formulas in
        every mode, and K x K and curve formulas have their own ``metric()``.
        Needs ``torchmetrics``; see docs/stateful.md.

        >>> import torch, metricc
        >>> iou = metricc.compile("jaccard").metric(mode="multiclass", num_classes=3)
        >>> iou.update(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 2, 2, 1]))
        >>> round(float(iou.compute()), 4)   # (1 + 0 + 1/3) / 3
        0.4444
        """
        from .evaluate.scale import DEFAULT_THRESHOLD, refuse_multiclass_threshold
        from .runtime.modes import look_up_mode

        mode = look_up_mode(mode)  # the one check; the stateful metric keeps the object
        num_classes = class_count(num_classes, num_labels)
        if mode.exclusive and average == "micro" and COUNTS["TN"] in self.expr.free_symbols:
            raise MetricError(micro_tn_refusal(self.name))  # as score() and loss()

        refuse_multiclass_threshold(mode, threshold)
        threshold = DEFAULT_THRESHOLD if threshold is None else threshold
        # Only a metric that raises on 0/0 names the zero denominators (a SymPy analysis).
        undefined = tuple(str(d) for d in self.undefined) if zero_division is None else ()
        return stateful_module().StatefulMetric(
            self.value, self.text, self.higher_is_better, undefined, mode=mode,
            num_classes=num_classes, threshold=threshold,
            from_logits=from_logits, average=average, multidim_average=multidim_average,
            ignore_index=ignore_index, classes=classes, class_weights=class_weights,
            zero_division=zero_division, absent_classes=absent_classes,
            validate_args=validate_args, **kwargs)

    @checked_keywords()
    def best_threshold(self, scores: Any, target: Any, *, zero_division: float | None = None,
                       constraints: Sequence[str] | None = None,
                       confidence: float | None = None,
                       from_logits: bool = False) -> ThresholdChoice:
        """The threshold optimising this metric on held-out scores: :func:`metricc.best_threshold`.

        With ``from_logits=True`` the scores are logits and the threshold returned is a
        probability (compared with ``sigmoid(logit)``), the scale :meth:`score`,
        :meth:`metric` and :class:`~metricc.decisions.BestFeasible` read with
        ``from_logits=True``.

        Only thresholds meeting ``constraints`` (and the metric's own, when it was
        compiled with constraints) are candidates; with ``confidence=c``, only those whose
        constraints hold on new data with probability ``c`` (``docs/constraints.md``).
        2x2 formulas on binary scores only: a K x K metric raises :class:`MetricError`, and a
        curve formula already ranges over thresholds (``best(f1)``). A target of one class
        gives a :class:`MetricWarning` (nothing to separate).
        """
        from .evaluate.threshold import choose_threshold

        return choose_threshold(self.decision_objective(constraints), scores, target,
                                zero_division=zero_division, confidence=confidence,
                                from_logits=from_logits)

    def decision_objective(self, constraints: Iterable[str] | None = None) -> CountsObjective:
        """This metric as the decision stage reads it: its exact value at counts, its direction
        and its constraints (its own, then ``constraints``) as data.

        What :func:`metricc.evaluate.threshold.choose_threshold` and
        :class:`metricc.evaluate.operating.FeasiblePasses` take.
        """
        from .evaluate.objective import CountsBound, CountsObjective

        own = tuple(self.constraints)
        if constraints is not None:
            own += tuple(self.parse_constraints(constraints))
        bounds = tuple(CountsBound(c.text, c.metric.value, c.metric.expr, c.op, c.bound) for c in own)
        return CountsObjective(self.name or self.text.strip(), self.value, self.higher_is_better,
                               bounds)


def stateful_module() -> Any:
    """:mod:`metricc.evaluate.stateful`, which needs the optional torchmetrics."""
    try:
        from .evaluate import stateful
    except ImportError as e:
        raise MetricError(f"Metric.metric() needs torchmetrics ({e}); install it with "
                          "pip install 'metricc[torchmetrics]'") from None
    return stateful
