"""``Metric.check()``: where a metric is undefined, which way it moves, and its range.

Decided symbolically where SymPy can, else by sampling at fixed points (each
verdict says which). The proofs have a CPU-time budget (:mod:`metricc.analysis.budget`):
on a slow machine a verdict may be sampled where a fast one proves it. SymPy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import sympy

from ..errors import MetricError
from ..language.symbols import COUNTS
from .budget import PROOF_SECONDS, BudgetExceeded, bounded, evaluate, evaluator, float_evaluator, limit, without_proofs
from .counts import Singularity, partials, singularities
from .counts_sign import SIGN_SIZE_LIMIT, positive_form, proven_sign
from .size import MAX_EXPANSION, expansion_size, tame

__all__ = ["DIRECTIONS", "MOVES", "CheckReport", "Monotonicity", "MoveVerdicts", "check", "move_directions",
           "proved_or_sampled", "wrong_way"]

#: The verdicts :func:`check` gives for the monotonicity in one count.
DIRECTIONS = ("increasing", "decreasing", "constant", "mixed", "unknown")

# Counts at which the sampling fallback evaluates partials: log-uniform in
# [0.01, 1000] (ratios up to 1e5 between counts), as exact binary fractions so the
# confirming high-precision evaluation sees the same point. Fixed seed: reports are
# deterministic.
_SAMPLE_COUNT = 160


def _sample_points() -> list[tuple[float, float, float, float]]:
    import random

    rng = random.Random(20240607)
    points = [(1.0, 1.0, 1.0, 1.0), (3.0, 1.0, 2.0, 5.0)]
    while len(points) < _SAMPLE_COUNT:
        tp, fp, fn, tn = (round(10 ** rng.uniform(-2, 3), 3) for _ in range(4))
        points.append((tp, fp, fn, tn))
    return points


_POINTS = _sample_points()


@dataclass(frozen=True)
class Monotonicity:
    """How the metric moves as one count grows, the others fixed, over positive counts.

    ``direction`` is one of :data:`DIRECTIONS` (``increasing`` means the partial
    derivative is ``>= 0`` everywhere, not necessarily ``> 0``); ``method`` is
    ``"symbolic"`` (SymPy proved the sign) or ``"sampled"`` (the partial was
    evaluated at fixed sample points; a ``mixed`` verdict is then confirmed by two
    points of opposite sign evaluated to 30 digits, the others are not proofs).
    """

    count: str
    direction: str
    method: str

    def __str__(self) -> str:
        return f"{self.direction} ({self.method})"


class MoveVerdicts:
    """What a loss's warning reads of a report: the verdicts along the moves (:data:`MOVES`),
    shared by :class:`CheckReport` and :class:`metricc.analysis.counts_moves.MovesReport`."""

    moves: dict[str, Monotonicity]
    higher_is_better: bool | None

    @property
    def depends_on_predictions(self) -> bool:
        """False when neither move changes the metric (``P/N``): its loss has zero gradient."""
        return not self.moves or any(m.direction != "constant" for m in self.moves.values())

    def wrong_way(self, higher_is_better: bool | None = None) -> dict[str, str]:
        """``{move: why}`` for each feasible move along which the metric goes against training.

        Within a batch ``P`` and ``N`` are fixed, so the counts change only in pairs:
        a positive's score rising turns an FN into a TP, a negative's turns a TN into
        an FP. With ``higher_is_better`` the metric must not decrease along the first
        (``f_TP - f_FN >= 0``) nor increase along the second (``f_FP - f_TN <= 0``);
        the reverse when lower is better. ``mixed`` and ``unknown`` are not flagged:
        they may be right in the region that matters.
        """
        return wrong_way(self.moves, self.higher_is_better if higher_is_better is None
                         else higher_is_better)


@dataclass(frozen=True)
class CheckReport(MoveVerdicts):
    """What :func:`check` found about a metric; ``str()`` formats it for people.

    ``lower``/``upper`` are bounds SymPy proved (``None`` when it could not);
    ``sampled_range`` is the smallest and largest value seen at the sample
    points, a hint and not a proof.

    >>> r = check(sympy.sympify("2*TP/(2*TP+FP+FN)"))
    >>> r.monotonicity["TN"].direction, (r.lower, r.upper)
    ('constant', (0, 1))
    """

    expr: sympy.Expr
    undefined: tuple[Singularity, ...]
    not_differentiable: tuple[Singularity, ...]
    monotonicity: dict[str, Monotonicity]
    lower: sympy.Expr | None
    upper: sympy.Expr | None
    sampled_range: tuple[float, float] | None
    higher_is_better: bool | None = None
    #: The symbolic proofs ran out of time (:data:`metricc.analysis.budget.PROOF_SECONDS`);
    #: the verdicts they did not reach are sampled, and say so.
    budget_spent: bool = False
    #: How the metric moves along the changes a batch allows (see :data:`MOVES`): keys
    #: ``"FN->TP"`` (a positive's score rises) and ``"TN->FP"`` (a negative's score rises).
    moves: dict[str, Monotonicity] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"metric: {self.expr}"]
        for title, items in (("undefined where", self.undefined),
                             ("not differentiable where", self.not_differentiable)):
            if items:
                lines.append(f"{title}:")
                lines.extend(f"  {s}" for s in items)
            else:
                lines.append(f"{title}: nowhere (for nonnegative counts)")
        lines.append("monotonicity (as each count grows, over positive counts):")
        lines.extend(f"  {k}: {m}" for k, m in self.monotonicity.items())
        if self.moves:
            lines.append("along the moves a batch allows (P and N fixed):")
            lines.extend(f"  {_MOVE_TEXT[k]} ({k}): {m}" for k, m in self.moves.items())
        lo = "?" if self.lower is None else str(self.lower)
        hi = "?" if self.upper is None else str(self.upper)
        if self.lower is None and self.upper is None:
            proven = "unknown"
        else:
            note = "; ? = unknown" if "?" in (lo, hi) else ""
            proven = f"within [{lo}, {hi}] (symbolic{note})"
        sampled = ""
        if self.sampled_range is not None:
            sampled = "; sampled values {:.4g} .. {:.4g}".format(*self.sampled_range)
        lines.append(f"range: {proven}{sampled}")
        if self.budget_spent:
            lines.append("note: symbolic proofs stopped at the time budget; verdicts marked "
                         "(sampled) are from sample points, not proofs")
        if not self.depends_on_predictions:
            lines.append("as a loss: DOES NOT DEPEND ON THE PREDICTIONS (only on P and N, which "
                         "the labels fix): its gradient is zero everywhere, it cannot train")
        elif self.higher_is_better is not None:
            wrong = self.wrong_way()
            direction = "higher is better" if self.higher_is_better else "lower is better"
            if wrong:
                lines.append(f"as a loss ({direction}): TRAINS THE WRONG WAY")
                lines.extend(f"  {why}" for why in wrong.values())
            else:
                lines.append(f"as a loss ({direction}): no feasible move takes it the wrong way")
        return "\n".join(lines)


def wrong_way(moves: dict[str, Monotonicity], hib: bool | None) -> dict[str, str]:
    """:meth:`CheckReport.wrong_way` for the verdicts ``moves`` (``None``: higher is better)."""
    hib = True if hib is None else hib
    loss = "1 - metric" if hib else "the metric itself (lower is better)"
    out: dict[str, str] = {}
    for key, m in moves.items():
        positive = key == "FN->TP"
        bad = "decreasing" if positive == hib else "increasing"
        if m.direction == bad:
            who, old, new = ("a positive", "an FN", "a TP") if positive else ("a negative", "a TN", "an FP")
            effect = ("penalises true positives" if positive else "rewards false positives")
            out[key] = (f"the metric is {bad} as {who}'s score rises ({old} becomes "
                        f"{new}; {m.method}), so minimising the loss {loss} {effect}")
    return out


#: The feasible moves: name -> (count that grows, count that shrinks).
MOVES = {"FN->TP": ("TP", "FN"), "TN->FP": ("FP", "TN")}
_MOVE_TEXT = {"FN->TP": "a positive's score rises", "TN->FP": "a negative's score rises"}


def move_directions(gradient: dict[str, sympy.Expr]) -> dict[str, Monotonicity]:
    """The metric's direction along each feasible move: the sign of ``f_TP - f_FN``, ``f_FP - f_TN``."""
    out = {}
    for key, (up, down) in MOVES.items():
        # No cancel() here: on wide formulas (min of many terms) it alone took seconds;
        # proven_sign simplifies within its own size limit and time budget.
        out[key] = _direction(key, gradient[up] - gradient[down])
    return out


