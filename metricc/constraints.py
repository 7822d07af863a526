"""Constraints on a compiled metric: ``precision subject to recall >= 0.9``.

A constraint is ``lhs >= rhs`` or ``lhs <= rhs``, each side a number, a count,
a named metric or any formula over them. It is normalised to ``metric op bound``:
with a constant side that constant is the bound (``recall >= 0.9``; a constant on
the left is moved right, flipping the comparison), otherwise the metric is
``lhs - rhs`` and the bound 0 (``recall >= precision``).

A :class:`~metricc.Metric` compiled with constraints (``metricc.compile(...,
constraints=[...])`` or a formula with a ``subject to`` clause) holds them in
``Metric.constraints``; its ``loss()`` is then a
:class:`~metricc.runtime.constrained.ConstrainedLoss` and its ``check()`` also
says whether each constraint can be met. This module needs no ``Metric``: the
caller passes the function that compiles a constraint's side.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import sympy

from .errors import MetricError, MetricSyntaxError
from .language.parse import Formula, ParsedConstraint, parse_constraint
from .language.symbols import COUNTS

__all__ = ["Constraint", "ConstraintCheck", "ConstraintMethods", "ConstraintsCheckReport",
           "build_constraints", "check_constraint", "constrained_loss", "verify_constraints"]

#: ``(formula, higher_is_better) -> compiled metric``: how a constraint's side is compiled.
MetricFactory = Callable[[Formula, bool], Any]

_TP, _FP, _FN, _TN = COUNTS.values()


@dataclass(frozen=True)
class Constraint:
    """``metric op bound``: ``op`` is ``">="`` or ``"<="``, ``text`` the constraint as written.

    >>> import metricc
    >>> c = metricc.compile("precision", constraints=["recall >= 0.9"]).constraints[0]
    >>> c.text, c.metric.expr, c.op, c.bound
    ('recall >= 0.9', TP/(FN + TP), '>=', 0.9)
    >>> c.satisfied(c.metric.value(tp=9, fn=1))
    True
    """

    text: str
    #: the compiled :class:`~metricc.Metric` of the normalised left side
    metric: Any
    op: str
    bound: float
    exact_bound: sympy.Expr

    @property
    def sense(self) -> int:
        """``+1`` for ``>=``, ``-1`` for ``<=``."""
        return 1 if self.op == ">=" else -1

    def violation(self, value: float) -> float:
        """How far ``value`` is on the wrong side of the bound (``<= 0`` when met)."""
        return self.sense * (self.bound - value)

    def satisfied(self, value: float) -> bool:
        """Whether ``value`` meets the constraint (an undefined ``nan`` does not)."""
        return bool(self.violation(value) <= 0)

    def __str__(self) -> str:
        return self.text


def _constraint(parsed: ParsedConstraint, source: str, make_metric: MetricFactory) -> Constraint:
    """Normalise one parsed constraint and compile its metric."""

    def fail(message: str) -> MetricSyntaxError:
        return MetricSyntaxError(message, source, parsed.line, parsed.column)

    counts = set(COUNTS.values())
    lhs, rhs, op = parsed.lhs, parsed.rhs, parsed.op
    if not lhs.free_symbols & counts and not rhs.free_symbols & counts:
        raise fail(f"constraint '{parsed.text}' compares two constants; one side must depend "
                   "on the counts (a metric such as recall)")
    if not lhs.free_symbols & counts:
        lhs, rhs, op = rhs, lhs, ("<=" if op == ">=" else ">=")
    if rhs.free_symbols & counts:
        expr, bound = lhs - rhs, sympy.Integer(0)
    else:
        expr, bound = lhs, rhs
    if bound.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo) or not bound.is_extended_real:
        raise fail(f"the bound of constraint '{parsed.text}' is {bound}, not a finite real number")
    try:
        metric = make_metric(Formula(parsed.text, expr, ()), op == ">=")
    except MetricError as e:
        raise fail(f"constraint '{parsed.text}': {e}") from None
    return Constraint(parsed.text, metric, op, float(bound), bound)


def build_constraints(formula: Formula | None, extra: Iterable[str],
                      make_metric: MetricFactory) -> tuple[Constraint, ...]:
    """The constraints of ``formula``'s ``subject to`` clause, then those of ``extra``."""
    if isinstance(extra, str):
        raise MetricError("constraints must be a list of strings, e.g. ['recall >= 0.9'], "
                          f"not one string {extra!r}")
    out = [] if formula is None else [_constraint(p, formula.text, make_metric)
                                      for p in formula.constraints]
    for text in extra:
        out.append(_constraint(parse_constraint(text), text, make_metric))
    _refuse_duplicates(out)
    return tuple(out)


def _refuse_duplicates(constraints: list[Constraint]) -> None:
    """A constraint given twice (the same normalised metric, comparison and bound, however
    written) would count twice in the loss's penalty and its multipliers: refuse it."""
    seen: dict[tuple[Any, ...], str] = {}
    for c in constraints:
        key = (sympy.simplify(c.metric.expr), c.op, c.exact_bound)
        if key in seen:
            same = (f"'{c.text}' twice" if seen[key] == c.text
                    else f"'{seen[key]}' and '{c.text}', the same constraint")
            raise MetricError(f"the constraints list {same}; give each constraint once")
        seen[key] = c.text


