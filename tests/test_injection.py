"""No code injection (issue 5 item 6).

The generated kernels are ``exec``-ed, so this checks what can reach them: after
parsing, user text survives only as SymPy numbers and the four count names.
Parameters are substituted as numbers, bindings are inlined, and every name in
the generated source comes from a fixed vocabulary; hostile inputs are refused
with a MetricError or compile to that same harmless vocabulary.
"""

from __future__ import annotations

import io
import keyword
import re
import tokenize

import pytest
import sympy
import torch

import metricc
from metricc.emit.counts import emit_kernels
from metricc.emit.printer import MetricPrinter
from metricc.language.parse import parse
from metricc.library import METRICS

#: Every name the emitter may write: kernel names, their arguments and outputs,
#: the torch functions MetricPrinter prints, and cse temporaries x0, x1, ...
VOCABULARY = {
    "def", "return", "torch", "metric_value", "metric_and_coefficients",
    "TP", "FP", "FN", "TN", "eps", "value", "g1", "g0",
    "sqrt", "rsqrt", "log", "exp", "abs", "sign", "maximum", "minimum", "clamp", "min", "max",
    "zeros_like",  # a constant coefficient (fnr ignores TP) is still a tensor
}
DOCSTRINGS = {'"""The metric, guarded by eps."""',
              '"""The metric and its backward coefficients g1 = f_TP - f_FN, g0 = f_FP - f_TN."""'}


def names_and_strings(source: str) -> tuple[set[str], set[str]]:
    names, strings = set(), set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME:
            names.add(tok.string)
        elif tok.type == tokenize.STRING:
            strings.add(tok.string)
        elif tok.type == tokenize.OP:
            # no attribute access but torch.<fn>, no subscripts, no calls of non-torch names
            assert tok.string not in ("[", "]", "{", "}", "@", ":=", "lambda"), tok
    return names, strings


def assert_harmless(source: str) -> None:
    names, strings = names_and_strings(source)
    unknown = {n for n in names if n not in VOCABULARY and not re.fullmatch(r"x\d+", n)}
    assert not unknown, f"unexpected names in generated code: {unknown}"
    assert strings <= DOCSTRINGS, strings
    # every attribute access is torch.<function>
    for owner, attr in re.findall(r"(\w+)\s*\.\s*([A-Za-z_]\w*)", source):
        assert owner == "torch" and attr in VOCABULARY, (owner, attr)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_named_metrics_use_only_the_vocabulary(name: str) -> None:
    assert_harmless(metricc.compile(name).kernels_source)


def test_parameters_are_substituted_as_numbers() -> None:
    m = metricc.compile("TP/(TP + secret_weight*FP + other_one*FN)", secret_weight=0.25,
                        other_one=3)
    source = m.kernels_source
    assert "secret_weight" not in source and "other_one" not in source
    assert_harmless(source)
    # the values are there, as numbers
    assert m.value(tp=1, fp=4, fn=1, tn=0) == pytest.approx(1 / (1 + 1 + 3))


def test_binding_names_never_reach_the_code() -> None:
    text = "import_os = TP/(TP+FP)\n__builtins__x = 1\nsystem = TP/(TP+FN)\nimport_os*system"
    with pytest.raises(metricc.MetricError):  # a name may not start with '_'
        metricc.compile(text)
    text = "import_os = TP/(TP+FP)\nexec_ = TP/(TP+FN)\nimport_os*exec_"
    source = metricc.compile(text).kernels_source
    assert "import_os" not in source and "exec_" not in source
    assert_harmless(source)


