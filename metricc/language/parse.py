"""Stage 1: formula text -> SymPy expression over ``TP FP FN TN`` and parameters.

The grammar lives in ``grammar/metric.lark``; :class:`ToSympy` has one method per
``-> alias`` there. Lark runs the transformer inline while it parses (LALR), so
no step recurses on the nesting depth of the input.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, cast

import lark
import sympy
from lark import Token

from ..errors import MetricError, MetricSyntaxError, UnknownNameError, suggest
from ..library import lookup, names
from .curve import REDUCTIONS, Comparison, CurveFormula, curve_call, resolve_curve, uses_curve
from .limits import (
    MAX_ARGS,
    MAX_CALL_NESTING,
    MAX_DEPTH,
    MAX_EXPONENT,
    MAX_LENGTH,
    MAX_MINMAX_WORK,
    MAX_NESTING,
    MAX_NODES,
    MAX_POWER,
    MAX_TOKENS,
    check_constants,
)
from .limits import log10_abs as _log10_abs
from .matrix import ColTotal, Delta, Entry, MatrixFormula, PresentCall, RowTotal, SumOf, is_matrix_expr, resolve_matrix
from .symbols import COUNTS, DERIVED, MATRIX_FUNCTIONS

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

#: name -> (sympy constructor, minimum arity, maximum arity or None)
FUNCTIONS: dict[str, tuple[Any, int, int | None]] = {
    "sqrt": (sympy.sqrt, 1, 1),
    "log": (sympy.log, 1, 1),
    "exp": (sympy.exp, 1, 1),
    "abs": (sympy.Abs, 1, 1),
    "min": (sympy.Min, 2, None),
    "max": (sympy.Max, 2, None),
}



def _number_problem(e: sympy.Expr) -> str | None:
    """Why a node breaks the size limits, or ``None``."""
    if e.is_Number:
        if e.is_finite is False or e is sympy.nan:
            return None  # zoo/nan: reported as "divides by zero" downstream
        if e != 0 and abs(_log10_abs(e)) > MAX_EXPONENT:
            return f"a constant is out of range (beyond 10^±{MAX_EXPONENT})"
    elif isinstance(e, sympy.Pow) and e.exp.is_Number and not e.base.is_Number:
        if abs(e.exp) > MAX_POWER:
            return f"exponent {e.exp} is too large (the limit is ±{MAX_POWER})"
    return None


def _pow_problem(base: sympy.Expr, exp: sympy.Expr) -> str | None:
    """Why ``base**exp`` must not be built, checked before SymPy multiplies it out
    (``9^9^9`` has 370 million digits), or ``None``."""
    if not (exp.is_Number and exp.is_finite):
        return None
    coeff = base if base.is_Number else base.as_coeff_Mul()[0]
    if coeff.is_Rational and abs(coeff) not in (0, 1):
        digits = (abs(int(coeff.p)).bit_length() + int(coeff.q).bit_length()) * math.log10(2)
        if abs(float(exp)) * digits > 2 * MAX_EXPONENT:
            return (f"power is out of range (beyond 10^±{MAX_EXPONENT}); "
                    "metrics need no such numbers")
    if not base.is_Number and abs(exp) > MAX_POWER:
        return f"exponent {exp} is too large (the limit is ±{MAX_POWER})"
    return None


def substitute(expr: sympy.Expr, values: dict[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """``expr.xreplace(values)`` under the size limits, built bottom-up so that
    ``c^c`` with ``c = 1e300`` is refused before SymPy evaluates it."""
    memo: dict[int, sympy.Expr] = {}

    def walk(e: sympy.Expr) -> sympy.Expr:
        key = id(e)
        if key not in memo:
            if not e.args:
                memo[key] = values.get(e, e)
            else:
                args = [walk(a) for a in e.args]
                if isinstance(e, sympy.Pow) and (problem := _pow_problem(*args)) is not None:
                    raise MetricError(problem)
                memo[key] = _check_top(e.func(*args)) if args != list(e.args) else e
        return memo[key]

    return walk(expr)


def _check_top(e: sympy.Expr) -> sympy.Expr:
    """Size limits on the nodes one operation can create: ``e``, its children and theirs."""
    nodes = [e, *e.args]
    nodes += [g for a in e.args if a.is_Mul or a.is_Pow for g in a.args]
    for node in nodes:
        if (problem := _number_problem(node)) is not None:
            raise MetricError(f"{problem}; metrics need no such numbers")
    return e


def check_size(expr: sympy.Expr, what: str = "formula") -> None:
    """Raise MetricError if ``expr`` breaks a size limit; shared subtrees are walked once."""
    memo: dict[int, tuple[int, int]] = {}

    def size(e: sympy.Expr) -> tuple[int, int]:
        """(nodes, depth), both capped just past their limits."""
        key = id(e)
        if key not in memo:
            if (problem := _number_problem(e)) is not None:
                raise MetricError(f"{what}: {problem}; metrics need no such numbers")
            parts = [size(a) for a in e.args]
            memo[key] = (min(1 + sum(n for n, _ in parts), MAX_NODES + 1),
                         min(1 + max((d for _, d in parts), default=0), MAX_DEPTH + 1))
            if isinstance(e, (sympy.Min, sympy.Max)) and \
                    (len(e.args) - 1) * memo[key][0] > MAX_MINMAX_WORK:
                raise MetricError(
                    f"{what}: {type(e).__name__.lower()}() of {len(e.args)} arguments of "
                    f"{memo[key][0]} operations in all is too large to analyse (its "
                    "derivative compares each argument with the others); use fewer or "
                    "simpler arguments")
        return memo[key]

    n, depth = size(expr)
    if depth > MAX_DEPTH:
        raise MetricError(
            f"{what} nests more than {MAX_DEPTH} operations deep once bindings are "
            "substituted; write it with fewer nested functions and bindings"
        )
    if n > MAX_NODES:
        raise MetricError(
            f"{what} is too large to analyse (more than {MAX_NODES} operations once "
            "bindings are substituted); write it with fewer nested bindings"
        )


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


def grammar_text() -> str:
    """The grammar: from the installed wheel, else from the source checkout."""
    packaged = resources.files("metricc").joinpath("grammar/metric.lark")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    checkout = Path(__file__).resolve().parents[2] / "grammar" / "metric.lark"
    return checkout.read_text(encoding="utf-8")


def known_names() -> list[str]:
    return [*COUNTS, *DERIVED, *names()]


class _Name(sympy.Symbol):
    """A symbol as written in the text; resolved to a count, binding, metric or parameter."""


class _Position:
    def __init__(self, text: str) -> None:
        self.text = text
        self.first_use: dict[str, Token] = {}
        self.call_tokens: dict[str, Token] = {}

    def error(self, message: str, tok: Token) -> MetricSyntaxError:
        return MetricSyntaxError(message, self.text, tok.line or 1, tok.column or 1)


class _Chain:
    """A sum or product being parsed: ``a + b + c`` is one SymPy ``Add`` built at the end.

    Folding ``(a + b) + c`` one operator at a time makes SymPy re-flatten and
    re-sort the growing sum on every ``+``: quadratic, 40 s for 3,000 terms.
    Constants are folded into one coefficient as they come, checked against the
    size limits at once, so ``1e300*1e300*...`` never builds a huge number.
    """

    __slots__ = ("coeff", "is_sum", "terms")

    def __init__(self, first: sympy.Expr, is_sum: bool) -> None:
        self.is_sum = is_sum
        self.coeff: sympy.Expr = sympy.S.Zero if is_sum else sympy.S.One
        self.terms: list[sympy.Expr] = []
        self.push(first)

    def push(self, e: sympy.Expr) -> _Chain:
        if e.is_Number:
            self.coeff = self.coeff + e if self.is_sum else self.coeff * e
            if (problem := _number_problem(self.coeff)) is not None:
                raise MetricError(f"{problem}; metrics need no such numbers")
        else:
            self.terms.append(e)
        return self

    def build(self) -> sympy.Expr:
        op = sympy.Add if self.is_sum else sympy.Mul
        return _check_top(op(self.coeff, *self.terms))


def _expr(e: Any) -> sympy.Expr:
    """A finished SymPy expression for a parsed operand (chains are built here)."""
    return e.build() if isinstance(e, _Chain) else e


def _chain(e: Any, is_sum: bool) -> _Chain:
    """``e`` as a chain of the given kind, to be extended in place."""
    if isinstance(e, _Chain) and e.is_sum == is_sum:
        return e
    return _Chain(_expr(e), is_sum)


class ToSympy(lark.Transformer):  # type: ignore[type-arg]
    """One method per grammar alias; runs inline in the LALR parser.

    ``add``/``sub``/``mul``/``div`` return a :class:`_Chain` that the next
    operator of the same kind extends in place (parsing stays linear in the
    length of the text); every other method takes finished expressions.
    """

    def __init__(self, pos: _Position) -> None:
        super().__init__()
        self.where = pos

    def number(self, c: list[Token]) -> sympy.Expr:
        tok = c[0]
        m = re.search(r"[eE]([+-]?\d+)$", tok)
        if m and abs(int(m.group(1))) > MAX_EXPONENT:
            raise self.where.error(
                f"number {tok} is out of range (exponent beyond ±{MAX_EXPONENT})", tok)
        if len(tok) > 2 * MAX_EXPONENT:
            raise self.where.error(f"number has {len(tok)} digits; write it as 1.5e-7", tok)
        value = sympy.Rational(str(tok))
        if value != 0 and abs(_log10_abs(value)) > MAX_EXPONENT:
            raise self.where.error(f"number is out of range (beyond 10^±{MAX_EXPONENT})", tok)
        return value

    def name(self, c: list[Token]) -> sympy.Expr:
        tok = c[0]
        self.where.first_use.setdefault(str(tok), tok)
        return _Name(str(tok))

    def index(self, c: list[Any]) -> sympy.Expr:
        tok, args = c
        base = str(tok)
        self.where.first_use.setdefault(base, tok)
        if len(args) != 2 or not all(isinstance(a, _Name) for a in args):
            raise self.where.error(
                f"{base}[...] takes two class-index names, row then column, e.g. {base}[i, j]",
                tok)
        return Entry(_Name(base), *args)

    def _matrix_call(self, tok: Token, fname: str, args: list[Any]) -> sympy.Expr:
        self.where.call_tokens.setdefault(fname, tok)
        names_ok = all(isinstance(a, _Name) for a in args)
        if fname == "sum":
            if len(args) < 2 or not all(isinstance(a, _Name) for a in args[:-1]):
                raise self.where.error(
                    "sum() takes class-index names, then the expression: sum(i, C[i,i]) or "
                    "sum(i, j, C[i,j])", tok)
            if len({a.name for a in args[:-1]}) != len(args) - 1:
                raise self.where.error("sum() names the same index twice", tok)
            return SumOf(args[-1], *args[:-1])
        if fname in ("row", "col"):
            if len(args) != 1 or not names_ok:
                raise self.where.error(f"{fname}() takes one class-index name, e.g. {fname}(i)",
                                       tok)
            return (RowTotal if fname == "row" else ColTotal)(args[0])
        if fname == "delta":
            if len(args) != 2 or not names_ok:
                raise self.where.error("delta() takes two class-index names, e.g. delta(i, j)",
                                       tok)
            return Delta(*args)
        if len(args) != 1:  # present
            raise self.where.error(f"present() takes exactly 1 argument, got {len(args)}", tok)
        return PresentCall(args[0])

    def call(self, c: list[Any]) -> sympy.Expr:
        tok, arglist = c
        args = arglist or []
        fname = str(tok)
        if fname in REDUCTIONS or any(isinstance(a, Comparison) for a in args):
            return curve_call(self.where, tok, fname, args)  # language/curve.py
        if fname in MATRIX_FUNCTIONS:
            return self._matrix_call(tok, fname, args)
        if fname not in FUNCTIONS:
            what = "a count, not a function" if fname in COUNTS or fname in DERIVED else "not a function"
            if lookup(fname) or fname in COUNTS or fname in DERIVED:
                raise self.where.error(f"'{fname}' is {what}; write it without parentheses", tok)
            raise self.where.error(
                f"unknown function '{fname}'{suggest(fname, [*FUNCTIONS, *REDUCTIONS])}; "
                f"known functions: {', '.join([*FUNCTIONS, *MATRIX_FUNCTIONS, *REDUCTIONS])}",
                tok,
            )
        fn, lo, hi = FUNCTIONS[fname]
        if len(args) < lo or (hi is not None and len(args) > hi):
            want = f"exactly {lo}" if lo == hi else f"at least {lo}"
            raise self.where.error(
                f"{fname}() takes {want} argument{'s' if lo > 1 else ''}, got {len(args)}", tok
            )
        if len(args) > MAX_ARGS:
            raise self.where.error(
                f"{fname}() of {len(args)} arguments; the limit is {MAX_ARGS}", tok)
        try:
            return fn(*args)  # type: ignore[no-any-return]
        except (ValueError, TypeError):
            # SymPy refuses min/max of a non-real constant such as sqrt(-2).
            raise self.where.error(
                f"{fname}() needs real arguments; "
                f"{', '.join(str(a) for a in args if a.is_number and not a.is_extended_real)} "
                "is not a real number", tok) from None

    def args(self, c: list[Any]) -> list[sympy.Expr]:
        return [_expr(a) for a in c]

    def comparison(self, c: list[Any]) -> Comparison:
        return Comparison(_expr(c[0]), c[1], _expr(c[2]))

    def add(self, c: list[Any]) -> _Chain:
        return _chain(c[0], True).push(_expr(c[1]))

    def sub(self, c: list[Any]) -> _Chain:
        return _chain(c[0], True).push(-_expr(c[1]))

    def mul(self, c: list[Any]) -> _Chain:
        return _chain(c[0], False).push(_expr(c[1]))

    def div(self, c: list[Any]) -> _Chain:
        return _chain(c[0], False).push(sympy.Pow(_expr(c[1]), -1))

    def neg(self, c: list[Any]) -> sympy.Expr:
        return -_expr(c[0])

    def pos(self, c: list[Any]) -> sympy.Expr:
        return _expr(c[0])

    def pow(self, c: list[Any]) -> sympy.Expr:
        base, op, exp = _expr(c[0]), c[1], _expr(c[2])
        if (problem := _pow_problem(base, exp)) is not None:
            raise self.where.error(problem, op)
        return _check_top(base**exp)

    def binding(self, c: list[Any]) -> tuple[Token, sympy.Expr]:
        return (c[0], _expr(c[1]))

    def constraint(self, c: list[Any]) -> _RawConstraint:
        lhs, op, rhs = c
        if op not in ("<=", ">="):
            fix = {"==": "an equality is two constraints: write `a >= b, a <= b`",
                   "!=": "write the side you want: `a >= b` or `a <= b`",
                   "=>": "did you mean '>='?", "=<": "did you mean '<='?",
                   ">": "write '>=': on relaxed counts a strict bound is the same bound",
                   "<": "write '<=': on relaxed counts a strict bound is the same bound"}[op]
            raise self.where.error(f"'{op}' is not a constraint; constraints use >= or <=: {fix}",
                                   op)
        return _RawConstraint(_expr(lhs), op, _expr(rhs))

    def constraints(self, c: list[_RawConstraint]) -> _ConstraintClause:
        return _ConstraintClause(c)

    def single_constraint(self, c: list[_RawConstraint]) -> _RawConstraint:
        return c[0]

    def start(self, c: list[Any]) -> list[Any]:
        return [_expr(x) if not isinstance(x, tuple) else x for x in c]


class _RawConstraint(tuple):  # type: ignore[type-arg]
    """``(lhs, op token, rhs)`` as the transformer builds it, names not yet resolved."""

    def __new__(cls, lhs: sympy.Expr, op: Token, rhs: sympy.Expr) -> _RawConstraint:
        return super().__new__(cls, (lhs, op, rhs))


class _ConstraintClause(list):  # type: ignore[type-arg]
    """The constraints after ``subject to``."""


class _ParenNewlines:
    """Post-lexer: newlines inside parentheses continue the line, as in Python."""

    always_accept = ("_SEP",)

    def __init__(self, pos: _Position) -> None:
        self.where = pos

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        depth = 0
        calls: list[bool] = []  # per open parenthesis: does it open a function call?
        previous = None
        for tok in stream:
            if tok.type == "LPAR":
                depth += 1
                calls.append(previous is not None and previous.type == "NAME")
                if depth > MAX_NESTING:
                    raise self.where.error(
                        f"parentheses nested more than {MAX_NESTING} deep; "
                        "split the formula with let-bindings",
                        tok,
                    )
                if calls[-1] and sum(calls) > MAX_CALL_NESTING:
                    raise self.where.error(
                        f"function calls nested more than {MAX_CALL_NESTING} deep "
                        f"(such as log(log(...))); no metric needs that many", tok)
            elif tok.type == "RPAR":
                depth = max(depth - 1, 0)
                if calls:
                    calls.pop()
            elif tok.type == "_SEP" and depth > 0 and tok != ";":
                continue
            previous = tok
            yield tok


def _friendly_expected(expected: set[str], parser: lark.Lark) -> str:
    words = []
    for term in sorted(expected):
        if term == "NAME":
            words.append("a name")
        elif term == "NUMBER":
            words.append("a number")
        elif term in ("_SEP", "$END"):
            words.append("end of formula")
        else:
            try:
                pat = parser.get_terminal(term).pattern
            except KeyError:
                continue
            if isinstance(pat, lark.lexer.PatternStr):
                words.append(f"'{pat.value}'")
            elif term == "POW_OP":
                words.append("'^'")
    words = sorted(set(words))
    return ", ".join(words) if words else "something else"


def _describe(tok: Token) -> str:
    if tok.type == "$END":
        return "end of formula"
    if tok.type == "_SEP":
        return "';'" if tok == ";" else "end of line"
    return f"'{tok}'"


def _keyword_hint(text: str, at: int) -> str:
    """The note for a misplaced ``=``: a keyword argument ``fbeta(beta=2)`` or a binding."""
    call = re.search(r"([A-Za-z][A-Za-z0-9_]*)\s*\(([^()]*)$", text[:at])
    if call is None:
        return " (a binding is `name = expression` on its own line)"
    fname = call.group(1)
    inside = call.group(2) + text[at:].split(")", 1)[0]
    pairs = re.findall(r"([A-Za-z][A-Za-z0-9_]*)\s*=\s*([^,()\n;]*)", inside)
    args = ", ".join(f"{k}={v.strip() or '<number>'}" for k, v in pairs)
    flags = " ".join(f"--param {k}={v.strip() or '<number>'}" for k, v in pairs)
    target = f'"{fname}"' if lookup(fname) is not None else '"<formula>"'
    return (" (formulas take no keyword arguments; give parameter values to compile: "
            f"metricc.compile({target}, {args}), or {flags} on the command line)")


def _implicit_product_hint(text: str, tok: Token) -> str:
    """`` (multiplication needs '*': write 2*TP)`` where a number or ``)`` directly precedes."""
    before = text[: tok.start_pos or 0].rstrip(" \t")
    left = re.search(r"(\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+|\))$", before)
    if left is None:
        return ""
    shown = left.group(1) if left.group(1) != ")" else "(...)"
    right = str(tok) if tok.type == "NAME" else "(...)"
    return f" (multiplication needs '*': write {shown}*{right})"


def _syntax_tree(text: str, pos: _Position, start: str = "start") -> Any:
    parser = _parser_for(pos)
    try:
        return parser.parse(text, start=start)
    except lark.exceptions.VisitError as e:
        if isinstance(e.orig_exc, MetricError):
            raise e.orig_exc from None
        raise
    except lark.exceptions.UnexpectedCharacters as e:
        at = cast(int, e.pos_in_stream)  # lark types the class attribute (None); raised, it is an int
        ch = text[at] if at < len(text) else ""
        hint = ""
        if ch in "'\"":
            hint = "; formulas have no strings"
        elif ch == "_" or ch.isalpha():
            hint = "; names start with a letter and use only ASCII letters, digits and '_'"
        elif ch.isdigit() or ch.isnumeric():
            hint = "; numbers use only the ASCII digits 0-9"
        raise MetricSyntaxError(
            f"unexpected character {ch!r}{hint}", text, e.line, e.column
        ) from None
    except lark.exceptions.UnexpectedToken as e:
        tok = e.token
        if (tok.type in ("$END", "_SEP") and _in_constraint(text, tok, start)
                and (missing := _constraint_hint(text, tok, e.expected))):
            line = tok.line if tok.type == "_SEP" and tok.line else len(text.splitlines() or [""])
            column = (tok.column if tok.type == "_SEP" and tok.column
                      else len((text.splitlines() or [""])[-1]) + 1)
            raise MetricSyntaxError(missing, text, line or 1, column or 1) from None
        if tok.type == "$END":
            if not text.strip() or not re.sub(r"#[^\n]*", "", text).strip(" \t\n;"):
                raise MetricSyntaxError("empty formula: write an expression such as TP/(TP+FP)",
                                        text, 1, 1) from None
            lines = text.rstrip().splitlines() or [""]
            last = re.split(r"[;\n]", re.sub(r"#[^\n]*", "", text).strip(" \t\n;"))[-1]
            if re.match(r"\s*[A-Za-z][A-Za-z0-9_]*\s*=", last):
                raise MetricSyntaxError(
                    "the last line must be the metric expression, not a binding",
                    text, len(lines), 1,
                ) from None
            raise MetricSyntaxError(
                f"formula ends too early; expected {_friendly_expected(e.expected, parser)}",
                text, len(lines), len(lines[-1]) + 1,
            ) from None
        msg = f"unexpected {_describe(tok)}; expected {_friendly_expected(e.expected, parser)}"
        if set(e.expected) <= {"_SEP", "$END"}:
            msg = (f"unexpected {_describe(tok)}: a formula is one expression, on its last line; "
                   "earlier lines must be bindings `name = expression`")
        if tok.type == "EQUAL" and _in_constraint(text, tok, start):
            msg = "'=' is not a constraint; constraints use >= or <=, as in `recall >= 0.9`"
        elif tok.type == "EQUAL":
            msg += _keyword_hint(text, tok.start_pos or 0)
        elif tok.type in ("NAME", "LPAR"):
            msg += _implicit_product_hint(text, tok)
        raise MetricSyntaxError(msg, text, tok.line or 1, tok.column or 1) from None
    except lark.exceptions.UnexpectedInput as e:  # UnexpectedEOF and friends
        raise MetricSyntaxError("could not parse formula", text, getattr(e, "line", 1) or 1,
                                getattr(e, "column", 1) or 1) from None


def _in_constraint(text: str, tok: Token, start: str) -> bool:
    """Whether ``tok`` stands in a constraint: LALR's expected sets mix contexts, so
    ask the text (a ``subject to`` before it) or the start rule."""
    end = len(text) if tok.type == "$END" or tok.start_pos is None else tok.start_pos
    return start == "single_constraint" or re.search(r"\bsubject\s+to\b", text[:end]) is not None


def _constraint_hint(text: str, tok: Token, expected: set[str]) -> str | None:
    """A plain message for a constraint that stops short, or ``None``."""
    end = len(text) if tok.type == "$END" or tok.start_pos is None else tok.start_pos
    before = re.sub(r"#[^\n]*", "", text[:end])
    if m := re.search(r"(>=|<=)\s*$", before):
        return (f"the constraint has no bound after '{m.group(1)}': write a number or a "
                "formula, as in `recall >= 0.9`")
    if "COMPARE" in expected:
        return ("a constraint compares two sides with >= or <=, as in `recall >= 0.9`; "
                "this one has no comparison")
    return None


_LOCK = threading.Lock()
_COMMENT = re.compile(r"#[^\n]*")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_]*|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|\*\*|[^\s\\]")


@lru_cache(maxsize=1)
def _shared_parser() -> tuple[lark.Lark, ToSympy, _ParenNewlines]:
    # Building the LALR tables costs ~50 ms, so one parser is shared; the
    # per-call position bookkeeping is swapped in under a lock.
    blank = _Position("")
    transformer = ToSympy(blank)
    postlex = _ParenNewlines(blank)
    parser = lark.Lark(
        grammar_text(),
        parser="lalr",
        start=["start", "single_constraint"],
        transformer=transformer,
        postlex=postlex,
        maybe_placeholders=True,
    )
    return parser, transformer, postlex


def _parser_for(pos: _Position) -> lark.Lark:
    parser, transformer, postlex = _shared_parser()
    transformer.where = pos
    postlex.where = pos
    return parser


def parse(text: str) -> Formula | MatrixFormula | CurveFormula:
    """Parse formula text into a :class:`Formula` (or a :class:`MatrixFormula` when it
    uses the K x K matrix: ``C[i, j]``, ``sum``, ``row``, ``col``; a :class:`CurveFormula` when it
    uses the curve: ``area``, ``steps``, ``best``).

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
    pos = _Position(text)
    try:
        with _LOCK:
            parts = _syntax_tree(text, pos)
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
    pos = _Position(text)
    try:
        with _LOCK:
            raw = _syntax_tree(text, pos, start="single_constraint")
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