# ----------------------------------------------------------------------------- check
@dataclass(frozen=True)
class ConstraintCheck:
    """Whether one constraint can be met by moving predictions the right way.

    ``positives`` / ``negatives`` say how the constrained metric moves as a
    positive's prediction rises (one unit from FN to TP) and as a negative's
    falls (FP to TN): ``increasing``, ``decreasing``, ``constant``, ``mixed`` or
    ``unknown``. ``best`` is its value at perfect predictions (over ``P`` and
    ``N``); ``met_by_right_moves`` is ``True`` when perfect predictions meet the
    bound for every class balance, ``False`` when they never do, ``None`` when
    it depends on the balance or is unknown. ``method``: ``symbolic`` (proved)
    or ``sampled``.
    """

    constraint: Constraint
    positives: str
    negatives: str
    best: sympy.Expr
    met_by_right_moves: bool | None
    method: str

    def __str__(self) -> str:
        c = self.constraint
        want = "increasing" if c.op == ">=" else "decreasing"
        moves = (f"as a positive's prediction rises it is {self.positives}, as a negative's "
                 f"falls it is {self.negatives}")
        if self.positives == self.negatives == "constant":
            return f"{c}: does not depend on the predictions; no training can move it"
        if self.met_by_right_moves is False:
            verdict = (f"CANNOT be met: even perfect predictions give {self.best}, "
                       f"not {c.op} {c.bound:g}")
        elif self.met_by_right_moves is None:
            verdict = (f"met at perfect predictions only for some class balances "
                       f"(there it is {self.best})")
        else:
            verdict = f"can be met: perfect predictions give {self.best}"
        wrong = [d for d in (self.positives, self.negatives) if d not in (want, "constant")]
        note = (f"; it needs the metric {want}, so right moves may push it the wrong way"
                if wrong else "; right moves push it toward the bound")
        return f"{c}: {verdict} ({self.method}); {moves}{note}"


def _direction(d: sympy.Expr) -> tuple[str, str]:
    from .analysis.counts_check import sampled_direction
    from .analysis.counts_sign import positive_form, proven_sign

    if d == 0:
        return "constant", "symbolic"
    sampled = sampled_direction(d)
    if sampled == "mixed":
        return "mixed", "sampled"
    s = proven_sign(positive_form(d))
    if s is not None:
        return {1: "increasing", -1: "decreasing", 0: "constant"}[s], "symbolic"
    return sampled, "sampled"


def _balances() -> list[tuple[float, float]]:
    rng = random.Random(20240607)
    return [(1.0, 1.0), (1.0, 99.0), (99.0, 1.0)] + [
        (round(10 ** rng.uniform(0, 4)), round(10 ** rng.uniform(0, 4))) for _ in range(40)]


def check_constraint(c: Constraint) -> ConstraintCheck:
    """:class:`ConstraintCheck` of ``c``: the directions along right moves and the best value."""
    from .analysis.counts_sign import positive_form, proven_sign

    e = c.metric.expr
    grad = c.metric.gradient
    pos, m1 = _direction(sympy.simplify(grad["TP"] - grad["FN"]))
    neg, m2 = _direction(sympy.simplify(grad["TN"] - grad["FP"]))
    P, N = sympy.Symbol("P", positive=True), sympy.Symbol("N", positive=True)
    best = sympy.simplify(e.xreplace({_TP: P, _FN: sympy.Integer(0), _FP: sympy.Integer(0),
                                      _TN: N}))
    gap = sympy.simplify(c.sense * (best - c.exact_bound))
    s = proven_sign(positive_form(gap.xreplace({P: _TP, N: _TN})))
    method = "symbolic" if "sampled" not in (m1, m2) else "sampled"
    if s is not None:
        met: bool | None = s >= 0
    else:
        method = "sampled"
        f = sympy.lambdify((P, N), gap, modules=["math"])
        seen = []
        for p, n in _balances():
            try:
                v = float(f(p, n))
            except (ZeroDivisionError, ValueError, OverflowError, TypeError):
                continue
            if math.isfinite(v):
                seen.append(v >= -1e-12)
        met = True if seen and all(seen) else False if seen and not any(seen) else None
    return ConstraintCheck(c, pos, neg, best, met, method)


class ConstraintsCheckReport:
    """:meth:`Metric.check` of the objective, plus one :class:`ConstraintCheck` per constraint.

    Attributes of the objective's report (``monotonicity``, ``undefined``, ...)
    are read through; ``constraints`` holds the constraint checks.
    """

    def __init__(self, objective: Any, constraints: tuple[ConstraintCheck, ...]) -> None:
        self.objective = objective
        self.constraints = constraints

    def __getattr__(self, name: str) -> Any:
        return getattr(self.objective, name)

    def unmet(self) -> dict[str, str]:
        """``{constraint: why}`` for each constraint that perfect predictions cannot meet."""
        return {str(c.constraint): str(c) for c in self.constraints
                if c.met_by_right_moves is False}

    def __str__(self) -> str:
        return "\n".join([str(self.objective), "constraints:", *(f"  {c}" for c in self.constraints)])


