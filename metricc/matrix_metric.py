"""``metricc.compile`` for K x K formulas: the :class:`MatrixMetric` facade.

Exact scores on hard labels, the loss module, ``check()`` and ``verify()`` for a
metric over the whole confusion matrix (``docs/matrix.md``).
"""

from __future__ import annotations

import builtins
import math
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sympy
from sympy import Indexed, Sum

from .analysis.matrix import gradient
from .emit.matrix import emit_matrix_kernels
from .errors import MetricError
from .language.matrix import MatrixFormula, display
from .language.parse import parse
from .language.symbols import A, B, C

if TYPE_CHECKING:
    from .runtime.matrix import MatrixLoss
    from .verify.counts import VerificationReport

__all__ = ["MatrixCheckReport", "MatrixMetric", "matrix_parameter", "parse_index_formula"]


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
    rows = []
    for r in value:
        row = []
        for v in r:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise MetricError(f"parameter {name} must hold finite numbers, got {v!r}")
            row.append(float(v))
        rows.append(tuple(row))
    if len(rows) < 2:
        raise MetricError(f"parameter {name} must be at least 2 x 2")
    return tuple(rows)


def _as_rational(name: str, value: Any) -> sympy.Expr:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MetricError(f"parameter {name} must be a finite number, got {value!r}")
    return sympy.Rational(str(value)) if isinstance(value, float) else sympy.Integer(value)


