"""``metricc.compile``: the pipeline parse -> analyse -> emit -> run, behind one object.

:class:`Metric` is a facade: the work is done by :mod:`metricc.language.parse`,
:mod:`metricc.analysis.counts`, :mod:`metricc.analysis.counts_check`, :mod:`metricc.emit`,
:mod:`metricc.evaluate.counts` and :mod:`metricc.verify` (``docs/architecture.md``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import sympy

from .analysis.counts import Analysis, analyse
from .analysis.counts_check import CheckReport, check
from .errors import MetricError, MetricWarning, MissingParameterError, suggest, suggest_all
from .language.limits import check_constants
from .language.matrix import MatrixFormula
from .language.parse import Formula, check_single_identifier, known_names, parse, substitute
from .language.symbols import COUNTS
from .library import lookup, micro_tn_refusal
from .verify.counts import VerificationReport, verify

if TYPE_CHECKING:
    from .evaluate.stateful import StatefulMetric
    from .evaluate.threshold import ThresholdChoice
    from .runtime.loss import MetricLoss

# emit (through SymPy's TorchPrinter) and score import torch: they are imported where
# first needed, so that `metricc grad`/`metricc list` never load torch.

__all__ = ["Metric", "compile"]

_COUNT_ARGS = ("tp", "fp", "fn", "tn")


def _as_rational(name: str, value: Any) -> sympy.Expr:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MetricError(f"parameter {name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise MetricError(f"parameter {name} must be finite, got {value!r}")
    # str() keeps what the user typed: 0.3 becomes 3/10, not 5404319552844595/18014398509481984.
    return sympy.Rational(str(value)) if isinstance(value, float) else sympy.Integer(value)


class Metric:
    """A compiled metric: its SymPy form, derivatives, exact scores and losses.

    >>> import metricc
    >>> m = metricc.compile("2*TP / (2*TP + FP + FN)")
    >>> m.expr
    2*TP/(FN + FP + 2*TP)
    >>> m.value(tp=30, fp=5, fn=10, tn=955)
    0.8
    """

    def __init__(self, formula: Formula, params: Mapping[str, float], name: str | None,
                 higher_is_better: bool, constraints: tuple[Any, ...] = ()) -> None:
        self.formula = formula
        #: :class:`metricc.constraints.Constraint`\ s to meet while optimising (``docs/constraints.md``)
        self.constraints = tuple(constraints)
        self.text = formula.text
        self.name = name
        self.parameters = dict(params)
        self.higher_is_better = higher_is_better
        subs = {sympy.Symbol(k): _as_rational(k, v) for k, v in params.items()}
        expr = substitute(formula.expr, subs)
        self._check_expr(expr)
        self.analysis: Analysis = analyse(expr)
        # Simplifying can combine constants (1e200*TP/(1e-200*FP) is 1e400*TP/FP).
        check_constants(self.analysis.expr, "the simplified formula")
        if not self.analysis.expr.free_symbols & set(COUNTS.values()):
            raise MetricError(f"formula {self.text.strip()!r} simplifies to the constant "
                              f"{self.analysis.expr}; a metric must depend on the counts")
        self._kernels_source: str | None = None
        self._loss_class: type[MetricLoss] | None = None
        self._check: CheckReport | None = None
        self._plain: Metric | None = None  # with constraints: the objective alone
        #: How to compile this metric again: ``compile``'s arguments (see ``__reduce__``).
        self._spec: tuple[Any, ...] = (
            self.text, tuple(self.parameters.items()), higher_is_better,
            tuple(c.text for c in self.constraints[len(formula.constraints):]))

    def __reduce__(self) -> tuple[Any, ...]:
        # The generated loss class cannot be pickled: a Metric travels as its formula,
        # parameters and direction (compile's own arguments), and is compiled again where
        # it lands, from compile's cache in a process that compiled it already (e.g.
        # inside a pickled StatefulMetric, or a pickled loss below).
        return self._recipe

    @property
    def _recipe(self) -> tuple[Any, ...]:
        """``(function, args)`` that compile this metric again (``__reduce__``'s answer)."""
        return self.__dict__.get("_constraint_recipe") or (_rebuild_metric, self._spec)

    def _check_expr(self, expr: sympy.Expr) -> None:
        if expr.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
            raise MetricError(f"formula {self.text.strip()!r} divides by zero for every input")
        if not expr.free_symbols & set(COUNTS.values()):
            raise MetricError(
                f"formula {self.text.strip()!r} depends on no count; a metric must use at "
                "least one of TP, FP, FN, TN (or P, N, PP, PN, n)"
            )
        if expr.has(sympy.I) or any(a.is_number and a.is_extended_real is False
                                    for a in sympy.preorder_traversal(expr)):
            raise MetricError(f"formula {self.text.strip()!r} is complex-valued")
        from .analysis.domain import domain_problem

        if (problem := domain_problem(expr)) is not None:
            # The loss would be NaN, with NaN gradients, wherever a batch lands there.
            raise MetricError(f"formula {self.text.strip()!r} is not real for all counts: "
                              f"{problem}")

    def __repr__(self) -> str:
        label = self.name or self.text.strip()
        extra = f", constraints={[c.text for c in self.constraints]}" if self.constraints else ""
        return (f"Metric({label!r}, expr={self.expr}, higher_is_better={self.higher_is_better}"
                f"{extra})")

    # --- symbolic -------------------------------------------------------------------------
    @property
    def expr(self) -> sympy.Expr:
        """The simplified metric over ``Symbol('TP')`` ... ``Symbol('TN')``."""
        return self.analysis.expr

    @property
    def gradient(self) -> dict[str, sympy.Expr]:
        """``{"TP": d metric/d TP, "FP": ..., "FN": ..., "TN": ...}``."""
        with _analysis_errors(self.text):  # computed on first use
            return dict(self.analysis.gradient)

    @property
    def undefined(self) -> list[sympy.Expr]:
        """Expressions whose vanishing leaves the metric undefined (``TP + FP`` for precision)."""
        with _analysis_errors(self.text):  # computed on first use
            return list(self.analysis.undefined)

    @property
    def kernels_source(self) -> str:
        """The generated torch source of ``metric_value`` and ``metric_and_coefficients``."""
        if self._kernels_source is None:
            from .emit.counts import emit_kernels

            self._kernels_source = emit_kernels(self.expr)
        return self._kernels_source

    def check(self) -> CheckReport:
        """Where the metric is undefined, its monotonicity in each count and its range.

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
            from .analysis.budget import limit

            # One budget for simplifying the partials and for the proofs on them.
            with limit(), _analysis_errors(self.text):
                self._check = check(self.expr, self.analysis.gradient,
                                    higher_is_better=self.higher_is_better)
            if self.constraints:  # and whether each constraint can be met
                from .constraints import ConstraintsCheckReport, check_constraint

                self._check = ConstraintsCheckReport(  # type: ignore[assignment]
                    self._check, tuple(check_constraint(c) for c in self.constraints))
        return self._check

    # --- numeric --------------------------------------------------------------------------
    def value(self, tp: Any = None, fp: Any = None, fn: Any = None, tn: Any = None, *,
              zero_division: float | None = None) -> Any:
        """The exact metric at the given counts: a float for numbers, a tensor for tensors.

        Where the metric is undefined (``0/0`` and the like) it raises
        :class:`MetricError`, or returns ``zero_division`` when that is given.
        Counts the formula does not use may be left out.
        """
        import torch

        if zero_division is not None and (isinstance(zero_division, bool)
                                          or not isinstance(zero_division, (int, float))):
            raise MetricError(f"zero_division must be a number (or float('nan')), got "
                              f"{zero_division!r}")
        given = dict(zip(_COUNT_ARGS, (tp, fp, fn, tn), strict=False))
        used = {s.name.lower() for s in self.expr.free_symbols}
        missing = [k for k in _COUNT_ARGS if given[k] is None and k in used]
        if missing:
            raise MetricError(f"value() needs {', '.join(missing)} for this metric")
        counts = [_count_tensor(k, given[k] if given[k] is not None else 0) for k in _COUNT_ARGS]
        tensor_in = any(_is_array(v) for v in given.values())
        # Computed in float64 whatever the input (float16 counts overflow in the
        # products of MCC); tensors come back in their own floating dtype.
        out_dtype = next((v.dtype for v in given.values() if isinstance(v, torch.Tensor)
                          and v.is_floating_point()), torch.float64)
        counts = list(torch.broadcast_tensors(*counts)) if tensor_in else counts
        out = self._kernel("metric_value")(*counts, 0.0)
        out = torch.as_tensor(out, dtype=torch.float64)
        bad = ~torch.isfinite(out)
        if bool(bad.any()):
            if zero_division is None:
                where = " or ".join(f"{d} = 0" for d in self.undefined) or "these counts"
                raise MetricError(
                    f"the metric is undefined here ({where}); pass zero_division=<value> to "
                    "choose what such a case scores"
                )
            out = torch.where(bad, torch.full_like(out, float(zero_division)), out)
        return out.to(out_dtype) if tensor_in else float(out)

    def score(self, preds: Any, target: Any, threshold: float | None = None, *,
              zero_division: float | None = None, mode: str = "binary",
              average: str = "macro", ignore_index: int | None = None, classes: Any = None,
              class_weights: Any = None, num_classes: int | None = None,
              from_logits: bool = False, multidim_average: str = "global",
              reduction: str = "mean") -> Any:
        """The exact metric on hard labels: ``preds >= threshold`` against 0/1 ``target``.

        ``preds`` may hold probabilities or 0/1 labels (tensors, arrays or lists),
        or logits with ``from_logits=True`` (the decision is then
        ``sigmoid(logit) >= threshold``). ``threshold`` defaults to 0.5, and then
        binary and multilabel scores outside ``[0, 1]`` without ``from_logits`` are
        refused, as the loss refuses them; an explicit ``threshold`` applies to the
        scores on their own scale (a logit threshold from :meth:`best_threshold`).
        Multiclass scores may be logits or probabilities: their argmax is the same.
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

        if mode == "multiclass" and average == "micro" and COUNTS["TN"] in self.expr.free_symbols:
            raise MetricError(micro_tn_refusal(self.name))
        return score(self.value, preds, target, threshold, zero_division=zero_division,
                     mode=mode, average=average, ignore_index=ignore_index, classes=classes,
                     class_weights=class_weights, num_classes=num_classes,
                     from_logits=from_logits, multidim_average=multidim_average,
                     reduction=reduction)

    def metric(self, *, mode: str = "binary", num_classes: int | None = None,
               threshold: float = 0.5, from_logits: bool = False, average: str = "macro",
               multidim_average: str = "global", ignore_index: int | None = None,
               classes: Any = None, class_weights: Any = None,
               zero_division: float | None = 0.0, absent_classes: str = "torchmetrics",
               validate_args: bool = True, **kwargs: Any) -> StatefulMetric:
        """A ``torchmetrics.Metric`` of this formula on hard labels, exact over batches and ranks.

        Its states are the confusion counts of each class, summed over
        ``update()`` calls and (by torchmetrics' sync) over ranks; ``compute()``
        evaluates the formula on them. ``mode``, ``average`` (``micro``,
        ``macro``, ``weighted``, ``none``), ``multidim_average`` (``global``,
        ``samplewise``), ``ignore_index``, ``classes`` and ``class_weights``
        act as in :meth:`loss` and :meth:`score`; ``num_classes`` (the size of
        dim 1) is required for ``multiclass`` and ``multilabel``. Predictions
        are ``preds >= threshold`` (after a sigmoid when ``from_logits``) or
        the argmax over classes (``multiclass``). ``zero_division`` is the
        value of a confusion matrix where the formula is undefined (``0/0``):
        ``0`` like torchmetrics and scikit-learn, ``float('nan')``, or ``None``
        to raise. ``absent_classes`` decides whether ``macro`` averages count a
        class with no target and no prediction: ``"torchmetrics"`` (skip it
        in multiclass, score it ``zero_division`` in multilabel),
        ``"skip"`` (metricc's loss and score rule, docs/modes.md) or
        ``"include"``. Other keyword arguments go to ``torchmetrics.Metric``
        (``sync_on_compute``, ``process_group``, ...). Needs ``torchmetrics``;
        see docs/stateful.md.

        >>> import torch, metricc
        >>> iou = metricc.compile("jaccard").metric(mode="multiclass", num_classes=3)
        >>> iou.update(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 2, 2, 1]))
        >>> round(float(iou.compute()), 4)   # (1 + 0 + 1/3) / 3
        0.4444
        """
        if mode == "multiclass" and average == "micro" and COUNTS["TN"] in self.expr.free_symbols:
            raise MetricError(micro_tn_refusal(self.name))  # as score() and loss()
        try:
            from .evaluate.stateful import StatefulMetric
        except ImportError as e:
            raise MetricError(f"Metric.metric() needs torchmetrics ({e}); install it with "
                              "pip install 'metricc[torchmetrics]'") from None
        return StatefulMetric(
            self, mode=mode, num_classes=num_classes, threshold=threshold,
            from_logits=from_logits, average=average, multidim_average=multidim_average,
            ignore_index=ignore_index, classes=classes, class_weights=class_weights,
            zero_division=zero_division, absent_classes=absent_classes,
            validate_args=validate_args, **kwargs)

    def best_threshold(self, scores: Any, target: Any, *, zero_division: float | None = None,
                       constraints: Sequence[str] | None = None,
                       confidence: float | None = None) -> ThresholdChoice:
        """The threshold optimising this metric on held-out scores: :func:`metricc.evaluate.threshold.best_threshold`.

        Only thresholds meeting ``constraints`` (and the metric's own, when it was
        compiled with constraints) are candidates; with ``confidence=c``, only those whose
        constraints hold on new data with probability ``c`` (``docs/constraints.md``).
        """
        from .evaluate.threshold import best_threshold

        return best_threshold(self, scores, target, zero_division=zero_division,
                              constraints=constraints, confidence=confidence)

    def _kernel(self, name: str) -> Any:
        return getattr(self.loss_class, name)

    @property
    def loss_class(self) -> type[MetricLoss]:
        """The :class:`metricc.runtime.loss.MetricLoss` subclass holding the generated kernels."""
        if self._loss_class is None:
            from .emit.loss_class import build_loss_class

            cls = build_loss_class(
                self.kernels_source, self.name, self.text.strip(), self.expr,
                self.higher_is_better,
                micro_refusal=(micro_tn_refusal(self.name)
                               if COUNTS["TN"] in self.expr.free_symbols else ""))
            # Generated classes live in no importable module, so pickle could not find
            # them by name: their modules pickle as the metric's spec plus their state.
            cls._metric_recipe = self._recipe  # type: ignore[attr-defined]
            cls.__reduce_ex__ = _reduce_loss  # type: ignore[method-assign,assignment]
            # and the class itself, where a module holds it (a constraint's kernels)
            cls._class_recipe = (_rebuild_loss_class, (self._recipe,))  # type: ignore[attr-defined]
            self._loss_class = cls
        return self._loss_class

    def loss(self, relaxation: str | None = None, *, warn_monotonicity: bool = True,
             **options: Any) -> MetricLoss:
        """A ``torch.nn.Module`` computing ``1 - metric`` on the relaxed confusion matrix.

        ``relaxation``: ``anyloss`` (the default, except in multiclass mode), ``linear``,
        ``sigmoid``, or ``softmax`` (the multiclass default: the relaxed argmax
        ``softmax(logits / temperature)``, see docs/modes.md).
        Options: ``amplifier`` (73), ``slope``/``offset`` (sigmoid relaxation),
        ``temperature`` (1, softmax relaxation),
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
        confusion matrix per batch) and takes ``multiplier_lr`` (0.05),
        ``penalty`` (1.0), ``max_multiplier`` (100) and ``multiplier_rates``
        (``"hard"``) too; see ``docs/constraints.md``.

        >>> import torch, metricc
        >>> loss = metricc.compile("f1").loss()
        >>> x = torch.tensor([0.9, 0.2, 0.8], requires_grad=True)
        >>> round(loss(x, torch.tensor([1.0, 0.0, 1.0])).item(), 4)
        0.0
        """
        if self.constraints:
            return self._constrained_loss(relaxation, warn_monotonicity, options)
        from .emit.loss_class import loss_parameters
        from .runtime.options import check_flag

        check_flag("warn_monotonicity", warn_monotonicity)
        allowed = [p.name for p in loss_parameters()]
        for key in options:
            if key not in allowed:
                raise MetricError(f"unknown loss option {key!r}{suggest(key, allowed)}; "
                                  f"options are {', '.join(allowed)}")
        module = self.loss_class(relaxation, **options)
        if warn_monotonicity:
            self._warn_monotonicity()
        return module

    def _warn_monotonicity(self) -> None:
        import warnings

        report = self.check()
        if not report.depends_on_predictions:
            warnings.warn(
                f"the loss for {self.name or self.text.strip()!r} does not depend on the "
                "predictions: raising a positive's score (FN -> TP) or a negative's (TN -> FP) "
                "leaves the metric unchanged, so its gradient is zero everywhere and it cannot "
                "train (it depends only on P and N, which the labels fix). Check the formula; "
                "silence this with loss(..., warn_monotonicity=False).",
                MetricWarning,
                stacklevel=3,
            )
            return
        wrong = report.wrong_way()
        if not wrong:
            return

        fix = ("compile it with higher_is_better=False (metricc CLI: --lower-is-better) if "
               "lower values are better" if self.higher_is_better else
               "compile it with higher_is_better=True (metricc CLI: --higher-is-better) if "
               "higher values are better")
        warnings.warn(
            f"the loss for {self.name or self.text.strip()!r} would train the wrong way: "
            + "; ".join(wrong.values())
            + f". Check the formula, or {fix}; silence this with loss(..., "
            "warn_monotonicity=False).",
            MetricWarning,
            stacklevel=3,
        )

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
        if self.constraints:
            return self._verify_constraints(derivatives, options)
        return verify(self, derivatives=derivatives, **options)

    # --- constraints (docs/constraints.md) --------------------------------------------------
    def parse_constraints(self, texts: Iterable[str]) -> tuple[Any, ...]:
        """``["recall >= 0.9", ...]`` as :class:`metricc.constraints.Constraint` objects.

        >>> import metricc
        >>> c, = metricc.compile("f1").parse_constraints(["fpr <= 0.05"])
        >>> c.metric.expr, c.op, c.bound
        (FP/(FP + TN), '<=', 0.05)
        """
        from .constraints import build_constraints

        return build_constraints(None, texts, _constraint_metric)

    def constraint_scores(self, preds: Any, target: Any, threshold: float = 0.5) -> dict[str, float]:
        """Each constraint's metric on hard predictions ``preds >= threshold`` (``nan``
        where it is undefined, e.g. recall without positives).

        >>> import metricc
        >>> m = metricc.compile("precision subject to recall >= 0.9")
        >>> m.constraint_scores([0.9, 0.8, 0.3, 0.1], [1, 1, 1, 0])
        {'recall >= 0.9': 0.6666666666666666}
        """
        return {c.text: c.metric.score(preds, target, threshold, zero_division=math.nan)
                for c in self.constraints}

    def feasible(self, preds: Any, target: Any, threshold: float = 0.5) -> bool:
        """Whether every constraint holds on hard predictions ``preds >= threshold``."""
        scores = self.constraint_scores(preds, target, threshold)
        return all(c.satisfied(scores[c.text]) for c in self.constraints)

    def _constrained_loss(self, relaxation: str, warn_monotonicity: bool,
                          options: dict[str, Any]) -> Any:
        import warnings

        from .runtime.constrained import ConstrainedLoss, ConstraintSpec

        keys = ("multiplier_lr", "penalty", "max_multiplier", "multiplier_rates")
        multiplier_options = {k: options.pop(k) for k in keys if k in options}
        objective = self._objective().loss(relaxation, warn_monotonicity=warn_monotonicity,
                                           **options)
        if warn_monotonicity:
            for why in self.check().unmet().values():  # type: ignore[attr-defined]
                warnings.warn(f"constraint {why}", MetricWarning, stacklevel=3)
        specs = [ConstraintSpec(c.text, c.metric.loss_class, c.op, c.bound)
                 for c in self.constraints]
        return ConstrainedLoss(objective, specs, **multiplier_options)

    def _objective(self) -> Metric:
        """This metric without its constraints (sharing the generated kernels).

        Built once: each ``loss()`` would otherwise analyse the formula again and build
        (and ``torch.compile`` trace) a loss class of its own.
        """
        if self._plain is None:
            plain = Metric(self.formula, self.parameters, self.name, self.higher_is_better)
            plain._loss_class, plain._kernels_source = self.loss_class, self.kernels_source
            self._plain = plain
        return self._plain

    def _verify_constraints(self, derivatives: Mapping[str, str] | None,
                            options: dict[str, Any]) -> VerificationReport:
        import dataclasses

        from .errors import VerificationError
        from .verify.counts import verify

        raise_on_failure = options.pop("raise_on_failure", True)
        report = verify(self._objective(), derivatives=derivatives, raise_on_failure=False,
                        **options)
        for c in self.constraints:
            sub = verify(c.metric, raise_on_failure=False, **options)
            report.checks += [dataclasses.replace(k, name=f"constraint {c.text}: {k.name}")
                              for k in sub.checks]
        if raise_on_failure and not report.ok:
            raise VerificationError(str(report))
        return report


def _constraint_metric(formula: Formula, higher_is_better: bool) -> Metric:
    """How a constraint's normalised side is compiled (no parameters, no name)."""
    return Metric(formula, {}, None, higher_is_better)


def _is_array(v: Any) -> bool:
    """A tensor or an array; numpy scalars (np.int64(3)) are numbers, and give a float."""
    import numbers

    return (hasattr(v, "__array__") or hasattr(v, "__torch_function__")) \
        and not isinstance(v, numbers.Number)


def _count_tensor(name: str, v: Any) -> Any:
    """One count for :meth:`Metric.value` as a float64 tensor, or a clear MetricError."""
    import numbers

    import torch

    if _is_array(v):
        t = v if isinstance(v, torch.Tensor) else torch.as_tensor(v)
        if t.device.type == "meta":
            raise MetricError(f"{name} is a meta tensor, which holds no values; pass real counts")
        if t.is_complex() or t.dtype == torch.bool:
            raise MetricError(f"{name} must hold real numbers, got a tensor of {t.dtype}")
        t = t.detach().to(torch.float64) if t.dtype != torch.float64 else t
    elif isinstance(v, bool) or not isinstance(v, numbers.Real):
        hint = "; use a tensor for several values" if isinstance(v, (list, tuple)) else ""
        raise MetricError(f"{name} must be a number or a tensor, got {type(v).__name__} "
                          f"{v!r:.40}{hint}")
    else:
        try:
            t = torch.tensor(float(v), dtype=torch.float64)
        except OverflowError:
            raise MetricError(f"{name} is too large for a float ({str(v)[:20]}...)") from None
    if not bool(torch.isfinite(t).all()):
        raise MetricError(f"{name} must be finite, got {v if t.dim() == 0 else 'a tensor with'}"
                          f"{'' if t.dim() == 0 else ' inf or nan'}")
    if bool((t < 0).any()):
        raise MetricError(f"{name} must be >= 0 (a count), got "
                          f"{float(t) if t.dim() == 0 else 'a negative entry'}")
    return t


@contextmanager
def _analysis_errors(text: str) -> Iterator[None]:
    """SymPy can fail deep inside on exotic input; the user gets a metricc error."""
    try:
        yield
    except RecursionError:
        raise MetricError("formula nests too deeply to analyse; split it with let-bindings") from None
    except MetricError:
        raise
    except (ArithmeticError, TypeError, ValueError, AttributeError, NotImplementedError) as e:
        raise MetricError(f"could not analyse formula {text.strip()!r}: {e}") from None


def compile(formula: str, *, higher_is_better: bool | None = None,
            constraints: Iterable[str] | None = None, **params: float) -> Metric:
    """Compile a formula over ``TP FP FN TN`` (or a metric name) into a :class:`Metric`.

    ``params`` give values to the formula's free parameters; named metrics have
    defaults (``fbeta``'s ``beta=1``). ``higher_is_better`` defaults to the named
    metric's direction, else ``True``. ``constraints`` (``["recall >= 0.9"]``,
    or a ``subject to`` clause in the formula) are held in ``Metric.constraints``
    and shape :meth:`Metric.loss`, :meth:`Metric.check` and
    :meth:`Metric.best_threshold` (``docs/constraints.md``).

    >>> import metricc
    >>> metricc.compile("fbeta", beta=2.0).value(tp=30, fp=5, fn=10, tn=955)
    0.7692307692307693
    """
    if not isinstance(formula, str):
        raise MetricError(f"formula must be a string, got {type(formula).__name__}")
    if constraints is not None:
        if isinstance(constraints, str) or not isinstance(constraints, Iterable):
            raise MetricError("constraints must be a list of strings, e.g. ['recall >= 0.9'], "
                              f"got {constraints!r}")
        constraints = tuple(constraints)
    # K x K parameters (a weight or cost matrix) arrive as lists, arrays or tensors.
    params = {k: _hashable(v) for k, v in params.items()}
    key = (formula, tuple(sorted((k, repr(v)) for k, v in params.items())), higher_is_better,
           constraints)
    try:
        return _compile_cached(key, formula, higher_is_better, tuple(params.items()),
                               constraints or ())
    except TypeError as e:  # unhashable parameter values
        raise MetricError(f"parameters must be numbers: {e}") from None


def _hashable(value: Any) -> Any:
    if hasattr(value, "tolist") and not isinstance(value, (int, float)):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


def _check_parameter_ranges(parsed: Formula, given: Mapping[str, float]) -> None:
    """Refuse a named metric's parameter outside its range (``fbeta`` with ``beta < 0``)."""
    for metric_name in parsed.metrics:
        metric = lookup(metric_name)
        assert metric is not None
        for param, (low, why) in metric.bounds.items():
            value = given.get(param)
            if value is not None and not isinstance(value, bool) and isinstance(value, (int, float)) \
                    and value < low:
                raise MetricError(f"{metric.name}'s {param} must be >= {low:g}, got {value!r}: {why}")


def _recompile(text: str, params: tuple[tuple[str, float], ...], higher_is_better: bool,
               constraints: tuple[str, ...] = ()) -> Metric:
    """How a K x K ``MatrixMetric`` unpickles (``metricc.matrix_metric``)."""
    return compile(text, higher_is_better=higher_is_better, constraints=constraints or None,
                   **dict(params))


def _rebuild_metric(formula: str, param_items: tuple[tuple[str, float], ...],
                    higher_is_better: bool | None, constraints: tuple[str, ...] = ()) -> Metric:
    """Unpickle a :class:`Metric`: compile it again (a cache hit if it was compiled here)."""
    return compile(formula, higher_is_better=higher_is_better,
                   constraints=constraints or None, **dict(param_items))


def _rebuild_loss(recipe: tuple[Any, ...]) -> MetricLoss:
    """Unpickle a loss module: an empty instance of its metric's (re)compiled loss class;
    pickle then restores its state (options, buffers, memory) with ``__setstate__``."""
    cls = _rebuild_loss_class(recipe)
    return cls.__new__(cls)


def _rebuild_constraint_metric(spec: tuple[Any, ...], index: int) -> Metric:
    """Unpickle the metric of constraint ``index`` of the metric ``compile(*spec)``."""
    return _rebuild_metric(*spec).constraints[index].metric


def _rebuild_loss_class(recipe: tuple[Any, ...]) -> type[MetricLoss]:
    """Unpickle a generated loss class: its metric's (re)compiled ``loss_class``.

    ``recipe`` is a metric's ``_recipe``; pickles written before recipes existed hold
    ``compile``'s arguments instead.
    """
    metric = recipe[0](*recipe[1]) if callable(recipe[0]) else _rebuild_metric(*recipe)
    return metric.loss_class


def _reduce_loss(self: MetricLoss, protocol: int) -> tuple[Any, ...]:
    """``__reduce_ex__`` of generated loss classes (pickle, ``copy.deepcopy``, ``torch.save``)."""
    return (_rebuild_loss, (type(self)._metric_recipe,), self.__dict__)  # type: ignore[attr-defined]


@lru_cache(maxsize=256)
def _compile_cached(key: Any, formula: str, higher_is_better: bool | None,
                    param_items: tuple[tuple[str, float], ...],
                    constraints: tuple[str, ...] = ()) -> Metric:
    params = dict(param_items)
    named = lookup(formula.strip())
    check_single_identifier(formula)
    with _analysis_errors(formula):
        parsed = parse(formula)
        given = {**parsed.defaults, **params}
        known = (*parsed.parameters, *getattr(parsed, "matrix_parameters", ()))
        extra = [k for k in params if k not in known]
        if extra:
            hint = suggest_all(extra, list(known))
            raise MetricError(f"unknown parameter{'s' if len(extra) > 1 else ''} "
                              f"{', '.join(map(repr, extra))}{hint}; "
                              f"this formula's parameters: {', '.join(known) or 'none'}")
        missing = [p for p in known if p not in given]
        if missing:
            hints = suggest_all(missing, known_names())
            raise MissingParameterError(
                f"formula has parameter{'s' if len(missing) > 1 else ''} "
                f"{', '.join(missing)} with no value{hints}; pass "
                + ", ".join(f"{p}=<number>" for p in missing)
                + " to metricc.compile, or fix the name if it is a typo",
                missing,
            )
        _check_parameter_ranges(parsed, given)
        direction = higher_is_better
        if direction is None:
            direction = named.higher_is_better if named else True
        name = named.name if named else None
        if name is None and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", formula.strip()):
            name = formula.strip()
        if isinstance(parsed, MatrixFormula):
            if constraints:
                raise MetricError("constraints apply to 2 x 2 metrics for now; "
                                  f"{formula.strip()!r} is a K x K metric")
            from .matrix_metric import MatrixMetric

            metric: Metric = MatrixMetric(parsed, given, name, direction)  # type: ignore[assignment]
        else:
            built: tuple[Any, ...] = ()
            if parsed.constraints or constraints:
                from .constraints import build_constraints

                built = build_constraints(parsed, constraints, _constraint_metric)
            metric = Metric(parsed, given, name, direction, built)
        # this very cache entry, for pickling
        metric._spec = (formula, param_items, higher_is_better, constraints)
        for i, c in enumerate(getattr(metric, "constraints", ())):  # none on K x K metrics
            # a constraint's side has no formula of its own to compile: it comes back
            # as the constraint of this metric
            c.metric._constraint_recipe = (_rebuild_constraint_metric, (metric._spec, i))
        return metric
