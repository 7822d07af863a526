"""The formula language: every construct of grammar/metric.lark, and every error."""

from __future__ import annotations

import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

import metricc
from metricc.language.parse import parse

TP, FP, FN, TN = sympy.symbols("TP FP FN TN")
b = sympy.Symbol("b")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TP", TP),
        ("TP + FP - FN * TN / 2", TP + FP - FN * TN / 2),
        ("P + N + PP + PN + n", (TP + FN) + (FP + TN) + (TP + FP) + (FN + TN) + (TP + FP + FN + TN)),
        ("1e-3 * TP + 2.5E2 * FP + .5 * FN + 3. * TN", TP / 1000 + 250 * FP + FN / 2 + 3 * TN),
        ("TP^2 + FP**3", TP**2 + FP**3),
        ("-TP^2", -(TP**2)),
        ("2^-1 * TP", TP / 2),
        ("TP^2^3", TP ** (2**3)),
        ("--TP + +FP", TP + FP),
        ("sqrt(TP) + log(FP) + exp(FN) + abs(TN)", sympy.sqrt(TP) + sympy.log(FP) + sympy.exp(FN) + sympy.Abs(TN)),
        ("min(TP, FP) + max(TP, FP, FN)", sympy.Min(TP, FP) + sympy.Max(TP, FP, FN)),
        ("TP / (TP +\n   FP)", TP / (TP + FP)),
        ("TP  # a comment\n", TP),
        ("# leading comment\nTP/(TP+FP)", TP / (TP + FP)),
        ("p = TP/(TP+FP); r = TP/(TP+FN); p*r", TP**2 / ((TP + FP) * (TP + FN))),
        ("\n    p = TP/(TP+FP)\n    r = TP/(TP+FN)\n    2*p*r/(p+r)\n",
         2 * (TP / (TP + FP)) * (TP / (TP + FN)) / (TP / (TP + FP) + TP / (TP + FN))),
        ("recall + 0", TP / (TP + FN)),
        ("TP/(TP + b*FP)", TP / (TP + b * FP)),
    ],
)
def test_constructs(text: str, expected: sympy.Expr) -> None:
    assert sympy.simplify(parse(text).expr - expected) == 0


def test_named_metrics_and_parameters_inside_formulas() -> None:
    f = parse("(f1 + mcc)/2 + fbeta")
    assert f.parameters == ("beta",)
    assert f.defaults == {"beta": 1.0}
    m = metricc.compile("(f1 + mcc)/2")
    f1, mcc = metricc.compile("f1"), metricc.compile("mcc")
    counts = {"tp": 30, "fp": 5, "fn": 10, "tn": 955}
    assert m.value(**counts) == pytest.approx((f1.value(**counts) + mcc.value(**counts)) / 2, rel=1e-12)


def test_binding_may_shadow_a_metric_name() -> None:
    m = metricc.compile("precision = TP/(TP+FP+1)\nprecision")
    assert m.value(tp=1, fp=0, fn=0, tn=0) == 0.5


def _syntax_error(text: str) -> metricc.MetricSyntaxError:
    with pytest.raises(metricc.MetricSyntaxError) as info:
        metricc.compile(text)
    return info.value


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("TP +", 1, 5, "ends too early"),
        ("TP + * FP", 1, 6, "unexpected '*'"),
        ("x = TP\nx = FP\nx", 2, 1, "defined twice"),
        ("y = x\nx = TP\ny", 1, 5, "used before it is defined"),
        ("sqrt(TP, FP)", 1, 1, "exactly 1 argument"),
        ("max(TP)", 1, 1, "at least 2 arguments"),
        ("foo(TP)", 1, 1, "unknown function 'foo'"),
        ("sqr(TP)", 1, 1, "did you mean 'sqrt'"),
        ("TP = 3\nTP", 1, 1, "cannot be redefined"),
        ("TP(3)", 1, 1, "without parentheses"),
        ("__import__('os')", 1, 1, "unexpected character '_'"),
        ("TP + 'x'", 1, 6, "formulas have no strings"),
        ("a = TP", 1, 1, "last line must be the metric"),
        ("", 1, 1, "empty formula"),
        ("TP/(TP+FP", 1, 10, "expected ')'"),
        ("TP\n+ * FP", 2, 1, "earlier lines must be bindings"),
        ("p = TP\n p * * FP", 2, 6, "unexpected '*'"),
    ],
)
def test_errors_have_position_and_caret(text: str, line: int, column: int, words: str) -> None:
    err = _syntax_error(text)
    assert isinstance(err, ValueError)
    assert (err.line, err.column) == (line, column)
    assert words in str(err)
    src_line, caret_line = str(err).splitlines()[1:3]
    assert caret_line.strip() == "^"
    assert caret_line.index("^") - 4 == column - 1
    assert src_line[4:] == (text.splitlines() or [""])[line - 1]