class MatrixMetric:
    """A compiled K x K metric: index-form SymPy, its gradient, exact scores and losses.

    >>> import metricc
    >>> m = metricc.compile("multiclass_accuracy")
    >>> m.score([0, 1, 2, 2], [0, 2, 2, 1], num_classes=3)
    0.5
    >>> m.gradient_text
    'delta(a, b)/n - sum(i, C[i, i])/n**2'
    """

    is_matrix = True

    def __init__(self, formula: MatrixFormula, params: Mapping[str, Any], name: str | None,
                 higher_is_better: bool) -> None:
        self.formula = formula
        self.text = formula.text
        self.name = name
        self.higher_is_better = higher_is_better
        self.parameters = dict(params)
        expr = formula.expr
        scalars = {sympy.Symbol(k): _as_rational(k, params[k]) for k in formula.parameters}
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
        self.expr: sympy.Expr = expr.xreplace(subs) if subs else expr
        sizes = {len(v) for v in self.matrix_values.values()}
        if len(sizes) > 1:
            raise MetricError(f"the K x K parameters have different sizes: {sorted(sizes)}")
        #: The number of classes, when a parameter matrix fixes it.
        self.num_classes: int | None = sizes.pop() if sizes else None
        self._gradient: sympy.Expr | None = None
        self._source: str | None = None
        self._loss_class: type[MatrixLoss] | None = None
        self._check: MatrixCheckReport | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Travels as its formula and parameters, compiled again (cached) where it lands, by
        # the function a 2x2 Metric pickles with. metricc.compile made this object, so its
        # module is loaded (importing it here would be an import cycle).
        recompile = sys.modules["metricc.metric"]._recompile
        return (recompile, (self.text, tuple(sorted(self.parameters.items())),
                            self.higher_is_better))

    def metric(self, *args: Any, **kwargs: Any) -> Any:
        """Not available for K x K formulas yet; :meth:`score` gives the exact value."""
        raise MetricError("a torchmetrics Metric of a K x K formula is not available yet; "
                          "use score(preds, target) on the whole evaluation set")

    def best_threshold(self, *args: Any, **kwargs: Any) -> Any:
        """Not applicable: a K x K metric scores the argmax over classes, not a threshold."""
        raise MetricError("best_threshold applies to binary decisions; a K x K metric scores "
                          "the argmax over classes")

    def __repr__(self) -> str:
        label = self.name or self.text.strip()
        return (f"MatrixMetric({label!r}, expr={display(self.expr)}, "
                f"higher_is_better={self.higher_is_better})")

    # --- symbolic --------------------------------------------------------------------------
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
        return [s.expr for s in _singularities(self.expr) if s.relation == "= 0"]

    @property
    def kernels_source(self) -> str:
        if self._source is None:
            self._source = emit_matrix_kernels(self.expr, self.matrix_parameters)
        return self._source

    @property
    def loss_class(self) -> type[MatrixLoss]:
        """The :class:`metricc.runtime.matrix.MatrixLoss` subclass holding the kernels."""
        if self._loss_class is None:
            import torch

            from .emit.loss_class import own_copy, remember_source
            from .runtime import matrix as matrix_runtime
            from .runtime.matrix import MatrixLoss

            source = self.kernels_source
            filename = remember_source(f"<metricc matrix {abs(hash(source)):x}>", source)
            namespace: dict[str, Any] = {"torch": torch}
            namespace.update({k: getattr(matrix_runtime, k) for k in (
                "_num_classes", "_index", "_entry", "_sum", "_delta", "_present", "_as_rows",
                "_as_matrices")})
            # The source is generated from validated SymPy trees only (metricc.matrix).
            exec(builtins.compile(source, filename, "exec"), namespace)
            attrs = {
                "matrix_value": staticmethod(namespace["matrix_value"]),
                "matrix_and_gradient": staticmethod(namespace["matrix_and_gradient"]),
                "formula": self.text.strip(),
                "source": source,
                "higher_is_better": self.higher_is_better,
                "matrix_parameters": self.matrix_parameters,
                "matrix_values": tuple(self.matrix_values[k] for k in self.matrix_parameters),
                "__module__": "metricc.generated",
                "__doc__": f"Loss for the K x K metric {self.text.strip()!r}.",
            }
            name = "".join(p.capitalize() for p in (self.name or "matrix_metric").split("_")) + "Loss"
            # A forward of its own per class: torch.compile counts recompiles per code object.
            attrs["forward"] = own_copy(MatrixLoss.forward, f"{name}.forward")
            self._loss_class = type(name, (MatrixLoss,), attrs)
        return self._loss_class

    def loss(self, relaxation: str = "softmax", *, warn_monotonicity: bool = True,
             **options: Any) -> MatrixLoss:
        """A ``torch.nn.Module``: ``1 - metric`` (or the metric, lower is better) on the soft
        K x K matrix; options as in :class:`metricc.runtime.matrix.MatrixLoss`.

        >>> import torch, metricc
        >>> loss = metricc.compile("quadratic_kappa").loss("linear", from_logits=True)
        >>> x = torch.randn(8, 4, requires_grad=True)
        >>> loss(x, torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])).backward()
        """
        import inspect

        from .language.parse import suggest

        allowed = [p for p in inspect.signature(self.loss_class.__init__).parameters
                   if p != "self"]
        for key in options:
            if key not in allowed:
                hint = ""
                if key in ("mode", "average", "classes", "class_weights"):
                    hint = " (a K x K metric is one metric of the whole matrix: no classes " \
                           "to pick or average)"
                raise MetricError(f"unknown loss option {key!r}{suggest(key, allowed)}{hint}; "
                                  f"options are {', '.join(allowed)}")
        module = self.loss_class(relaxation, **options)
        if warn_monotonicity:
            wrong = self.check().wrong_way()
            if wrong:
                import warnings

                from .errors import MetricWarning

                warnings.warn(f"the loss for {self.name or self.text.strip()!r} would train "
                              f"the wrong way: {wrong}; silence with warn_monotonicity=False",
                              MetricWarning, stacklevel=2)
        return module

    # --- numeric ---------------------------------------------------------------------------
    def value(self, matrix: Any, *, zero_division: float | None = None) -> Any:
        """The exact metric of a ``(K, K)`` confusion matrix (rows true, columns predicted),
        or of each in an ``(R, K, K)`` batch (a float64 tensor then).

        >>> import metricc
        >>> metricc.compile("quadratic_kappa").value([[5, 1], [2, 4]])
        0.5
        """
        import torch

        m = torch.as_tensor(matrix, dtype=torch.float64)
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
        params = [torch.tensor(self.matrix_values[p], dtype=torch.float64)
                  for p in self.matrix_parameters]
        out = self.loss_class.matrix_value(m, 0.0, *params)
        bad = ~torch.isfinite(out)
        if bool(bad.any()):
            if zero_division is None:
                where = " or ".join(f"{display(d)} = 0" for d in self.undefined) or \
                    "this matrix"
                raise MetricError(f"the metric is undefined here ({where}); pass "
                                  "zero_division=<value> to choose what such a case scores")
            out = torch.where(bad, torch.full_like(out, float(zero_division)), out)
        return float(out[0]) if single else out

    def score(self, preds: Any, target: Any, *, num_classes: int | None = None,
              ignore_index: int | None = None, zero_division: float | None = None,
              mode: str = "multiclass", **unused: Any) -> float:
        """The exact metric on hard labels.

        ``preds``: ``(N, K, *)`` scores (argmax over dim 1) or ``(N, *)`` class
        labels with ``num_classes``; ``target``: ``(N, *)`` class indices;
        ``ignore_index`` drops elements with that target.
        """
        import torch

        if mode != "multiclass":
            raise MetricError(f"a K x K metric scores multiclass labels; mode={mode!r} does not "
                              "apply")
        if unused:
            raise MetricError(f"score() of a K x K metric takes no {', '.join(unused)}")
        p = torch.as_tensor(preds)
        t = torch.as_tensor(target, device=p.device)
        if p.is_floating_point():
            if p.dim() < 2:
                raise MetricError(f"preds must be scores (N, K, *) or integer labels (N, *) "
                                  f"with num_classes; got floating-point preds of shape "
                                  f"{tuple(p.shape)}")
            k = p.shape[1]
            if num_classes is not None and num_classes != k:
                raise MetricError(f"num_classes={num_classes} but preds has {k} classes on "
                                  "dim 1")
            pred = p.argmax(1)
        else:
            if num_classes is None:
                num_classes = self.num_classes
            if num_classes is None:
                raise MetricError("integer preds are class labels: pass num_classes=<K>")
            k = int(num_classes)
            pred = p
        if k < 2:
            raise MetricError(f"a K x K metric needs K >= 2 classes, got {k}")
        if t.shape != pred.shape or t.is_floating_point():
            raise MetricError(f"target must be integer class indices of shape "
                              f"{tuple(pred.shape)}, got {t.dtype} of shape {tuple(t.shape)}")
        keep = torch.ones_like(t, dtype=torch.bool) if ignore_index is None \
            else t != ignore_index
        t, pred = t[keep].long(), pred[keep].long()
        if t.numel() == 0:
            raise MetricError("score() needs at least one (not ignored) element")
        for what, v in (("target", t), ("preds", pred)):
            if bool(((v < 0) | (v >= k)).any()):
                raise MetricError(f"{what} must hold class indices in 0..{k - 1}")
        counts = torch.bincount(t * k + pred, minlength=k * k).to(torch.float64)
        return float(self.value(counts.view(k, k), zero_division=zero_division))

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
        if self._check is None:
            self._check = _check(self)
        return self._check

    def verify(self, **options: Any) -> VerificationReport:
        """Prove the generated kernels against SymPy for small K, and compare the loss's
        gradient with autograd and finite differences; see :mod:`metricc.verify.matrix`."""
        from .verify.matrix import verify_matrix

        return verify_matrix(self, **options)


