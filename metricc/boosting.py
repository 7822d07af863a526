"""Any compiled 2 x 2 or K x K metric as a gradient-boosting objective and evaluation metric.

>>> import numpy as np, metricc
>>> obj = metricc.boosting.objective(metricc.compile("f1"))
>>> grad, hess = obj.grad_hess(np.array([0.3, -1.2, 2.0]), np.array([1, 0, 1]))
>>> bool((hess > 0).all()), obj.score(np.array([0.3, -1.2, 2.0]), np.array([1, 0, 1]))
(True, 1.0)

``objective(m)`` returns a :class:`BoostObjective` whose attributes follow each library's
calling convention: ``xgboost``/``xgboost_metric`` (``xgb.train(obj=..., custom_metric=...,
maximize=obj.maximize)``), ``lightgbm``/``lightgbm_metric`` (``params["objective"]``,
``feval``), and ``sklearn`` (the ``objective=`` of ``XGBClassifier`` and ``LGBMClassifier``)
with ``xgboost_sklearn_metric``/``lightgbm_sklearn_metric`` (their ``eval_metric=``).
The math is :mod:`metricc.evaluate.boosting`; ``docs/boosting.md`` states it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import MetricError
from .evaluate.boosting import (
    binary_grad_hess,
    hard_counts,
    matrix_grad_hess,
    ovr_grad_hess,
)

if TYPE_CHECKING:
    from .facade import Metric
    from .verify.report import VerificationReport

__all__ = ["HESSIANS", "BoostObjective", "check_inputs", "matrix_parameters", "objective"]

#: ``positive`` (default): ``max(exact diagonal, |grad|)``; ``exact``: the exact diagonal.
HESSIANS = ("positive", "exact")


def objective(metric: Metric, *, num_classes: int | None = None, hessian: str = "positive",
              eps: float = 1e-7) -> BoostObjective:
    """A boosting objective and evaluation metric of a compiled metric.

    A 2 x 2 metric gives a binary objective (``(N,)`` margins, ``p = sigmoid(z)``), or with
    ``num_classes=K >= 3`` a one-vs-rest ``softprob`` objective (``(N, K)`` margins, the
    metric macro-averaged over classes); a K x K metric gives a ``softprob`` objective
    (``K`` from the margins, ``num_classes`` or the metric's parameters). ``hessian``:
    ``"positive"`` (``max(exact, |grad|)``, what trees need) or ``"exact"`` (the exact
    diagonal, which can be negative). ``eps`` guards the soft metric as in ``loss()``.
    """
    return BoostObjective(metric, num_classes=num_classes, hessian=hessian, eps=eps)


class BoostObjective:
    """A metric's objective and evaluation metric in each boosting library's convention."""

    def __init__(self, metric: Metric, *, num_classes: int | None = None,
                 hessian: str = "positive", eps: float = 1e-7) -> None:
        from .runtime.options import check_number

        statistic = metric.statistic.name
        if statistic == "curve":
            raise MetricError("a curve metric (AUROC, AP) has no boosting objective here: its "
                              "soft curve's gradient is not exact; boost a 2 x 2 or K x K metric "
                              "and watch the curve metric with metric.score on a validation set")
        if metric.constraints:
            raise MetricError("a metric with constraints has no boosting objective; boost the "
                              "plain metric and pick the operating point with best_threshold")
        if hessian not in HESSIANS:
            raise MetricError(f"hessian must be one of {', '.join(map(repr, HESSIANS))}, got "
                              f"{hessian!r}")
        if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(
                num_classes, int) or num_classes < 2):
            raise MetricError(f"num_classes must be an integer >= 2, got {num_classes!r}")
        self.metric = metric
        self.eps = check_number("eps", eps)
        self.hessian = hessian
        self.kind = "matrix" if statistic == "matrix" else (
            "one_vs_rest" if num_classes not in (None, 2) else "binary")
        fixed = getattr(metric, "num_classes", None)
        if fixed is not None and num_classes is not None and fixed != num_classes:
            raise MetricError(f"this metric's K x K parameters are {fixed} x {fixed}, but "
                              f"num_classes={num_classes}")
        self.num_classes = fixed or num_classes
        #: The metric's name in the libraries' logs, and whether early stopping maximises it.
        self.name = metric.name or "metric"
        self.maximize = bool(metric.higher_is_better)
        self._sign = -1.0 if metric.higher_is_better else 1.0
        self._derivatives: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # The built kernels are local functions: pickles (joblib workers, a pickled
        # XGBClassifier) carry the metric and options and build them again on first use.
        return {**self.__dict__, "_derivatives": None}

    def __repr__(self) -> str:
        return (f"BoostObjective({self.name!r}, kind={self.kind!r}, hessian={self.hessian!r}, "
                f"num_classes={self.num_classes})")

    # --- the kernels ------------------------------------------------------------------
    def derivatives(self) -> Any:
        """The metric's derivatives at one confusion matrix, as :mod:`metricc.evaluate.boosting`
        reads them (built once: SymPy's second derivatives for 2 x 2 metrics, the Jacobian of
        the generated gradient kernel for K x K ones)."""
        if self._derivatives is None:
            self._derivatives = (_matrix_derivatives if self.kind == "matrix"
                                 else _counts_curvature)(self.metric, self.eps)
        return self._derivatives

    # --- the math ---------------------------------------------------------------------
    def grad_hess(self, margins: Any, labels: Any, weight: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-row gradient and Hessian diagonal of ``W (1 - metric)`` w.r.t. the raw margins,
        shaped like ``margins``."""
        grad, hess, _ = self._run(margins, labels, weight, self.hessian == "exact")
        return grad, hess

    def loss(self, margins: Any, labels: Any, weight: Any = None) -> float:
        """The relaxed loss ``W (1 - metric)`` (``W metric`` where lower is better) that
        :meth:`grad_hess` differentiates."""
        return self._run(margins, labels, weight, True)[2]

    def _run(self, margins: Any, labels: Any, weight: Any, exact: bool) -> tuple[Any, Any, float]:
        z, y, w = self._inputs(margins, labels, weight)
        if self.kind == "binary":
            grad, hess, loss = binary_grad_hess(z, y, w, self.derivatives(),
                                                self._sign, exact)
        else:
            run = matrix_grad_hess if self.kind == "matrix" else ovr_grad_hess
            grad, hess, loss = run(z, y, w, self.derivatives(), self._sign, exact)
        shape = np.shape(margins)
        return grad.reshape(shape), hess.reshape(shape), loss

    def score(self, margins: Any, labels: Any, weight: Any = None) -> float:
        """The exact metric on the hard decisions of ``margins`` (``z >= 0``; the argmax over
        classes), with sample weights counted; a class or metric that is undefined (0/0)
        scores 0, as in scikit-learn. Equals ``metric.score`` on the same predictions."""
        z, y, w = self._inputs(margins, labels, weight)
        m: Any = self.metric
        if self.kind == "binary":
            return float(m.value(*hard_counts((z >= 0).astype(np.float64), y, w),
                                 zero_division=0.0))
        k = z.shape[1]
        pred = z.argmax(axis=1)
        matrix = np.bincount(y * k + pred, weights=w, minlength=k * k).reshape(k, k)
        if self.kind == "matrix":
            return float(m.value(matrix, zero_division=0.0))
        values = []
        for c in range(k):  # one-vs-rest; classes with no target and no prediction skipped
            tp = matrix[c, c]
            fn, fp = matrix[c].sum() - tp, matrix[:, c].sum() - tp
            if tp + fn + fp > 0:
                values.append(m.value(tp, fp, fn, matrix.sum() - tp - fp - fn, zero_division=0.0))
        return float(np.mean(values)) if values else 0.0

    def _inputs(self, margins: Any, labels: Any, weight: Any) -> tuple[Any, Any, Any]:
        """Margins (float64), labels and weights (None for none) as the math reads them."""
        return check_inputs(margins, labels, weight, self.kind, self.num_classes)

    # --- XGBoost ----------------------------------------------------------------------
    def xgboost(self, predt: Any, dtrain: Any) -> tuple[np.ndarray, np.ndarray]:
        """``xgb.train(params, dtrain, obj=objective.xgboost)``: raw margins (``(N, K)`` for
        multiclass), labels and weights from the ``DMatrix``."""
        return self.grad_hess(predt, dtrain.get_label(), _weight(dtrain))

    def xgboost_metric(self, predt: Any, dmatrix: Any) -> tuple[str, float]:
        """``custom_metric=`` of ``xgb.train``: ``(name, score)``; pass ``maximize=objective.maximize``."""
        return self.name, self.score(predt, dmatrix.get_label(), _weight(dmatrix))

    # --- LightGBM ---------------------------------------------------------------------
    def lightgbm(self, preds: Any, train_data: Any) -> tuple[np.ndarray, np.ndarray]:
        """``params["objective"] = objective.lightgbm`` in ``lgb.train`` (LightGBM 4: raw
        scores, ``(N, K)`` for multiclass with ``num_class=K``)."""
        return self.grad_hess(preds, train_data.get_label(), _weight(train_data))

    def lightgbm_metric(self, preds: Any, eval_data: Any) -> tuple[str, float, bool]:
        """``feval=`` of ``lgb.train``: ``(name, score, is_higher_better)``."""
        return self.name, self.score(preds, eval_data.get_label(), _weight(eval_data)), self.maximize

    # --- the scikit-learn APIs --------------------------------------------------------
    def sklearn(self, y_true: Any, y_pred: Any, sample_weight: Any = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """``objective=`` of ``XGBClassifier`` and ``LGBMClassifier`` (both pass raw margins)."""
        return self.grad_hess(y_pred, y_true, sample_weight)

    @property
    def xgboost_sklearn_metric(self) -> Any:
        """``eval_metric=`` of ``XGBClassifier`` (a function named after the metric, as the logs
        show it); with early stopping pass
        ``callbacks=[xgb.callback.EarlyStopping(rounds, maximize=objective.maximize)]``."""
        def metric(y_true: Any, y_pred: Any, sample_weight: Any = None) -> float:
            return self.score(y_pred, y_true, sample_weight)

        metric.__name__ = metric.__qualname__ = self.name
        return metric

    def lightgbm_sklearn_metric(self, y_true: Any, y_pred: Any, weight: Any = None
                                ) -> tuple[str, float, bool]:
        """``eval_metric=`` of ``LGBMClassifier.fit``: ``(name, score, is_higher_better)``."""
        return self.name, self.score(y_pred, y_true, weight), self.maximize

    # --- verification -----------------------------------------------------------------
    def verify(self, rows: int = 24, seed: int = 0, *,
               raise_on_failure: bool = True) -> VerificationReport:
        """Gradient and exact Hessian diagonal against torch autograd (a Hessian diagonal of an
        independent torch loss built from the metric's value kernel) and against central
        finite differences, in float64, with and without sample weights; the positive
        Hessian is checked to be ``max(exact, |grad|) > 0``. See :mod:`metricc.verify.boosting`.
        """
        from .verify.boosting import BoostSubject, verify_boost

        m: Any = self.metric
        kernel = m.loss_class.matrix_value if self.kind == "matrix" else m.loss_class.metric_value
        params = tuple(matrix_parameters(m)) if self.kind == "matrix" else ()
        subject = BoostSubject(self.kind, kernel, params, self.eps, self._sign,
                               self.num_classes or 3, self._run)
        return verify_boost(subject, rows=rows, seed=seed, raise_on_failure=raise_on_failure)


def _weight(data: Any) -> Any:
    """A DMatrix's or Dataset's weights: None where it has none (XGBoost gives an empty array)."""
    w = data.get_weight()
    return None if w is None or np.size(w) == 0 else w


def check_inputs(margins: Any, labels: Any, weight: Any, kind: str,
                 num_classes: int | None) -> tuple[Any, Any, Any]:
    """Margins (float64), labels and weights (None for none), or a :class:`MetricError`."""
    z = np.asarray(margins, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    if kind == "binary":
        if z.ndim == 2 and z.shape[1] == 1:
            z = z[:, 0]
        if z.ndim != 1:
            raise MetricError(f"a binary objective takes (N,) margins, got shape {z.shape}; for K "
                              "classes pass num_classes=K (one-vs-rest) or boost a K x K metric")
    elif z.ndim != 2 or z.shape[1] < 2:
        raise MetricError(f"a multiclass objective takes (N, K) margins (XGBoost 2+ and LightGBM "
                          f"4 give them), got shape {z.shape}")
    elif num_classes is not None and z.shape[1] != num_classes:
        raise MetricError(f"the margins have {z.shape[1]} classes, the objective {num_classes}; "
                          f"set the booster's num_class to {num_classes}")
    if z.shape[0] != y.size or y.size == 0:
        raise MetricError(f"{z.shape[0]} rows of margins but {y.size} labels")
    if not np.isfinite(z).all():
        raise MetricError("the margins hold NaN or infinity: the booster diverged; lower the "
                          "learning rate or raise min_child_weight / reg_lambda")
    if kind == "binary" and not ((y == 0.0) | (y == 1.0)).all():
        raise MetricError("a binary objective takes 0/1 labels; for K classes pass "
                          "num_classes=K or boost a K x K metric")
    if kind != "binary":
        k = z.shape[1]
        if not (np.isin(y, np.arange(k)).all()):
            raise MetricError(f"multiclass labels must be class indices 0 .. {k - 1}")
        y = y.astype(np.int64)
    w = None
    if weight is not None and np.size(weight) > 0:
        w = np.asarray(weight, dtype=np.float64).reshape(-1)
        if w.size != y.size:
            raise MetricError(f"{w.size} sample weights for {y.size} rows")
        if not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
            raise MetricError("sample weights must be finite, >= 0, and not all 0")
    return z, y, w


def _counts_curvature(metric: Any, eps: float) -> Any:
    """``(TP, FP, FN, TN) -> value, g1, g0, h1, h0`` from SymPy's second derivatives."""
    import torch

    from .analysis.budget import limit
    from .analysis.statistics import analysis_errors
    from .emit.counts import CURVATURE_KERNEL, emit_curvature_kernel
    from .emit.loss_class import build_kernel

    with limit(), analysis_errors(metric.text):
        kernel = build_kernel(emit_curvature_kernel(metric.expr), CURVATURE_KERNEL)

    def curvature(*counts: Any) -> tuple[np.ndarray, ...]:
        t = [torch.as_tensor(np.asarray(c, dtype=np.float64)) for c in counts]
        return tuple(np.asarray(v, dtype=np.float64) for v in kernel(*t, eps))

    return curvature


def matrix_parameters(metric: Any) -> list[Any]:
    """A K x K metric's numeric parameters as float64 tensors (its kernels' arguments after eps)."""
    import torch

    return [torch.tensor(metric.matrix_values[p], dtype=torch.float64)
            for p in metric.matrix_parameters]


def _matrix_derivatives(metric: Any, eps: float) -> Any:
    """``C -> value, dF/dC, H`` with ``H[a, b, d] = d^2 F / dC[a, b] dC[a, d]``: the generated
    gradient kernel and its Jacobian (torch autograd through that kernel)."""
    import torch

    kernel = metric.loss_class.matrix_and_gradient
    params = matrix_parameters(metric)

    def derivatives(C: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        c = torch.as_tensor(C, dtype=torch.float64)
        value, G = kernel(c.unsqueeze(0), eps, *params)
        J = torch.autograd.functional.jacobian(
            lambda x: kernel(x.unsqueeze(0), eps, *params)[1][0], c)
        k = c.shape[0]
        idx = torch.arange(k)
        H = J[idx, :, idx, :]  # (a, b, d): the row-a block
        return float(value[0]), G[0].numpy(), H.numpy()

    return derivatives