def test_missing_and_unknown_parameters() -> None:
    with pytest.raises(metricc.MissingParameterError, match="b=<number>") as info:
        metricc.compile("TP/(TP + b*FP)")
    assert info.value.missing == ["b"]
    with pytest.raises(metricc.MetricError, match="did you mean 'TP'"):
        metricc.compile("tp/(tp+FP)")
    with pytest.raises(metricc.MetricError, match="did you mean 'precision'"):
        metricc.compile("precison + recall")
    with pytest.raises(metricc.MetricError, match=r"unknown parameter 'bta'.*did you mean 'beta'"):
        metricc.compile("fbeta", bta=2.0)
    with pytest.raises(metricc.MetricError, match="must be a number"):
        metricc.compile("fbeta", beta="2")
    with pytest.raises(metricc.MetricError, match="must be finite"):
        metricc.compile("fbeta", beta=float("nan"))


def test_unknown_metric_name_suggests() -> None:
    with pytest.raises(metricc.UnknownNameError, match="did you mean 'mcc'"):
        metricc.compile("mccc")


@pytest.mark.parametrize("text", ["2 + 3", "b * 2", "log(2)"])
def test_formula_without_counts(text: str) -> None:
    with pytest.raises(metricc.MetricError):
        metricc.compile(text, **({"b": 1.0} if "b" in text else {}))


def test_min_max_of_a_complex_constant() -> None:
    err = _syntax_error("max(sqrt(-2), TP)")
    assert "max() needs real arguments; sqrt(2)*I is not a real number" in str(err)
    assert (err.line, err.column) == (1, 1)


def test_division_by_zero_everywhere() -> None:
    with pytest.raises(metricc.MetricError, match="divides by zero"):
        metricc.compile("TP/0")


def test_deep_nesting_is_parsed_or_refused_cleanly() -> None:
    assert parse("(" * 400 + "TP" + ")" * 400).expr == TP
    with pytest.raises(metricc.MetricSyntaxError, match="nested more than"):
        parse("(" * 2000 + "TP" + ")" * 2000)
    deep = "TP"
    for _ in range(400):
        deep = f"1/(1 + {deep})"
    try:
        metricc.compile(deep)
    except metricc.MetricError:
        pass  # a clear refusal is fine; any other exception fails the test


def test_non_string_formula() -> None:
    with pytest.raises(metricc.MetricError, match="must be a string"):
        metricc.compile(42)  # type: ignore[arg-type]


# --- property tests -----------------------------------------------------------------------

_COUNTS = st.sampled_from(["TP", "FP", "FN", "TN"])


@st.composite
def formulas(draw: st.DrawFn, depth: int = 0) -> tuple[str, sympy.Expr]:
    """Random well-formed formula text together with the same expression built directly."""
    if depth > 3 or draw(st.booleans()):
        if draw(st.booleans()):
            name = draw(_COUNTS)
            return name, sympy.Symbol(name)
        k = draw(st.integers(1, 9))
        return str(k), sympy.Integer(k)
    op = draw(st.sampled_from(["+", "-", "*", "/", "^", "neg", "sqrt", "exp", "max"]))
    a_text, a = draw(formulas(depth + 1))
    if op == "neg":
        return f"-({a_text})", -a
    if op == "sqrt":  # of |a|: max() below needs real arguments, as the grammar's users do
        return f"sqrt(abs({a_text}))", sympy.sqrt(sympy.Abs(a))
    if op == "exp":
        return f"exp(({a_text})/100)", sympy.exp(a / 100)
    b_text, b_ = draw(formulas(depth + 1))
    if op == "max":
        return f"max({a_text}, {b_text})", sympy.Max(a, b_)
    if op == "^":
        k = draw(st.integers(0, 3))
        return f"({a_text})^{k}", a**k
    sym = {"+": a + b_, "-": a - b_, "*": a * b_, "/": a / (b_ + 1000)}[op]
    if op == "/":
        return f"({a_text}) / (({b_text}) + 1000)", sym
    return f"({a_text}) {op} ({b_text})", sym


@given(formulas(), st.tuples(*[st.integers(1, 50)] * 4))
def test_random_formulas_parse_like_direct_sympy(f: tuple[str, sympy.Expr], counts: tuple[int, ...]) -> None:
    text, direct = f
    parsed = parse(text).expr
    # Same tree up to how SymPy distributes a sign inside Max/Min (-(TP + 2) vs -TP - 2), or
    # factors an Abs once names are substituted (|a/(b+1000)| as |a|/|b+1000| or
    # |a|*|1/(b+1000)|): equal, written differently.
    assert (parsed == direct or sympy.expand(parsed) == sympy.expand(direct)
            or sympy.simplify(parsed - direct) == 0)
    point = dict(zip(sympy.symbols("TP FP FN TN"), counts, strict=True))
    assert sympy.N(parsed.subs(point), 20) == sympy.N(direct.subs(point), 20)