def _evaluator(e: sympy.Expr) -> Any:
    """``e`` as a plain-float function of (TP, FP, FN, TN), or ``None`` if SymPy cannot print it."""
    try:
        return float_evaluator(e, list(COUNTS.values()))
    except (NameError, SyntaxError, TypeError, KeyError):  # pragma: no cover - exotic nodes
        return None


def _values(fn: Any) -> list[tuple[int, float]]:
    out = []
    for i, p in enumerate(_POINTS):
        try:
            v = complex(fn(*p))
        except (ZeroDivisionError, ValueError, OverflowError, TypeError):
            continue
        if v.imag == 0 and math.isfinite(v.real):
            out.append((i, v.real))
    return out


@lru_cache(maxsize=64)
def _precise(e: sympy.Expr) -> Any:
    return evaluator(e, list(COUNTS.values()))


def _confirmed_sign(e: sympy.Expr, index: int) -> int:
    """The sign of ``e`` at sample point ``index``, evaluated to 30 digits (0 if unsure).

    mpmath, not ``e.xreplace(point)``: SymPy factors integers to evaluate a rational
    to a rational power, which hung on the partials of ``mcc^f1`` for 15 minutes.
    """
    v = evaluate(_precise(e), _POINTS[index])
    if v is None or v.imag != 0 or abs(v.real) < 1e-20:
        return 0
    return 1 if v.real > 0 else -1


