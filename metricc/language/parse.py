"""Stage 1: formula text -> SymPy expression over ``TP FP FN TN`` and parameters.

The grammar lives in ``grammar/metric.lark``; :mod:`metricc.language.syntax` holds the Lark
transformer, which runs inline while LALR parses, so no step recurses on the nesting
depth of the input. This module resolves the names it leaves (counts, bindings, named
metrics, parameters) and is the public entry point.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar, cast

import sympy

from ..errors import MetricError, MetricSyntaxError, UnknownNameError, suggest
from ..library import lookup, names
from .curve import CurveFormula, resolve_curve, uses_curve
from .groups import GroupFormula, resolve_groups, uses_groups
from .limits import MAX_LENGTH, MAX_TOKENS, check_constants, check_size, substitute, substituted
from .matrix import MatrixFormula, is_matrix_expr, resolve_matrix
from .messages import syntax_tree
from .symbols import COUNTS, DERIVED
from .syntax import FUNCTIONS, LOCK, ConstraintClause, Name, Position, RawConstraint, grammar_text

__all__ = [
    "FUNCTIONS",
    "Formula",
    "ParsedConstraint",
    "check_constants",
    "check_single_identifier",
    "check_size",
    "grammar_text",
    "known_names",
    "parse",
    "parse_constraint",
    "substitute",
]

_COMMENT = re.compile(r"#[^\n]*")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_]*|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|\*\*|[^\s\\]")


@dataclass(frozen=True)
class ParsedConstraint:
    """``lhs op rhs`` as written (``op`` is ``>=`` or ``<=``), sides over the counts.

    ``text`` is the constraint's own source; ``line``/``column`` (1-based) point
    at its first character, for errors found after parsing.
    """

    text: str
    lhs: sympy.Expr
    op: str
    rhs: sympy.Expr
    line: int = 1
    column: int = 1


@dataclass(frozen=True)
class Formula:
    """A parsed formula: ``expr`` over count symbols and parameter symbols.

    ``constraints`` holds the ``subject to`` clause, if the text has one.
    """

    text: str
    expr: sympy.Expr
    parameters: tuple[str, ...]
    defaults: dict[str, float] = field(default_factory=dict)
    bindings: dict[str, sympy.Expr] = field(default_factory=dict)
    #: The named metrics the formula is or uses (their parameters' ranges apply).
    metrics: tuple[str, ...] = ()
    constraints: tuple[ParsedConstraint, ...] = ()
    #: The statistic the formula is over (a key of ``metricc.analysis.statistics.STATISTICS``).
    statistic: ClassVar[str] = "counts"
    matrix_parameters: ClassVar[tuple[str, ...]] = ()


def known_names() -> list[str]:
    return [*COUNTS, *DERIVED, *names()]


def parse(text: str) -> Formula | MatrixFormula | CurveFormula | GroupFormula:
    """Parse formula text into a :class:`Formula` (or a :class:`MatrixFormula` when it
    uses the K x K matrix: ``C[i, j]``, ``sum``, ``row``, ``col``).

    >>> parse("precision = TP/(TP+FP); recall = TP/(TP+FN); precision*recall").expr
    TP**2/((FN + TP)*(FP + TP))
    """
    if not isinstance(text, str):
        raise MetricError(f"a formula must be a string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise MetricError(f"formula is {len(text)} characters long; the limit is {MAX_LENGTH}")
    tokens = sum(1 for _ in _TOKEN.finditer(_COMMENT.sub("", text)))
    if tokens > MAX_TOKENS:
        raise MetricError(f"formula has {tokens} names, numbers and operators; the limit is "
                          f"{MAX_TOKENS} (metrics need far fewer: write a shorter formula)")
    pos = Position(text)
    try:
        with LOCK:
            parts = syntax_tree(text, pos)
        return _resolve(text, parts, pos)
    except RecursionError:
        raise MetricError(
            "formula nests too deeply to analyse; split it with let-bindings"
        ) from None


def parse_constraint(text: str) -> ParsedConstraint:
    """Parse one constraint ``lhs >= rhs`` (or ``<=``); names must be counts or metrics.

    >>> c = parse_constraint("recall >= 0.9")
    >>> c.lhs, c.op, c.rhs
    (TP/(FN + TP), '>=', 9/10)
    """
    if not isinstance(text, str):
        raise MetricError(f"a constraint must be a string such as 'recall >= 0.9', got "
                          f"{type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise MetricError(f"constraint is {len(text)} characters long; the limit is {MAX_LENGTH}")
    pos = Position(text)
    try:
        with LOCK:
            raw = syntax_tree(text, pos, start="single_constraint")
        start = len(text) - len(text.lstrip())
        return _resolve_constraint(raw, text, (start, len(text.rstrip())), {}, pos)
    except RecursionError:
        raise MetricError("constraint nests too deeply to analyse") from None


def _line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _clause_spans(text: str, count: int) -> list[tuple[int, int]] | None:
    """Where each of the ``count`` constraints after ``subject to`` starts and ends.

    The transformer sees values, not positions, so the spans are found again in
    the text: the clause is split at commas and ``and`` outside parentheses.
    """
    code = re.sub(r"#[^\n]*", lambda m: " " * len(m.group()), text)
    found = list(re.finditer(r"\bsubject\s+to\b", code))
    if not found:
        return None
    spans, depth, start, i = [], 0, found[-1].end(), found[-1].end()
    while i < len(code):
        ch = code[i]
        depth += ch == "("
        depth -= ch == ")"
        sep = 1 if ch == "," else 3 if re.match(r"\band\b", code[i:]) and (
            i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")) else 0
        if depth == 0 and sep:
            spans.append((start, i))
            start = i = i + sep
            continue
        i += 1
    spans.append((start, len(code.rstrip(" \t\r\n;"))))
    out = []
    for a, b in spans:
        a += len(code[a:b]) - len(code[a:b].lstrip())
        b = a + len(code[a:b].rstrip())
        out.append((a, b))
    return out if len(out) == count else None


def _replace_names(expr: sympy.Expr, defined: dict[str, sympy.Expr],
                   other: Callable[[str], sympy.Expr]) -> sympy.Expr:
    """``expr`` with each name as written replaced: by an earlier binding, else a count, else a
    total (a total not yet rebound is the built-in one, as a Python name is the builtin until a
    local assignment shadows it); ``other(name)`` for every other name."""
    bound = ChainMap(defined, COUNTS, DERIVED)
    subs: dict[sympy.Symbol, sympy.Expr] = {}
    for sym in expr.atoms(Name):
        subs[sym] = bound[sym.name] if sym.name in bound else other(sym.name)
    return expr.xreplace(subs) if subs else expr


def _resolve_constraint(raw: RawConstraint, text: str, span: tuple[int, int],
                        defined: dict[str, sympy.Expr], pos: Position) -> ParsedConstraint:
    """Resolve the names of one constraint; an unknown name is a positioned error."""
    lhs, op, rhs = raw

    def metric_value(name: str) -> sympy.Expr:
        if (metric := lookup(name)) is None:
            known = known_names() + list(defined)
            raise _error_at(text, span, name, f"unknown metric '{name}' in a constraint"
                            f"{suggest(name, known)}; each side is a number, a count, a "
                            "named metric (`metricc list`) or a formula over them")
        if metric.matrix or metric.curve or metric.groups:
            kind = "K x K" if metric.matrix else "curve" if metric.curve else "group"
            raise _error_at(text, span, name, f"'{name}' is a {kind} metric; these "
                            "constraints apply to 2 x 2 metrics (a group formula takes group "
                            "bounds in its own clause: accuracy subject to gap(recall) <= 0.05)")
        inner = _library_formula(metric.name)
        if missing := sorted(set(inner.parameters) - set(inner.defaults)):
            raise _error_at(text, span, name, f"metric '{name}' has parameters "
                            f"{', '.join(missing)} with no default; write its formula "
                            "with numbers in the constraint")
        return substitute(inner.expr, {sympy.Symbol(k): sympy.Rational(str(v))
                                       for k, v in inner.defaults.items()})

    sides = []
    for side in (lhs, rhs):
        expr = _replace_names(side, defined, metric_value)
        check_size(expr, "constraint")
        sides.append(expr)
    line, column = _line_column(text, span[0])
    return ParsedConstraint(text[span[0]:span[1]], sides[0], str(op), sides[1], line, column)


def _error_at(text: str, span: tuple[int, int], name: str, message: str) -> MetricSyntaxError:
    m = re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text[span[0]:span[1]])
    offset = span[0] + (m.start() if m else 0)
    return MetricSyntaxError(message, text, *_line_column(text, offset))


def _uses_matrix(exprs: list[sympy.Expr]) -> bool:
    return any(is_matrix_expr(e) for e in exprs) or any(
        (metric := lookup(sym.name)) is not None and metric.matrix
        for e in exprs for sym in e.atoms(Name))


def _resolve(text: str, parts: list[Any], pos: Position
             ) -> Formula | MatrixFormula | CurveFormula | GroupFormula:
    clause: ConstraintClause | None = None
    if parts and isinstance(parts[-1], ConstraintClause):
        *parts, clause = parts
    *bindings, body = parts
    exprs = [body, *(e for _, e in bindings)]
    if uses_groups([*exprs, *(x for c in clause or [] for x in (c[0], c[2]))]):
        spans = _clause_spans(text, len(clause)) if clause else None
        return resolve_groups(text, bindings, body, clause, pos, FUNCTIONS, parse,
                              [text[a:b] for a, b in spans] if spans else None)
    curve = uses_curve([*exprs, *(x for c in clause or [] for x in (c[0], c[2]))])
    matrix = not curve and _uses_matrix(exprs)
    if clause and (curve or matrix):
        why = ("a curve formula takes no 'subject to' clause (for now); write the bound into "
               "best(): best(recall, precision >= 0.9)") if curve else (
               "constraints apply to 2 x 2 metrics for now; a K x K formula cannot take a "
               "'subject to' clause")
        raise MetricSyntaxError(why, text, *_line_column(text, text.rfind("subject")))
    if curve:
        return resolve_curve(text, bindings, body, pos, FUNCTIONS, parse)
    if matrix:
        return resolve_matrix(text, bindings, body, pos, FUNCTIONS, _library_matrix)
    defined: dict[str, sympy.Expr] = {}
    upcoming = {str(tok) for tok, _ in bindings}  # bound on the line being resolved or below
    params: set[str] = set()
    defaults: dict[str, float] = {}
    metrics: list[str] = []

    def other(name: str) -> sympy.Expr:
        if name in upcoming:
            raise pos.error(f"'{name}' is used before it is defined", pos.first_use[name])
        if (metric := lookup(name)) is None:
            params.add(name)
            return sympy.Symbol(name)
        inner = _library_formula(metric.name)
        if metric.name not in metrics:
            metrics.append(metric.name)
        for k, v in inner.defaults.items():
            defaults.setdefault(k, v)
        params.update(inner.parameters)
        return inner.expr

    sizes: dict[int, Any] = {}  # each binding's subtrees, sized once for the whole chain
    for tok, expr in bindings:
        name = str(tok)
        # Only the four counts are reserved: a binding of a total (P N PP PN n), such as
        # `n = TP + FP + FN + TN` in Cohen's kappa, shadows the built-in from then on.
        if name in COUNTS:
            raise pos.error(f"'{name}' is one of the four counts (TP, FP, FN, TN) and cannot be "
                            "redefined; choose another name", tok)
        if name in FUNCTIONS:
            raise pos.error(f"'{name}' is a function and cannot be redefined", tok)
        if name in defined:
            raise pos.error(f"'{name}' is defined twice", tok)
        defined[name] = _replace_names(expr, defined, other)
        upcoming.discard(name)
        check_size(defined[name], f"binding '{name}'", sizes, substituted(len(defined) > 1, metrics))
    result = _replace_names(body, defined, other)
    check_size(result, seen=sizes, expanded=substituted(bool(defined), metrics))
    params -= set(defined)
    constraints: tuple[ParsedConstraint, ...] = ()
    if clause:
        spans = _clause_spans(text, len(clause)) or [(0, len(text))] * len(clause)
        constraints = tuple(_resolve_constraint(raw, text, span, defined, pos)
                            for raw, span in zip(clause, spans, strict=True))
    return Formula(
        text=text,
        expr=result,
        parameters=tuple(sorted(params)),
        defaults=defaults,
        bindings=dict(defined),
        metrics=tuple(metrics),
        constraints=constraints,
    )


@cache
def _library_matrix(name: str) -> MatrixFormula:
    """A named K x K metric, parsed once (so its index symbols are the same objects)."""
    metric = lookup(name)
    assert metric is not None and metric.matrix
    f = parse(metric.formula)
    assert isinstance(f, MatrixFormula)
    return MatrixFormula(f.text, f.expr, f.parameters, f.matrix_parameters, dict(metric.params),
                         (metric.name,))


@cache
def _library_formula(name: str) -> Formula:
    metric = lookup(name)
    assert metric is not None
    f = parse(metric.formula)
    # A 2x2 library metric's defaults are numbers (string ones are K x K matrices).
    defaults = cast("dict[str, float]", dict(metric.params))
    return Formula(f.text, f.expr, f.parameters, defaults, {}, (metric.name,))


def check_single_identifier(text: str) -> None:
    """Raise UnknownNameError if ``text`` is a lone unknown identifier (a likely typo)."""
    word = text.strip()
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", word) and word not in COUNTS and word not in DERIVED:
        if lookup(word) is None:
            raise UnknownNameError(
                f"unknown metric '{word}'{suggest(word, names())}; "
                "`metricc list` shows the named metrics, or write a formula over TP, FP, FN, TN"
            )