_ALPHABET = st.sampled_from([*list("TPFNtpfn0123456789+-*/^()=;,.#e_ \nabcdsqrtlogmx"), "**", "sqrt(", "TP", "max("])


@given(st.lists(_ALPHABET, max_size=30).map("".join))
def test_malformed_text_raises_only_metric_error(text: str) -> None:
    try:
        metricc.compile(text)
    except metricc.MetricError:
        pass


@given(st.text(max_size=40))
def test_arbitrary_text_raises_only_metric_error(text: str) -> None:
    try:
        metricc.compile(text)
    except metricc.MetricError:
        pass


# --- issue 11: totals may be rebound, one did-you-mean note, hints for common slips ---

def test_a_binding_shadows_a_builtin_total() -> None:
    """`n = TP + FP + FN + TN` on its own line (as Cohen's kappa is often written) is accepted."""
    kappa = metricc.compile(
        "n = TP + FP + FN + TN\n"
        "po = (TP + TN)/n\n"
        "pe = ((TP + FP)*(TP + FN) + (FN + TN)*(FP + TN))/n^2\n"
        "(po - pe)/(1 - pe)")
    counts = {"tp": 30, "fp": 5, "fn": 10, "tn": 955}
    assert kappa.value(**counts) == pytest.approx(metricc.compile("cohen_kappa").value(**counts), rel=1e-12)
    # A rebinding really shadows: P here is not TP + FN.
    assert parse("P = 2*TP\nP + N").expr == 2 * TP + FP + TN
    for name in ("N", "PP", "PN"):
        assert parse(f"{name} = TP\n{name}").expr == TP
    # Before its binding a total is still the built-in one (Python's scoping of a shadowed builtin).
    assert parse("x = P\nP = TP\nx + P").expr == 2 * TP + FN


@pytest.mark.parametrize("name", ["TP", "FP", "FN", "TN"])
def test_the_four_counts_stay_reserved(name: str) -> None:
    err = _syntax_error(f"{name} = 3\nTP/(TP+FP)")
    assert "one of the four counts" in str(err) and (err.line, err.column) == (1, 1)


def test_several_typos_get_one_did_you_mean_note() -> None:
    with pytest.raises(metricc.MissingParameterError) as info:
        metricc.compile("tp/(tp+fp)")
    msg = str(info.value)
    assert msg.count("did you mean") == 1
    assert "(did you mean 'FP' for 'fp', 'TP' for 'tp'?)" in msg
    with pytest.raises(metricc.MetricError) as info2:
        metricc.compile("fbeta", bta=2, btea=3)
    assert str(info2.value).count("did you mean") == 1 and "unknown parameters 'bta', 'btea'" in str(info2.value)


@pytest.mark.parametrize(("text", "hint"), [
    ("2TP/(2TP + FP + FN)", "multiplication needs '*': write 2*TP"),
    ("1.5e3TP", "write 1.5e3*TP"),
    ("2 (TP + FP)", "write 2*(...)"),
    ("(TP + FN)(TP + FP)", "write (...)*(...)"),
])
def test_implicit_multiplication_gets_a_hint(text: str, hint: str) -> None:
    assert hint in str(_syntax_error(text))


@pytest.mark.parametrize(("text", "call"), [
    ("fbeta(beta=2)", 'metricc.compile("fbeta", beta=2), or --param beta=2'),
    ("tversky(alpha=0.3, beta=0.7)", 'metricc.compile("tversky", alpha=0.3, beta=0.7)'),
])
def test_keyword_arguments_point_to_compile(text: str, call: str) -> None:
    msg = str(_syntax_error(text))
    assert call in msg and "let" not in msg and "binding" not in msg


def test_a_misplaced_binding_still_says_binding() -> None:
    assert "a binding is `name = expression` on its own line" in str(_syntax_error("TP + (x = 3)"))


@pytest.mark.parametrize(("formula", "params", "words"), [
    ("fbeta", {"beta": -2}, "fbeta's beta must be >= 0, got -2"),
    ("(fbeta + mcc)/2", {"beta": -0.5}, "fbeta's beta must be >= 0"),
    ("tversky", {"alpha": -0.1}, "tversky's alpha must be >= 0"),
    ("tversky", {"beta": -1}, "tversky's beta must be >= 0"),
])
def test_negative_weights_of_named_metrics_are_refused(formula: str, params: dict, words: str) -> None:
    with pytest.raises(metricc.MetricError, match=words.replace("(", r"\(").replace(")", r"\)")):
        metricc.compile(formula, **params)


def test_beta_zero_is_precision() -> None:
    m = metricc.compile("fbeta", beta=0)
    assert m.value(tp=3, fp=1, fn=7, tn=5) == pytest.approx(0.75)
