"""The Lark side of the parser: the grammar, the transformer that builds SymPy as LALR
parses (one method per ``-> alias`` of ``grammar/metric.lark``), and the shared parser.

Names stay unresolved here (:class:`Name`); :mod:`metricc.language.parse` resolves them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import lark
import sympy
from lark import Token

from ..errors import MetricError, MetricSyntaxError, suggest
from ..library import lookup
from .curve import REDUCTIONS, Comparison, curve_call
from .functions import FUNCTIONS as TABLE
from .functions import MATRIX_FUNCTIONS
from .groups import GROUP_REDUCTIONS, group_call
from .limits import (
    MAX_ARGS,
    MAX_CALL_NESTING,
    MAX_EXPONENT,
    MAX_NESTING,
    check_top,
    log10_abs,
    number_problem,
    pow_problem,
)
from .matrix import ColTotal, Delta, Entry, PresentCall, RowTotal, SumOf
from .symbols import COUNTS, DERIVED

__all__ = [
    "FUNCTIONS",
    "LOCK",
    "ConstraintClause",
    "Name",
    "ParenNewlines",
    "Position",
    "RawConstraint",
    "ToSympy",
    "grammar_text",
    "parser_for",
]

#: name -> (sympy constructor, minimum arity, maximum arity or None): the 2x2 language's
#: functions, a view of the one table in :mod:`metricc.language.functions`.
FUNCTIONS: dict[str, tuple[Any, int, int | None]] = {
    n: (f.build, f.min_args, f.max_args) for n, f in TABLE.items() if not f.matrix_only}


def grammar_text() -> str:
    """The grammar: from the installed wheel, else from the source checkout."""
    packaged = resources.files("metricc").joinpath("grammar/metric.lark")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    checkout = Path(__file__).resolve().parents[2] / "grammar" / "metric.lark"
    return checkout.read_text(encoding="utf-8")


class Name(sympy.Symbol):
    """A symbol as written in the text; resolved to a count, binding, metric or parameter."""


class Position:
    def __init__(self, text: str) -> None:
        self.text = text
        self.first_use: dict[str, Token] = {}
        self.call_tokens: dict[str, Token] = {}

    def error(self, message: str, tok: Token) -> MetricSyntaxError:
        return MetricSyntaxError(message, self.text, tok.line or 1, tok.column or 1)

    def fail(self, message: str, name: str) -> MetricError:
        """The error at ``name``'s first use (or call); unpositioned where it has none."""
        t = self.first_use.get(name) or self.call_tokens.get(name)
        return self.error(message, t) if t is not None else MetricError(message)


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
            if (problem := number_problem(self.coeff)) is not None:
                raise MetricError(f"{problem}; metrics need no such numbers")
        else:
            self.terms.append(e)
        return self

    def build(self) -> sympy.Expr:
        op = sympy.Add if self.is_sum else sympy.Mul
        return check_top(op(self.coeff, *self.terms))


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

    def __init__(self, pos: Position) -> None:
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
        if value != 0 and abs(log10_abs(value)) > MAX_EXPONENT:
            raise self.where.error(f"number is out of range (beyond 10^±{MAX_EXPONENT})", tok)
        return value

    def name(self, c: list[Token]) -> sympy.Expr:
        tok = c[0]
        self.where.first_use.setdefault(str(tok), tok)
        return Name(str(tok))

    def index(self, c: list[Any]) -> sympy.Expr:
        tok, args = c
        base = str(tok)
        self.where.first_use.setdefault(base, tok)
        if len(args) != 2 or not all(isinstance(a, Name) for a in args):
            raise self.where.error(
                f"{base}[...] takes two class-index names, row then column, e.g. {base}[i, j]",
                tok)
        return Entry(Name(base), *args)

    def _matrix_call(self, tok: Token, fname: str, args: list[Any]) -> sympy.Expr:
        self.where.call_tokens.setdefault(fname, tok)
        names_ok = all(isinstance(a, Name) for a in args)
        if fname == "sum":
            if len(args) < 2 or not all(isinstance(a, Name) for a in args[:-1]):
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
        if fname in GROUP_REDUCTIONS:
            return group_call(self.where, tok, fname, args)  # language/groups.py
        if fname in MATRIX_FUNCTIONS:
            return self._matrix_call(tok, fname, args)
        if fname not in FUNCTIONS:
            what = "a count, not a function" if fname in COUNTS or fname in DERIVED else "not a function"
            if lookup(fname) or fname in COUNTS or fname in DERIVED:
                raise self.where.error(f"'{fname}' is {what}; write it without parentheses", tok)
            raise self.where.error(
                f"unknown function '{fname}'{suggest(fname, [*FUNCTIONS, *REDUCTIONS, *GROUP_REDUCTIONS])}; "
                f"known functions: {', '.join([*FUNCTIONS, *MATRIX_FUNCTIONS, *REDUCTIONS, *GROUP_REDUCTIONS])}",
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
        if (problem := pow_problem(base, exp)) is not None:
            raise self.where.error(problem, op)
        return check_top(base**exp)

    def binding(self, c: list[Any]) -> tuple[Token, sympy.Expr]:
        return (c[0], _expr(c[1]))

    def constraint(self, c: list[Any]) -> RawConstraint:
        lhs, op, rhs = c
        if op not in ("<=", ">="):
            fix = {"==": "an equality is two constraints: write `a >= b, a <= b`",
                   "!=": "write the side you want: `a >= b` or `a <= b`",
                   "=>": "did you mean '>='?", "=<": "did you mean '<='?",
                   ">": "write '>=': on relaxed counts a strict bound is the same bound",
                   "<": "write '<=': on relaxed counts a strict bound is the same bound"}[op]
            raise self.where.error(f"'{op}' is not a constraint; constraints use >= or <=: {fix}",
                                   op)
        return RawConstraint(_expr(lhs), op, _expr(rhs))

    def constraints(self, c: list[RawConstraint]) -> ConstraintClause:
        return ConstraintClause(c)

    def single_constraint(self, c: list[RawConstraint]) -> RawConstraint:
        return c[0]

    def start(self, c: list[Any]) -> list[Any]:
        return [_expr(x) if not isinstance(x, tuple) else x for x in c]


class RawConstraint(tuple):  # type: ignore[type-arg]
    """``(lhs, op token, rhs)`` as the transformer builds it, names not yet resolved."""

    def __new__(cls, lhs: sympy.Expr, op: Token, rhs: sympy.Expr) -> RawConstraint:
        return super().__new__(cls, (lhs, op, rhs))


class ConstraintClause(list):  # type: ignore[type-arg]
    """The constraints after ``subject to``."""


class ParenNewlines:
    """Post-lexer: newlines inside parentheses continue the line, as in Python."""

    always_accept = ("_SEP",)

    def __init__(self, pos: Position) -> None:
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


LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _shared_parser() -> tuple[lark.Lark, ToSympy, ParenNewlines]:
    # Building the LALR tables costs ~50 ms, so one parser is shared; the
    # per-call position bookkeeping is swapped in under a lock.
    blank = Position("")
    transformer = ToSympy(blank)
    postlex = ParenNewlines(blank)
    parser = lark.Lark(
        grammar_text(),
        parser="lalr",
        start=["start", "single_constraint"],
        transformer=transformer,
        postlex=postlex,
        maybe_placeholders=True,
    )
    return parser, transformer, postlex


def parser_for(pos: Position) -> lark.Lark:
    parser, transformer, postlex = _shared_parser()
    transformer.where = pos
    postlex.where = pos
    return parser
