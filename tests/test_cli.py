"""The metricc command: subcommands, exit codes, error messages, and no torch for grad/list."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import metricc
from metricc.cli import main
from metricc.library import METRICS

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m metricc ARGS`` in a fresh interpreter (what a user's shell runs)."""
    return subprocess.run([sys.executable, "-m", "metricc", *args], input=stdin, env=ENV,
                          capture_output=True, text=True, timeout=300)


def test_grad_prints_metric_and_partials(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grad", "f1"]) == 0
    out = capsys.readouterr().out.splitlines()
    m = metricc.compile("f1")
    assert out[0].split("=", 1)[1].strip() == str(m.expr)
    for k, d in m.gradient.items():
        assert any(line.startswith(f"df/d{k} ") and line.endswith(f"= {d}") for line in out)
    assert any(line.startswith("g1 = df/dTP - df/dFN") for line in out)


def test_grad_latex_and_params(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grad", "TP/(TP + alpha*FP + beta*FN)", "-p", "alpha=0.3",
                 "--param", "beta=0.7", "--latex"]) == 0
    out = capsys.readouterr().out
    assert r"\frac{\partial f}{\partial \mathrm{FP}}" in out and r"\mathrm{TP}" in out
    assert "0.3" not in out  # exact rationals: 3/10
    assert r"\frac{3" in out or "3 \\mathrm{FP}" in out


def test_list_shows_every_metric(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for m in METRICS.values():
        line = next(ln for ln in out.splitlines() if ln.startswith(m.name + " "))
        assert m.formula in line
        assert ("higher" if m.higher_is_better else "lower") in line
        assert all(a in line for a in m.aliases)


def test_check_reports_analysis_and_verification(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "f1"]) == 0
    out = capsys.readouterr().out
    assert "FN + FP + 2*TP = 0  (0/0)" in out
    assert "TN: constant (symbolic)" in out and "range: within [0, 1]" in out
    assert "verification passed" in out


def test_check_flags_wrong_direction(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "FP/(TP+FP)"]) == 1
    out = capsys.readouterr().out
    assert "TRAINS THE WRONG WAY" in out and "rewards false positives" in out
    assert main(["check", "FP/(TP+FP)", "--lower-is-better"]) == 0


def test_compile_to_stdout_and_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "fbeta", "--param", "beta=2", "--name", "F2Loss",
                 "--relaxation", "sigmoid", "--from-logits", "--option", "slope=2",
                 "--option", "reduction=sum"]) == 0
    out = capsys.readouterr().out
    assert "class F2Loss(MetricLoss):" in out
    assert 'relaxation: str | None = "sigmoid",' in out and "from_logits: bool = True," in out
    assert "slope: float = 2," in out and 'reduction: str = "sum",' in out
    target = tmp_path / "f2_loss.py"
    assert main(["compile", "fbeta", "-p", "beta=2", "--name", "F2Loss", "--relaxation",
                 "sigmoid", "--from-logits", "--option", "slope=2", "--option",
                 "reduction=sum", "-o", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == out
    assert capsys.readouterr().err.strip() == f"wrote {target}"


def test_compile_warns_about_wrong_direction(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "FP/(TP+FP)"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("metricc: warning: ") and "--lower-is-better" in err


def test_formula_from_stdin() -> None:
    proc = run("grad", "-", stdin="p = TP/(TP+FP)\nr = TP/(TP+FN)\n2*p*r/(p+r)\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith(str(metricc.compile("f1").expr))


@pytest.mark.parametrize(("args", "needle"), [
    (["grad", "TP/(TP+"], "formula ends too early"),
    (["check", "TP/(TP+FP))"], "^"),
    (["grad", "f2"], "unknown metric 'f2'"),
    (["grad", "sqrtt(TP)"], "sqrtt"),
    (["grad", "TP/(TP+b*FP)"], "--param b=<number>"),
    (["grad", "TP/(TP+b*FP)", "--param", "b=x"], "must be a number"),
    (["grad", "f1", "--param", "beta"], "NAME=VALUE"),
    (["compile", "f1", "--relaxation", "foo"], "invalid choice: 'foo'"),
    (["compile", "f1", "--option", "reduction=bogus"], "reduction='bogus' is not one of"),
    (["compile", "f1", "--option", "amplifier=-1"], "amplifier must be"),
    (["compile", "f1", "--relaxation", "sigmoid"], "from_logits=True"),
    (["compile", "f1", "--name", "import os"], "not a plain Python identifier"),
    (["compile", "f1", "-o", "/nonexistent-dir/x.py"], "cannot write"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "required: COMMAND"),
])
def test_errors_are_one_message_exit_2(args: list[str], needle: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("metricc: error: ")
    assert captured.err.count("metricc: error:") == 1
    assert needle in captured.err
    assert "Traceback" not in captured.err


def test_syntax_error_has_caret_line_in_a_real_process() -> None:
    proc = run("grad", "TP/(TP+FP))")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("metricc: error: ") and "Traceback" not in proc.stderr
    src, caret = lines[-2], lines[-1]
    assert src.strip() == "TP/(TP+FP))"
    assert caret.strip() == "^" and src[caret.index("^")] == ")"


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["compile", "--help"], ["grad", "--help"], ["check", "--help"],
                 ["list", "--help"], ["--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(args)
        assert exit_.value.code == 0
        out = capsys.readouterr().out
        assert "example" in out and f"metricc {args[0] if len(args) > 1 else 'list'}" in out


NO_TORCH = """
import sys
from metricc.cli import main
code = main(sys.argv[1:])
assert "torch" not in sys.modules, "torch was imported"
sys.exit(code)
"""


@pytest.mark.parametrize("args", [["grad", "f1"], ["grad", "mcc", "--latex"], ["list"]])
def test_grad_and_list_do_not_import_torch(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", NO_TORCH, *args], env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout


def test_console_script_entry_point_is_cli_main() -> None:
    # Read as text: tomllib is Python 3.11+, the package supports 3.10.
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^metricc\s*=\s*"metricc\.cli:main"\s*$', section, re.MULTILINE), section
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"metricc {metricc.__version__}"
