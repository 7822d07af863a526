"""Fuzzing (issue 5 item 5).

1. Random strings (from the grammar's alphabet, from its tokens, and arbitrary
   Unicode text): 12,000 per run through ``metricc.compile`` (which parses,
   analyses and, for named metrics, looks up); only MetricError may come out.
2. Random *valid* formulas: analysis, check(), kernels, losses (both backward
   modes, all relaxations), exact values and verify() never crash; they may be
   undefined (NaN) or fail verification, but wherever the symbolic and autograd
   gradients are finite they agree.
"""

from __future__ import annotations

import math
import os
import resource

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import metricc
from metricc.language.parse import parse

#: Strings per hypothesis example; each test runs ``max_examples`` examples.
BATCH = 40
EXAMPLES = 100
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

GRAMMAR_ALPHABET = "TPFNn0123456789.eE+-*/^()=,;#_ \t\nabcdfgilmoqrstxyz\\"
TOKENS = ["TP", "FP", "FN", "TN", "P", "N", "PP", "PN", "n", "f1", "mcc", "precision",
          "fbeta", "beta", "x", "y2", "0", "1", "2", "9", "0.5", "1e-3", "1e300", ".5e+2",
          "+", "-", "*", "/", "^", "**", "(", ")", "(", ")", ",", "=", "\n", ";", " ", "#",
          "sqrt", "log", "exp", "abs", "min", "max", "\\\n"]


def only_metric_errors(texts: list[str]) -> int:
    """Compile (and parse) every text; anything but a MetricError fails the test."""
    for text in texts:
        for step in (parse, metricc.compile):
            try:
                step(text)
            except metricc.MetricError:
                pass
            except Exception as e:  # pragma: no cover - the failure being tested for
                raise AssertionError(f"{step.__name__}({text!r}) raised {e!r}") from e
    return len(texts)


@FUZZ
@given(st.lists(st.text(alphabet=GRAMMAR_ALPHABET, max_size=30), min_size=BATCH,
                max_size=BATCH))
def test_grammar_alphabet_strings(texts: list[str]) -> None:
    assert only_metric_errors(texts) == BATCH


@FUZZ
@given(st.lists(st.lists(st.sampled_from(TOKENS), max_size=12).map("".join), min_size=BATCH,
                max_size=BATCH))
def test_token_soup(texts: list[str]) -> None:
    assert only_metric_errors(texts) == BATCH


@FUZZ
@given(st.lists(st.text(max_size=30), min_size=BATCH, max_size=BATCH))
def test_arbitrary_text(texts: list[str]) -> None:
    assert only_metric_errors(texts) == BATCH


def test_fuzz_volume() -> None:
    """The three string tests above send 3 * 100 * 40 = 12,000 strings per run."""
    assert 3 * EXAMPLES * BATCH >= 10_000
    assert FUZZ.max_examples == EXAMPLES


# --- random valid formulas ---------------------------------------------------------------

COUNT_LEAVES = ["TP", "FP", "FN", "TN", "P", "N", "PP", "PN", "n"]
LEAVES = st.one_of(
    st.sampled_from(COUNT_LEAVES),
    st.integers(0, 9).map(str),
    st.sampled_from(["0.5", "1e-3", "2.5", "100"]),
    st.sampled_from(["f1", "precision", "recall", "mcc", "specificity"]),
)


def _extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # Exponents are numbers: check() can take minutes on variable exponents such as
    # mcc^f1 (left to the analysis's owners; see test_variable_exponents below).
    return st.one_of(
        st.tuples(children, st.sampled_from(["+", "-", "*", "/"]), children)
        .map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
        st.tuples(children, st.sampled_from(["2", "3", "0.5", "-1", "1.5", "-0.5"]))
        .map(lambda t: f"({t[0]}) ^ {t[1]}"),
        st.tuples(st.sampled_from(["sqrt", "log", "exp", "abs"]), children)
        .map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(["min", "max"]), children, children)
        .map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        children.map(lambda c: f"-({c})"),
    )


EXPRESSIONS = st.recursive(LEAVES, _extend, max_leaves=6)
FORMULAS = st.one_of(
    EXPRESSIONS,
    # a let-binding used by the body
    st.tuples(EXPRESSIONS, EXPRESSIONS).map(lambda t: f"a = {t[0]}\n({t[1]}) * a + a"),
)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    p = torch.rand(24, generator=g, dtype=torch.float64)
    y = (torch.arange(24) % 3 == 0).double()
    return p, y


