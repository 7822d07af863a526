"""Syntax errors in plain words: Lark's exceptions -> :class:`MetricSyntaxError` with a hint."""

from __future__ import annotations

import re
from typing import Any, cast

import lark
from lark import Token

from ..errors import MetricError, MetricSyntaxError
from ..library import lookup
from .syntax import Position, parser_for

__all__ = ["syntax_tree"]


#: Terminals named in words; any other with a fixed pattern is shown as that text.
_TERM_WORDS = {"NAME": "a name", "NUMBER": "a number", "_SEP": "end of formula",
               "$END": "end of formula", "POW_OP": "'^'"}


def _friendly_expected(expected: set[str], parser: lark.Lark) -> str:
    words = set()
    for term in expected:
        if term in _TERM_WORDS:
            words.add(_TERM_WORDS[term])
            continue
        try:
            pat = parser.get_terminal(term).pattern
        except KeyError:
            continue
        if isinstance(pat, lark.lexer.PatternStr):
            words.add(f"'{pat.value}'")
    return ", ".join(sorted(words)) or "something else"


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


#: Python words a formula may be written with by habit (``and`` joins constraints).
_PYTHON_WORDS = frozenset({"if", "else", "elif", "or", "not", "lambda", "for", "in", "is",
                           "while", "return", "def"})


def _implicit_product_hint(text: str, tok: Token) -> str:
    """`` (multiplication needs '*': write 2*TP)`` where a number or ``)`` directly precedes;
    the note for a Python keyword (``... if TP else 0``) where one stands."""
    if tok.type == "NAME" and str(tok) in _PYTHON_WORDS:
        return (f" ('{tok}' is Python; the formula language has no conditionals or Python "
                "keywords: write the cases with max/min (max(TP - FP, 0)) or name parts in "
                "bindings (`p = TP/(TP+FP)` on its own line); where a formula is undefined (0/0) "
                "the loss guards it and value()/score() take zero_division=)")
    before = text[: tok.start_pos or 0].rstrip(" \t")
    left = re.search(r"(\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+|\))$", before)
    if left is None:
        return ""
    shown = left.group(1) if left.group(1) != ")" else "(...)"
    right = str(tok) if tok.type == "NAME" else "(...)"
    return f" (multiplication needs '*': write {shown}*{right})"


def syntax_tree(text: str, pos: Position, start: str = "start") -> Any:
    parser = parser_for(pos)
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
        if tok.type == "COMPARE" and (first := _earlier_comparison(text, tok)):
            msg = (f"comparisons do not chain: '{first}' already compares, and a constraint "
                   f"(or a bound in best()) compares two sides once; write each bound on its "
                   "own, as in `recall >= 0.8, recall <= 0.95`")
        elif tok.type == "EQUAL" and _in_constraint(text, tok, start):
            msg = "'=' is not a constraint; constraints use >= or <=, as in `recall >= 0.9`"
        elif tok.type == "EQUAL":
            msg += _keyword_hint(text, tok.start_pos or 0)
        elif tok.type in ("NAME", "LPAR"):
            msg += _implicit_product_hint(text, tok)
        raise MetricSyntaxError(msg, text, tok.line or 1, tok.column or 1) from None
    except lark.exceptions.UnexpectedInput as e:  # UnexpectedEOF and friends
        raise MetricSyntaxError("could not parse formula", text, getattr(e, "line", 1) or 1,
                                getattr(e, "column", 1) or 1) from None


def _earlier_comparison(text: str, tok: Token) -> str | None:
    """The comparison ``a >= b`` that ``tok`` (a second comparison operator) would chain
    onto, read back to the start of its constraint or argument, or ``None``."""
    before = text[: tok.start_pos or 0]
    start = max((m.end() for m in re.finditer(r"\bsubject\s+to\b|\band\b|[,(;\n]", before)),
                default=0)
    part = re.sub(r"#[^\n]*", "", before[start:]).strip()
    return part if re.search(r">=|<=|==|!=|=>|=<|>|<", part) else None


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
