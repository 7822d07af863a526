"""Size limits of the language: every formula is refused or answered in bounded time and memory.

The parser refuses formulas past these limits before SymPy sees them (``docs/numerics.md``).
"""

from __future__ import annotations

import math

import sympy

from ..errors import MetricError

MAX_LENGTH = 100_000
#: Names, numbers and operators; counted before anything is parsed, so a huge
#: formula is refused in milliseconds (one token builds about one node, see MAX_NODES).
MAX_TOKENS = 10_000
MAX_NESTING = 500
#: Function calls inside function calls (``log(log(...))``): each level makes
#: SymPy's recursive steps (printing, derivatives, assumptions) one level deeper.
MAX_CALL_NESTING = 30
#: Depth of the expression tree once bindings are substituted (the deepest named
#: metric has 8), so no later recursive step meets Python's recursion limit.
MAX_DEPTH = 60
#: Constants stay within 10**±MAX_EXPONENT (metricc.budget; floats reach 1e308), so neither
#: `9^9^9` nor a chain of bindings squaring 1e300 makes SymPy build huge integers.
MAX_EXPONENT = 300
#: Largest |exponent| on a non-constant base: `(TP+1)^(10^6)` is no metric.
MAX_POWER = 100
#: Largest expression tree once bindings are substituted; the derivative of a
#: chain `b = a*(a+1); c = b*(b+1); ...` doubles with each line, and every stage pays
#: SymPy per node: at 570-600 nodes compile + check + loss + verify take 5.5-8.2 s of CPU
#: (a sum of 57 square roots is the slowest shape measured), at 900 up to 10 s.
MAX_NODES = 600
#: Most arguments of one min()/max(): its derivative grows with the square of the
#: count (each argument is compared with the min of the others): 8 took 11 s.
MAX_ARGS = 6
#: Largest (arguments - 1) * operations of one min()/max() once bindings are
#: substituted: min(mcc, f1, g_mean, cohen_kappa) is about 300 and takes 6 s
#: through compile, check, loss and verify; six named metrics took 12 s.
MAX_MINMAX_WORK = 400
#: Largest factors * operations of one product once bindings are substituted: its
#: derivative has one copy of the product per factor (a 20-line chain `a_i = a_(i-1) * (TP+i)/(n+i)`,
#: 12,500, took 10 s in compile + check + loss + verify; 100 lines did not finish).
MAX_PRODUCT_WORK = 6_000


def log10_abs(n: sympy.Number) -> float:
    """``log10 |n|`` of a nonzero SymPy number, to within 1 (cheap for huge ints)."""
    if n.is_Rational:
        return (abs(int(n.p)).bit_length() - int(n.q).bit_length()) * math.log10(2)
    return math.log10(abs(float(n))) if float(n) != 0 else -math.inf


def check_constants(expr: sympy.Expr, what: str) -> None:
    """Raise MetricError if a constant of ``expr`` is beyond 10^±MAX_EXPONENT.

    For what SymPy derives from a formula: the derivative of
    ``1e299*TP/(1e-299*FP + TP)`` holds 10^598, which no float can hold.
    """
    for n in expr.atoms(sympy.Number):
        if n.is_finite and n != 0 and abs(log10_abs(n)) > MAX_EXPONENT:
            raise MetricError(
                f"{what} needs a constant near 10^{round(log10_abs(n))}, beyond "
                f"10^±{MAX_EXPONENT}; write the formula with smaller constants")


def number_problem(e: sympy.Expr) -> str | None:
    """Why a node breaks the size limits, or ``None``."""
    if e.is_Number:
        if e.is_finite is False or e is sympy.nan:
            return None  # zoo/nan: reported as "divides by zero" downstream
        if e != 0 and abs(log10_abs(e)) > MAX_EXPONENT:
            return f"a constant is out of range (beyond 10^±{MAX_EXPONENT})"
    elif isinstance(e, sympy.Pow) and e.exp.is_Number and not e.base.is_Number:
        if abs(e.exp) > MAX_POWER:
            return f"exponent {e.exp} is too large (the limit is ±{MAX_POWER})"
    return None