# derandomize: each example runs the whole pipeline (seconds for some formulas), so CI runs
# the same 40 every time instead of risking a new pathological one per run; the random
# exploration is done off-CI (see docs/numerics.md).
@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(FORMULAS)
def test_random_valid_formulas_never_crash(text: str) -> None:
    """compile, check, value, loss and verify: results or MetricErrors, never a crash.
    (600 examples of this ran clean while it was written; CI runs 40.)"""
    try:
        m = metricc.compile(text)
    except metricc.MetricError:
        return  # e.g. "depends on no count", "complex-valued": a clear refusal
    # analysis
    assert set(m.gradient) == {"TP", "FP", "FN", "TN"}
    m.undefined  # noqa: B018 - must not raise
    try:
        source = m.kernels_source
    except metricc.MetricError:
        return  # e.g. a derivative with log(-1): refused at code generation
    assert "def metric_and_coefficients" in source
    # exact values: a number, NaN via zero_division, or a MetricError for "undefined"
    for counts in [(3, 1, 2, 5), (0, 0, 0, 4), (0, 0, 0, 0)]:
        try:
            v = m.value(*counts, zero_division=float("nan"))
        except metricc.MetricError:
            continue
        assert isinstance(v, float)
    # losses: every relaxation, both backward modes, no exception
    p, y = _batch()
    for relaxation, options in [("anyloss", {}), ("linear", {}),
                                ("sigmoid", {"from_logits": True})]:
        x = torch.logit(p) if relaxation == "sigmoid" else p
        grads = []
        for backward in ("symbolic", "autograd"):
            xs = x.clone().requires_grad_()
            loss = m.loss(relaxation, backward=backward, warn_monotonicity=False, **options)
            value = loss(xs, y)
            value.backward()
            assert value.shape == () and xs.grad is not None and xs.grad.shape == xs.shape
            grads.append(xs.grad)
        both = torch.isfinite(grads[0]) & torch.isfinite(grads[1])
        scale = max(1.0, grads[1][both].abs().max().item()) if both.any() else 1.0
        torch.testing.assert_close(grads[0][both], grads[1][both], rtol=1e-6,
                                   atol=1e-9 * scale, msg=f"{text!r}, {relaxation}")
    # the symbolic analysis and the verifier report; they do not raise
    report = m.check()
    assert report is not None
    verification = m.verify(raise_on_failure=False)
    assert verification.checks and all(isinstance(c.ok, bool) for c in verification.checks)


BOMBS = {
    "9^9^9 (370 million digits)": "TP*9^9^9",
    "power of a coefficient": "(9*TP)^9^9",
    "slow growth": "TP*1.0001^100000",
    "product of big literals": "TP*1e300*1e300",
    "squared through bindings": "a = 1e300*TP; b = a*a; b",
    "big power": "TP*10^400",
    "5000 digits": "TP*" + "9" * 5000,
    "tiny literal": "TP*0." + "0" * 400 + "1",
    "huge exponent": "(TP+FP)^1000000",
    "exponents through bindings": "a = TP^100; b = a^100; b",
    "derivative doubling per binding":
        ";".join(["a0 = TP + 1"] + [f"a{i + 1} = a{i}*(a{i} + FN)" for i in range(14)] + ["a14"]),
    "deep parentheses": "(" * 600 + "TP" + ")" * 600,
}


@pytest.mark.parametrize("text", list(BOMBS.values()), ids=list(BOMBS))
def test_resource_bombs_are_refused_quickly(text: str) -> None:
    """Inputs that made SymPy build huge integers or trees (minutes, or memory
    exhaustion) are MetricErrors within milliseconds."""
    import time

    # CPU time of this process, not the wall clock, which other jobs stretch.
    start = time.process_time()
    with pytest.raises(metricc.MetricError, match=r"out of range|too large|deep|digits"):
        metricc.compile(text)
    assert time.process_time() - start < 5.0  # milliseconds typical; a hang is minutes


def test_parameters_are_bounded_too() -> None:
    with pytest.raises(metricc.MetricError, match="out of range"):
        metricc.compile("TP*c^c", c=1e300)
    with pytest.raises(metricc.MetricError, match="too large"):
        metricc.compile("TP^b", b=1000)
    assert math.isfinite(metricc.compile("TP^b/(TP+FP)^b", b=2.5).value(tp=1, fp=1, fn=0, tn=0))


@pytest.mark.parametrize("text", ["TP^FP/(n+1)", "2^TP/2^n", "(TP/(TP+FN))^(FP/(FP+TN))"])
def test_variable_exponents(text: str) -> None:
    m = metricc.compile(text)
    m.check()
    x = torch.rand(16, dtype=torch.float64, requires_grad=True)
    y = (torch.arange(16) % 2).double()
    m.loss("linear", warn_monotonicity=False)(x, y).backward()
    assert torch.isfinite(x.grad).all()
    assert m.verify(raise_on_failure=False).checks