#: Hostile or confusing text; each must be refused or compile to harmless code.
HOSTILE = {
    "dunder": "__class__",
    "dunder attribute": "TP.__class__",
    "import statement": "import os",
    "import name as parameter": "TP*import",
    "os.system": 'os.system("rm -rf /")',
    "__import__ call": "__import__('os').system('id')",
    "exec": "exec('print(1)')",
    "eval": "eval(TP)",
    "lambda": "lambda: TP",
    "string": "'TP'",
    "subscript": "TP[0]",
    "walrus": "(x := TP)",
    "semicolon statements": "TP; import os",
    "newline statement": "TP\nimport os",
    "comment only": "# TP/(TP+FP)",
    "backslash": "TP \\ FP",
    "null byte": "TP\x00/(TP+FP)",
    "Cyrillic look-alike": "\u0422\u0420/(\u0422\u0420+FP)",  # ТР, not TP
    "fullwidth": "\uff34\uff30/(\uff34\uff30+\uff26\uff30)",  # ＴＰ/(ＴＰ+ＦＰ)
    "math bold": "\U0001d413\U0001d40f",  # 𝐓𝐏, which Python would NFKC-normalise to TP
    "zero-width space": "TP\u200b/(TP+FP)",
    "right-to-left override": "TP/(TP+FP)\u202e",
    "combining mark": "TP\u0301",
    "very long identifier": "TP*" + "a" * 50_000,
    "python keyword as name": "TP*def + FP*class",
    "torch as name": "TP*torch",
    "generated names": "TP*x0 + eps*value + g1",
}


@pytest.mark.parametrize("text", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_inputs_are_refused_or_harmless(text: str) -> None:
    try:
        m = metricc.compile(text)
    except metricc.MetricError as e:
        assert str(e)
        return
    assert_harmless(m.kernels_source)  # pragma: no cover - every case above is refused today


NAMED_HOSTILE = {"keyword": "TP*import", "torch": "TP*torch",
                 "generated names": "TP*x0 + eps*value + g1", "keywords": "TP*def + FP*class",
                 "5000 characters": "TP*" + "a" * 5_000}


@pytest.mark.parametrize("text", list(NAMED_HOSTILE.values()), ids=list(NAMED_HOSTILE))
def test_hostile_names_given_values_become_numbers(text: str) -> None:
    """Names that are Python keywords or clash with generated names are fine
    parameters: they are substituted, never printed."""
    params = {p: 0.5 for p in parse(text).parameters}
    assert params, text
    m = metricc.compile(text, **params)
    assert_harmless(m.kernels_source)
    # The names have no influence at all: the code is that of the numbers.
    numbers_only = re.sub("|".join(rf"\b{re.escape(p)}\b" for p in params), "0.5", text)
    assert m.kernels_source == metricc.compile(numbers_only).kernels_source
    loss = m.loss(warn_monotonicity=False)
    assert torch.isfinite(loss(torch.rand(6), (torch.arange(6) % 2).float()))


def test_unicode_is_refused_with_a_hint() -> None:
    with pytest.raises(metricc.MetricSyntaxError, match="ASCII"):
        metricc.compile(HOSTILE["Cyrillic look-alike"])
    with pytest.raises(metricc.MetricSyntaxError, match="ASCII"):
        metricc.compile(HOSTILE["fullwidth"])


def test_printer_refuses_names_that_are_not_plain_identifiers() -> None:
    """Defence in depth: even a SymPy tree built by hand cannot print code."""
    printer = MetricPrinter()
    for bad in ["os.system", "import", "__import__('os')", "a b", "TP;x", "\u0422\u0420"]:
        with pytest.raises(metricc.MetricError):
            printer.doprint(sympy.Symbol(bad))
    for bad in ["os.system", "import", "secret"]:
        with pytest.raises(metricc.MetricError, match="free parameters"):
            emit_kernels(sympy.Symbol("TP") * sympy.Symbol(bad))
    assert all(not keyword.iskeyword(n) for n in ("TP", "FP", "FN", "TN", "eps"))


def test_generated_functions_see_only_torch() -> None:
    cls = metricc.compile("mcc").loss_class
    for fn in (cls.metric_value, cls.metric_and_coefficients):
        assert set(fn.__globals__) <= {"torch", "__builtins__", "metric_value",
                                       "metric_and_coefficients"}
        assert fn.__code__.co_names and set(fn.__code__.co_names) <= VOCABULARY