def pow_problem(base: sympy.Expr, exp: sympy.Expr) -> str | None:
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
                if isinstance(e, sympy.Pow) and (problem := pow_problem(*args)) is not None:
                    raise MetricError(problem)
                memo[key] = check_top(e.func(*args)) if args != list(e.args) else e
        return memo[key]

    return walk(expr)


def check_top(e: sympy.Expr) -> sympy.Expr:
    """Size limits on the nodes one operation can create: ``e``, its children and theirs."""
    nodes = [e, *e.args]
    nodes += [g for a in e.args if a.is_Mul or a.is_Pow for g in a.args]
    for node in nodes:
        if (problem := number_problem(node)) is not None:
            raise MetricError(f"{problem}; metrics need no such numbers")
    return e


def substituted(bindings: object, metrics: object) -> tuple[str, ...]:
    """What :func:`check_size`'s message says was substituted into a formula: its bindings,
    its named metrics (each a truthy or falsy value: whether the formula has any)."""
    return (("bindings",) if bindings else ()) + (("named metrics",) if metrics else ())


def check_size(expr: sympy.Expr, what: str = "formula",
               seen: dict[int, tuple[sympy.Expr, tuple[int, int]]] | None = None,
               expanded: tuple[str, ...] = ()) -> None:
    """Raise MetricError if ``expr`` breaks a size limit; shared subtrees are walked once.

    ``expanded`` names what was substituted into ``expr`` (``("bindings", "named metrics")``),
    for the message: the size counts them at their full length.

    ``seen`` carries the sizes over from earlier calls (a binding chain reuses each binding's
    terms in the next; walking each binding afresh is quadratic in the chain's length).
    It holds the subtrees too, so that an ``id`` is not reused while it is in there.
    """
    memo = {} if seen is None else seen

    def size(e: sympy.Expr) -> tuple[int, int]:
        """(nodes, depth), both capped just past their limits."""
        key = id(e)
        if key not in memo:
            if (problem := number_problem(e)) is not None:
                raise MetricError(f"{what}: {problem}; metrics need no such numbers")
            parts = [size(a) for a in e.args]
            found = (min(1 + sum(n for n, _ in parts), MAX_NODES + 1),
                     min(1 + max((d for _, d in parts), default=0), MAX_DEPTH + 1))
            memo[key] = (e, found)
            if isinstance(e, (sympy.Min, sympy.Max)) and \
                    (len(e.args) - 1) * found[0] > MAX_MINMAX_WORK:
                raise MetricError(
                    f"{what}: {type(e).__name__.lower()}() of {len(e.args)} arguments of "
                    f"{found[0]} operations in all is too large to analyse (its "
                    "derivative compares each argument with the others); use fewer or "
                    "simpler arguments")
            if e.is_Mul and len(e.args) * found[0] > MAX_PRODUCT_WORK:
                raise MetricError(
                    f"{what}: a product of {len(e.args)} factors of {found[0]} operations in "
                    "all is too large to differentiate (its derivative has a copy of the product "
                    "per factor); use fewer factors, or take logs")
        return memo[key][1]

    n, depth = size(expr)
    names = " and ".join(expanded)
    once = f" once its {names} are substituted" if expanded else ""
    if depth > MAX_DEPTH:
        raise MetricError(
            f"{what} nests more than {MAX_DEPTH} operations deep{once}; write it with fewer "
            f"nested functions{', parentheses or ' + names if expanded else ' and parentheses'}"
        )
    if n > MAX_NODES:
        raise MetricError(
            f"{what} is too large to analyse (more than {MAX_NODES} operations{once}); write "
            f"it with fewer terms{', or fewer or smaller ' + names if expanded else ''}"
        )