def sampled_direction(d: sympy.Expr) -> str:
    """Monotonicity from the sign of the partial ``d`` at the sample points."""
    fn = _evaluator(d)
    vals = _values(fn) if fn is not None else []
    if not vals:
        return "unknown"
    scale = max(abs(v) for _, v in vals)
    if scale == 0:
        return "constant"
    tol = 1e-9 * scale
    pos = sorted((i for i, v in vals if v > tol), key=lambda i: -abs(dict(vals)[i]))
    neg = sorted((i for i, v in vals if v < -tol), key=lambda i: -abs(dict(vals)[i]))
    # Floats can get the sign of a tiny partial wrong; confirm a witness of each sign.
    has_pos = any(_confirmed_sign(d, i) == 1 for i in pos[:3])
    has_neg = any(_confirmed_sign(d, i) == -1 for i in neg[:3])
    if has_pos and has_neg:
        return "mixed"
    if has_pos:
        return "increasing"
    if has_neg:
        return "decreasing"
    return "constant" if not pos and not neg else "unknown"


def _direction(k: str, d: sympy.Expr) -> Monotonicity:
    """The sign of the derivative ``d`` over positive counts, proved where SymPy can."""
    if d == 0:
        return Monotonicity(k, "constant", "symbolic")
    sampled = sampled_direction(d)
    if sampled == "mixed":  # two confirmed witnesses: no proof of a sign can exist
        return Monotonicity(k, "mixed", "sampled")
    s = proven_sign(positive_form(d))
    if s is not None:
        return Monotonicity(k, {1: "increasing", -1: "decreasing", 0: "constant"}[s], "symbolic")
    return Monotonicity(k, sampled, "sampled")