def _resolve_constraint(raw: _RawConstraint, text: str, span: tuple[int, int],
                        defined: dict[str, sympy.Expr], pos: _Position) -> ParsedConstraint:
    """Resolve the names of one constraint; an unknown name is a positioned error."""
    lhs, op, rhs = raw
    sides = []
    for side in (lhs, rhs):
        subs: dict[sympy.Symbol, sympy.Expr] = {}
        for sym in side.atoms(_Name):
            name = sym.name
            if name in defined:
                subs[sym] = defined[name]
            elif name in COUNTS:
                subs[sym] = COUNTS[name]
            elif name in DERIVED:
                subs[sym] = DERIVED[name]
            elif (metric := lookup(name)) is not None:
                if metric.matrix or metric.curve:
                    kind = "K x K" if metric.matrix else "curve"
                    raise _error_at(text, span, name, f"'{name}' is a {kind} metric; constraints "
                                    "apply to 2 x 2 metrics for now")
                inner = _library_formula(metric.name)
                if inner.parameters and not set(inner.parameters) <= set(inner.defaults):
                    missing = sorted(set(inner.parameters) - set(inner.defaults))
                    raise _error_at(text, span, name, f"metric '{name}' has parameters "
                                    f"{', '.join(missing)} with no default; write its formula "
                                    "with numbers in the constraint")
                subs[sym] = substitute(inner.expr, {sympy.Symbol(k): sympy.Rational(str(v))
                                                    for k, v in inner.defaults.items()})
            else:
                known = known_names() + list(defined)
                raise _error_at(text, span, name, f"unknown metric '{name}' in a constraint"
                                f"{suggest(name, known)}; each side is a number, a count, a "
                                "named metric (`metricc list`) or a formula over them")
        expr = side.xreplace(subs) if subs else side
        check_size(expr, "constraint")
        sides.append(expr)
    line, column = _line_column(text, span[0])
    return ParsedConstraint(text[span[0]:span[1]], sides[0], str(op), sides[1], line, column)