# --- check -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MatrixSingularity:
    expr: sympy.Expr
    relation: str
    reason: str

    def __str__(self) -> str:
        return f"{display(self.expr)} {self.relation}  ({self.reason})"


def _singularities(expr: sympy.Expr) -> list[MatrixSingularity]:
    from .analysis.matrix import _nonnegative, _positive_fallback

    out: list[MatrixSingularity] = []
    seen: set[sympy.Expr] = set()
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and node.exp.is_number and node.base.has(C):
            base = node.base
            if base in seen:
                continue
            if node.exp.is_negative:
                seen.add(base)
                if isinstance(base, sympy.Add) and _positive_fallback(base) and \
                        len(base.args) == 3:
                    continue  # x + 1 - present(x) never vanishes
                out.append(MatrixSingularity(base, "= 0", "division by zero"))
            elif not node.exp.is_integer and not _nonnegative(base):
                seen.add(base)
                out.append(MatrixSingularity(base, "< 0", "root of a negative number"))
        elif isinstance(node, sympy.log) and node.args[0].has(C):
            out.append(MatrixSingularity(node.args[0], "= 0", "log of 0"))
    return out


@dataclass(frozen=True)
class MatrixCheckReport:
    """What :meth:`MatrixMetric.check` found.

    ``direction`` says how the metric moves when one sample of true class ``a``
    raises its true-class score, moving mass from ``C[a, b]`` to ``C[a, a]``: the
    directional derivative ``G[a, a] - G[a, b]``, evaluated at ``samples`` random
    matrices (K = 2..6, dense and sparse): ``increasing``, ``decreasing``,
    ``constant`` or ``mixed`` (then ``witness`` is a matrix where it has the
    unexpected sign). Sampled, not proved.
    """

    expr: sympy.Expr
    undefined: tuple[MatrixSingularity, ...]
    direction: str
    samples: int
    witness: list[list[float]] | None
    sampled_range: tuple[float, float] | None
    higher_is_better: bool

    def wrong_way(self) -> dict[str, str]:
        bad = "decreasing" if self.higher_is_better else "increasing"
        if self.direction != bad:
            return {}
        return {"C[a,a]": f"the metric is {bad} as a sample's true-class score rises, so "
                          "minimising the loss lowers the true-class scores"}

    def __str__(self) -> str:
        lines = [f"metric: {display(self.expr)}"]
        if self.undefined:
            lines.append("undefined where:")
            lines.extend(f"  {s}" for s in self.undefined)
        else:
            lines.append("undefined where: nowhere (for nonnegative matrices)")
        lines.append(
            f"raising a sample's true-class score (mass from C[a,b] to C[a,a]): "
            f"{self.direction} (sampled at {self.samples} matrices, K = 2..6)")
        if self.witness is not None:
            lines.append(f"  e.g. at C = {self.witness}")
        if self.sampled_range is not None:
            lines.append("range: sampled values {:.4g} .. {:.4g}".format(*self.sampled_range))
        direction = "higher is better" if self.higher_is_better else "lower is better"
        if self.wrong_way():
            lines.append(f"as a loss ({direction}): TRAINS THE WRONG WAY")
        else:
            lines.append(f"as a loss ({direction}): no feasible move trains the wrong way")
        return "\n".join(lines)