def _bounds(expr: sympy.Expr) -> tuple[sympy.Expr | None, sympy.Expr | None,
                                       tuple[float, float] | None]:
    fn = _evaluator(expr)
    vals = [v for _, v in _values(fn)] if fn is not None else []
    sampled = (min(vals), max(vals)) if vals else None
    e = positive_form(expr)
    lower = upper = None
    # Candidates the samples do not already refute, tightest first.
    for c in (1, 0, -1):
        if (sampled is None or sampled[0] >= c - 1e-12) and proven_sign(e - c) == 1:
            lower = sympy.Integer(c)
            break
    for c in (-1, 0, 1):
        if (sampled is None or sampled[1] <= c + 1e-12) and proven_sign(c - e) == 1:
            upper = sympy.Integer(c)
            break
    # |metric| <= 1 is often provable through metric**2: for num/den that is
    # den**2 - num**2 >= 0 (MCC: a polynomial with nonnegative coefficients).
    if ((lower is None or upper is None) and sampled is not None
            and -1 - 1e-12 <= sampled[0] and sampled[1] <= 1 + 1e-12):
        num, den = sympy.fraction(sympy.together(e))
        gap = den**2 - num**2
        if (sympy.count_ops(gap) <= SIGN_SIZE_LIMIT and expansion_size(gap) <= MAX_EXPANSION
                and proven_sign(sympy.expand(gap)) == 1):
            lower = sympy.Integer(-1) if lower is None else lower
            upper = sympy.Integer(1) if upper is None else upper
    return lower, upper, sampled


def check(expr: sympy.Expr, gradient: dict[str, sympy.Expr] | None = None, *,
          higher_is_better: bool | None = None) -> CheckReport:
    """Where ``expr`` is undefined or not differentiable, its monotonicity and range.

    ``expr`` must be over the counts only (parameters substituted). ``gradient``
    (the partials, as :func:`partials` returns) saves recomputing them. With
    ``higher_is_better`` the report also says whether the loss trains the right way.

    >>> print(check(sympy.sympify("TP/(TP+FP)")).monotonicity["FP"])
    decreasing (symbolic)
    """
    extra = {s.name for s in expr.free_symbols} - set(COUNTS)
    if extra:
        raise MetricError(f"check() needs a formula over TP, FP, FN, TN only; give values to "
                          f"{', '.join(sorted(extra))}")
    found, exhausted = proved_or_sampled(_findings, expr, gradient, inline=tame(expr))
    undefined, rough, monotonicity, lower, upper, sampled, moves = found
    return CheckReport(expr, undefined, rough, monotonicity, lower, upper, sampled, higher_is_better,
                       exhausted, moves)


def proved_or_sampled(fn: Callable[..., Any], *args: Any, inline: bool) -> tuple[Any, bool]:
    """``(fn(*args), whether the proofs ran out of time)`` for ``check()`` and ``check_moves()``:
    proofs within :data:`PROOF_SECONDS`, else the sampled verdicts only."""
    with limit() as budget:
        try:  # in a worker that is stopped if one SymPy call runs away
            found = bounded(fn, *args, inline=inline)
        except BudgetExceeded:
            try:  # no proofs at all: sampled verdicts only
                found = bounded(without_proofs, fn, *args, seconds=2 * PROOF_SECONDS)
            except BudgetExceeded as e:
                raise MetricError(f"check() could not analyse this formula: {e} "
                                  "(loss(..., warn_monotonicity=False) skips check())") from None
    return found, budget.exhausted


def _findings(expr: sympy.Expr, gradient: dict[str, sympy.Expr] | None) -> tuple[Any, ...]:
    """``(undefined, rough, monotonicity, lower, upper, sampled, moves)`` under the current limit."""
    gradient = partials(expr) if gradient is None else gradient
    undefined, rough = singularities(expr)
    lower, upper, sampled = _bounds(expr)
    monotonicity = {k: _direction(k, gradient[k]) for k in COUNTS}
    return undefined, rough, monotonicity, lower, upper, sampled, move_directions(gradient)