class ConstraintMethods:
    """The constraint half of :class:`metricc.Metric` (``docs/constraints.md``).

    A mixin: it reads ``constraints``, ``formula``, ``parameters``, ``name`` and
    ``higher_is_better`` of the metric, and builds metrics of the metric's own class.
    """

    constraints: tuple[Constraint, ...]
    _plain: Any

    def parse_constraints(self, texts: Iterable[str]) -> tuple[Constraint, ...]:
        """``["recall >= 0.9", ...]`` as :class:`metricc.constraints.Constraint` objects.

        >>> import metricc
        >>> c, = metricc.compile("f1").parse_constraints(["fpr <= 0.05"])
        >>> c.metric.expr, c.op, c.bound
        (FP/(FP + TN), '<=', 0.05)
        """
        cls: Any = type(self)
        return build_constraints(None, texts, lambda f, hib: cls(f, {}, None, hib))

    def constraint_scores(self, preds: Any, target: Any, threshold: float | None = None, *,
                          from_logits: bool = False) -> dict[str, float]:
        """Each constraint's metric on hard predictions ``preds >= threshold`` (``nan``
        where it is undefined, e.g. recall without positives); ``threshold`` and
        ``from_logits`` as in :meth:`metricc.Metric.score` (0.5 by default; with
        ``from_logits`` a probability compared with ``sigmoid(preds)``).

        >>> import metricc
        >>> m = metricc.compile("precision subject to recall >= 0.9")
        >>> m.constraint_scores([0.9, 0.8, 0.3, 0.1], [1, 1, 1, 0])
        {'recall >= 0.9': 0.6666666666666666}
        """
        return {c.text: c.metric.score(preds, target, threshold, zero_division=math.nan,
                                       from_logits=from_logits)
                for c in self.constraints}

    def feasible(self, preds: Any, target: Any, threshold: float | None = None, *,
                 from_logits: bool = False) -> bool:
        """Whether every constraint holds on hard predictions ``preds >= threshold``
        (as :meth:`constraint_scores`)."""
        scores = self.constraint_scores(preds, target, threshold, from_logits=from_logits)
        return all(c.satisfied(scores[c.text]) for c in self.constraints)

    def _objective(self) -> Any:
        """This metric without its constraints (sharing the generated kernels).

        Built once: each ``loss()`` would otherwise analyse the formula again and build
        (and ``torch.compile`` trace) a loss class of its own.
        """
        if self._plain is None:
            m: Any = self
            plain = type(m)(m.formula, m.parameters, m.name, m.higher_is_better)
            plain._loss_class, plain._kernels_source = m.loss_class, m.kernels_source
            self._plain = plain
        return self._plain


def constrained_loss(metric: Any, relaxation: str | None, warn_monotonicity: bool,
                     options: dict[str, Any]) -> Any:
    """``metric.loss()`` with constraints: a :class:`~metricc.runtime.constrained.ConstrainedLoss`.

    Options not given take :data:`~metricc.runtime.constraint_defaults.CONSTRAINED_DEFAULTS`
    (AnyLoss ``amplifier=10``, ``multiplier_lr=0.2``, ...; docs/constrained_defaults.md).
    """
    import warnings

    from .errors import MetricWarning
    from .runtime.constrained import ConstrainedLoss, ConstraintSpec
    from .runtime.constraint_defaults import CONSTRAINED_DEFAULTS

    keys = ("multiplier_lr", "penalty", "max_multiplier", "multiplier_rates")
    multiplier_options = {k: options.pop(k) for k in keys if k in options}
    if relaxation in (None, "anyloss"):  # the user's amplifier wins; else the constrained default
        options.setdefault("amplifier", CONSTRAINED_DEFAULTS["amplifier"])
    objective = metric._objective().loss(relaxation, warn_monotonicity=warn_monotonicity,
                                         **options)
    if warn_monotonicity:
        for why in metric.check().unmet().values():
            warnings.warn(f"constraint {why}", MetricWarning, stacklevel=3)
    specs = [ConstraintSpec(c.text, c.metric.loss_class, c.op, c.bound)
             for c in metric.constraints]
    return ConstrainedLoss(objective, specs, **multiplier_options)


def verify_constraints(metric: Any, derivatives: Any, options: dict[str, Any]) -> Any:
    """``metric.verify()`` with constraints: the objective's checks and every constraint's."""
    import dataclasses

    from .errors import VerificationError
    from .verify.counts import verify_counts

    raise_on_failure = options.pop("raise_on_failure", True)
    numeric = options.get("numeric", True)
    report = verify_counts(metric._objective().verify_subject(numeric), derivatives,
                           raise_on_failure=False, **options)
    for c in metric.constraints:
        sub = verify_counts(c.metric.verify_subject(numeric), raise_on_failure=False, **options)
        report.checks += [dataclasses.replace(k, name=f"constraint {c.text}: {k.name}")
                          for k in sub.checks]
    if raise_on_failure and not report.ok:
        raise VerificationError(str(report))
    return report