_CHECK_SAMPLES = 240


def _check(metric: MatrixMetric) -> MatrixCheckReport:
    import torch

    rng = random.Random(20261130)
    pos = neg = 0
    witness: list[list[float]] | None = None
    values: list[float] = []
    sizes = [metric.num_classes] if metric.num_classes else [2, 3, 4, 5, 6]
    params = [torch.tensor(metric.matrix_values[p], dtype=torch.float64)
              for p in metric.matrix_parameters]
    kernel = metric.loss_class.matrix_and_gradient
    for n in range(_CHECK_SAMPLES):
        k = sizes[n % len(sizes)]
        sparse = n % 3 == 0
        m = torch.tensor([[0.0 if sparse and rng.random() < 0.4 else
                           round(10 ** rng.uniform(-1, 2), 3) for _ in range(k)]
                          for _ in range(k)], dtype=torch.float64)
        with torch.no_grad():
            v, g = kernel(m.unsqueeze(0), 0.0, *params)
        if not bool(torch.isfinite(v).all() and torch.isfinite(g).all()):
            continue
        values.append(float(v[0]))
        g = g[0]
        d = g.diagonal().unsqueeze(1) - g  # d[a, b] = G[a, a] - G[a, b]
        off = ~torch.eye(k, dtype=torch.bool) & (m > 0)
        d = d[off]
        if d.numel() == 0:
            continue
        tol = 1e-12 * max(1.0, float(g.abs().max()))
        up, down = bool((d > tol).any()), bool((d < -tol).any())
        pos += up
        neg += down
        unexpected = down if metric.higher_is_better else up
        if unexpected and witness is None:
            witness = m.tolist()
    direction = ("mixed" if pos and neg else "increasing" if pos else
                 "decreasing" if neg else "constant")
    if direction in ("increasing", "decreasing", "constant"):
        witness = None
    return MatrixCheckReport(metric.expr, tuple(_singularities(metric.expr)), direction,
                             _CHECK_SAMPLES, witness,
                             (min(values), max(values)) if values else None,
                             metric.higher_is_better)