#: Crashes and hangs the fuzzers found, kept as regressions.
FOUND = {
    "unary plus": "+TP/(+TP+FP)",
    "log of a constant": "TP*log(2) + exp(1)*FP/(n+1)",
    "sqrt of a constant in min": "min(TP, sqrt(0.5))",
    "constant temporary in min": "-(min(sqrt(TN), sqrt(0.5)))",
    "nested constant": "TP*sqrt(1/2 + sqrt(2))",
    "min with a number": "min(TP, 1)",
    "constant exp in a fraction": "exp(1/2)*TP/(TP+FP)",
    "fractional power of a sum (was a hang)": "n**90.59",
    "metric without TP or FN (g1 = 0)": "fpr",
}


@pytest.mark.parametrize("text", list(FOUND.values()), ids=list(FOUND))
def test_fuzzer_findings(text: str) -> None:
    """Each compiles, runs forward and backward, and verifies (all were crashes)."""
    import time

    start = time.process_time()  # CPU time: load on the machine does not count
    m = metricc.compile(text)
    x = torch.rand(16, dtype=torch.float64, requires_grad=True)
    y = (torch.arange(16) % 2).double()
    m.loss("linear", warn_monotonicity=False)(x, y).backward()
    assert torch.isfinite(x.grad).all()
    report = m.verify(raise_on_failure=False)
    assert report.ok, str(report)
    assert time.process_time() - start < 30  # ~1 s typical; the hang was unbounded


# --- issue 18: the shapes that used to hang, drawn at random, each within a CPU budget ------

_PARTS = ["mcc", "f1", "g_mean", "kappa", "TP/(TP+FP)", "(TP+1)/(n+2)", "TN/(TN+FN+1)",
          "TP - FP", "2", "0.5"]


def _nest(wrappers: list[str], inner: str) -> str:
    return "".join(wrappers) + inner + ")" * len(wrappers)


SHAPES = st.one_of(
    # variable exponents
    st.tuples(st.sampled_from(_PARTS), st.sampled_from(_PARTS)).map(lambda t: f"({t[0]})^({t[1]})"),
    # long sums
    st.integers(1, 3000).map(lambda k: " + ".join(f"TP/(FP+{i})" for i in range(k))),
    # wide min/max
    st.tuples(st.sampled_from(["min", "max"]), st.lists(st.sampled_from(_PARTS), min_size=2,
                                                        max_size=10))
    .map(lambda t: f"{t[0]}({', '.join(t[1])})"),
    # binding chains
    st.tuples(st.integers(2, 250), st.sampled_from(["+", "*", "/"])).map(
        lambda t: "\n".join(["a0 = TP/(TP+FP)"]
                            + [f"a{i} = a{i - 1} {t[1]} (TP+{i})/(n+{i})" for i in range(1, t[0])]
                            + [f"a{t[0] - 1}"])),
    # issue 26: fractional, long and integer exponents, and exp of a fraction
    st.tuples(st.sampled_from([*_PARTS[4:7], "n/(n+1)"]),
              st.sampled_from(["0.343", "0.2401", "0.117649", "0.7^0.7", "30", "100",
                               "0.1234567890123456789012345678901234567891"]))
    .map(lambda t: f"({t[0]})^{t[1]}"),
    st.tuples(st.integers(1, 9), st.integers(2, 40)).map(lambda t: f"(n)^{t[1]}/(n+{t[0]})^{t[1]}"),
    st.integers(1, 10**7).map(lambda c: f"exp({c / 10**5}/(n+1)) + TN^3"),
    # deep unary nesting
    st.tuples(st.lists(st.sampled_from(["sqrt(", "exp(", "log(1 + ", "abs(", "-("]),
                       min_size=1, max_size=40), st.sampled_from(_PARTS[:7]))
    .map(lambda t: _nest(*t)),
)


_SHAPE_EXAMPLES = int(os.environ.get("METRICC_FUZZ_SHAPES", "0"))


@settings(max_examples=_SHAPE_EXAMPLES or 5, deadline=None, database=None,
          derandomize=not _SHAPE_EXAMPLES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(SHAPES)
def test_hanging_shapes_are_answered_within_a_budget(text: str) -> None:
    """compile + check + loss + verify, or a MetricError, within 10 s of CPU time.

    CI runs 5 fixed examples; `METRICC_FUZZ_SHAPES=200 pytest -k hanging_shapes`
    explores more (the env var sets max_examples and drops derandomize)."""
    import warnings

    from metricc.analysis.worker import worker_cpu

    def cpu() -> float:  # this process, reaped children and the analysis worker
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + worker_cpu()

    start = cpu()
    try:
        m = metricc.compile(text)
        m.check()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", metricc.MetricWarning)
            loss = m.loss()
        x = torch.rand(8, dtype=torch.float64, requires_grad=True)
        loss(x, (torch.arange(8) % 2).double()).backward()
        m.verify(raise_on_failure=False)
    except metricc.MetricError:
        pass
    assert cpu() - start < 10.0, text[:200]