def _error_at(text: str, span: tuple[int, int], name: str, message: str) -> MetricSyntaxError:
    m = re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text[span[0]:span[1]])
    offset = span[0] + (m.start() if m else 0)
    return MetricSyntaxError(message, text, *_line_column(text, offset))


def _uses_matrix(parts: list[Any]) -> bool:
    *bindings, body = parts
    exprs = [body, *(e for _, e in bindings)]
    if any(is_matrix_expr(e) for e in exprs):
        return True
    for e in exprs:
        for sym in e.atoms(_Name):
            metric = lookup(sym.name)
            if metric is not None and metric.matrix:
                return True
    return False


def _resolve(text: str, parts: list[Any], pos: _Position) -> Formula | MatrixFormula | CurveFormula:
    clause: _ConstraintClause | None = None
    if parts and isinstance(parts[-1], _ConstraintClause):
        *parts, clause = parts
    *bindings, body = parts
    if uses_curve([body, *(e for _, e in bindings), *(x for c in clause or [] for x in (c[0], c[2]))]):
        return resolve_curve(text, bindings, body, clause is not None, pos, FUNCTIONS, parse)
    if _uses_matrix(parts):
        if clause:
            raise MetricSyntaxError("constraints apply to 2 x 2 metrics for now; a K x K "
                                    "formula cannot take a 'subject to' clause", text,
                                    *_line_column(text, text.rfind("subject")))
        return resolve_matrix(text, bindings, body, pos, FUNCTIONS, _library_matrix)
    defined: dict[str, sympy.Expr] = {}
    later = {str(tok): tok for tok, _ in bindings}
    params: set[str] = set()
    defaults: dict[str, float] = {}
    metrics: list[str] = []

    def resolve(expr: sympy.Expr, upcoming: set[str]) -> sympy.Expr:
        subs: dict[sympy.Symbol, sympy.Expr] = {}
        for sym in expr.atoms(_Name):
            name = sym.name
            if name in defined:
                subs[sym] = defined[name]
            elif name in COUNTS:
                subs[sym] = COUNTS[name]
            elif name in DERIVED:
                # A total not (yet) rebound is the built-in one, as a Python name is
                # the builtin until a local assignment shadows it.
                subs[sym] = DERIVED[name]
            elif name in upcoming:
                raise pos.error(f"'{name}' is used before it is defined", pos.first_use[name])
            elif (metric := lookup(name)) is not None:
                inner = _library_formula(metric.name)
                if metric.name not in metrics:
                    metrics.append(metric.name)
                subs[sym] = inner.expr
                for k, v in inner.defaults.items():
                    defaults.setdefault(k, v)
                params.update(inner.parameters)
            else:
                params.add(name)
                subs[sym] = sympy.Symbol(name)
        return expr.xreplace(subs) if subs else expr

    remaining = set(later)
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
        remaining.discard(name)
        defined[name] = resolve(expr, remaining | {name})
        check_size(defined[name], f"binding '{name}'")
    result = resolve(body, set())
    check_size(result)
    unused = set(params) & set(defined)
    params -= unused
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
