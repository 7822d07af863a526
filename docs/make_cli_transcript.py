"""Regenerate docs/cli.md by running every command it shows (nothing in it is hand-written output).

    python docs/make_cli_transcript.py            # rewrite docs/cli.md
    python docs/make_cli_transcript.py --check    # exit 1 if docs/cli.md is not current

This script is the one source of docs/cli.md: its prose, the commands and their output.
Commands run in this process through ``metricc.cli.main`` (what the ``metricc`` script and
``python -m metricc`` call), with stdout and stderr captured, in a temporary working
directory, so the files that ``compile -o`` writes do not land in the repository.
``tests/test_docsdrift.py`` checks that regenerating gives the committed page.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import runpy
import shlex
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "cli.md"

USE_LOSS = """\
import torch
from f2_loss import F2Loss

loss_fn = F2Loss()
logits = torch.tensor([2.0, -1.0, 0.5, -3.0], requires_grad=True)
loss = loss_fn(logits, torch.tensor([1.0, 0.0, 1.0, 0.0]))
loss.backward()
print(loss_fn)
print(round(loss.item(), 6), [round(g, 6) for g in logits.grad.tolist()])
"""

SIZES_PROSE = (
    "**How big the file is.** It pastes only what its loss class reaches in metricc's "
    "torch-only runtime: the module defining the class it subclasses (`MetricLoss` for the "
    "2x2 counts, `MatrixLoss` for K x K metrics, `CurveLoss` for curve metrics) and the "
    "runtime modules that one imports, cut to the functions, classes and constants reachable "
    "from the class by name (read from their ASTs), without their multi-line docstrings "
    "(read those in metricc's sources). Every option of the in-process loss comes along "
    "(relaxations, modes, class weights, `sync_dist`, `memory_decay`), so the code those "
    "options run stays. A comment after the docstring lists the sections in order (the "
    "pasted runtime, one `# --- module` section each; the generated kernels; the loss "
    "class, last). Measured with `Metric.standalone()` (what `metricc compile` writes):")

#: (what the table shows, formula, loss options) for the size table.
SIZES: list[tuple[str, str, dict[str, str]]] = [
    ("`f1` (binary; also multiclass or multilabel: the mode is an option of the same class)",
     "f1", {}),
    ("`dice --option mode=multiclass`", "dice", {"mode": "multiclass"}),
    ("`quadratic_kappa` (K x K)", "quadratic_kappa", {}),
    ("`auroc` (curve)", "auroc", {}),
    ("`precision subject to recall >= 0.9`", "precision subject to recall >= 0.9", {}),
]

# (markdown before the block, argv after "metricc", or a ("python", code) pair)
SESSION: list[tuple[str, list[str] | tuple[str, str]]] = [
    ("## Overview\n\nEvery subcommand has `--help` with an example.", ["--help"]),
    ("## `metricc list`: the named metrics\n\nName, direction, aliases and formula "
     "(parameters with their defaults in brackets).", ["list"]),
    ("## `metricc grad`: the metric and its partial derivatives\n\n`g1` and `g0` are the two "
     "numbers per batch the symbolic backward pass needs.", ["grad", "f1"]),
    ("Parameters are given with `--param` (or `-p`); numbers stay exact.",
     ["grad", "TP/(TP + alpha*FP + beta*FN)", "--param", "alpha=0.3", "--param", "beta=0.7"]),
    ("With constraints, each constraint's metric follows the objective's, as `h1`, `h2`, ... "
     "with its four partials and `g1`, `g0` (the gradients a constrained loss adds, weighted "
     "by its multipliers).", ["grad", "precision subject to recall >= 0.9"]),
    ("`--latex` prints the same as LaTeX.", ["grad", "f1", "--latex"]),
    ("## `metricc check`: analysis and verification\n\nWhere the metric is undefined (and "
     "whether that is `0/0` or `x/0`), where it has no derivative, its monotonicity in each "
     "count (proved by SymPy, or sampled where SymPy cannot tell), its range, and the "
     "verification of the gradient (symbolic = autograd = finite differences).",
     ["check", "mcc"]),
    ("Cohen's kappa is not monotone in FP or FN: below chance level more false positives can "
     "raise it. Sampling finds points of both signs (each confirmed with 30-digit arithmetic).",
     ["check", "cohen_kappa"]),
    ("Within a batch P and N are fixed: a positive's score rising turns an FN "
     "into a TP, a negative's turns a TN into an FP. The verdict on training is decided along "
     "these two moves (the signs of `f_TP - f_FN` and `f_FP - f_TN`): this formula rises with FN "
     "through `n`, but FN only grows at TP's expense, and along that move it falls.",
     ["check", "TP/(TP+FP) - 0.5*FP/n"]),
    ("A formula that would train the wrong way is flagged, and `check` exits with status 1.",
     ["check", "FP/(TP+FP)"]),
    ("So is a formula of P and N only: no prediction changes it, its gradient is zero.",
     ["check", "P/N"]),
    ("## `metricc compile`: a standalone loss file\n\nThe file imports only torch. Without "
     "`-o` it goes to stdout; here it is written to a file, with the default options of the "
     "class chosen on the command line.",
     ["compile", "fbeta", "--param", "beta=2", "--name", "F2Loss", "--relaxation", "sigmoid",
      "--from-logits", "--option", "slope=2", "-o", "f2_loss.py"]),
    (SIZES_PROSE, ("sizes", "")),
    ("The start of the generated file: its docstring.", ("head", "f2_loss.py")),
    ("Its last lines: the loss class, with every option of the in-process loss and the "
     "defaults chosen above.", ("tail", "f2_loss.py")),
    ("Using it needs nothing but torch:", ("python", USE_LOSS)),
    ("## K × K metrics\n\n`grad`, `check` and `compile` take formulas over the whole "
     "confusion matrix ([matrix.md](matrix.md)); the gradient is symbolic in K.",
     ["grad", "quadratic_kappa"]),
    ("A K × K parameter is a formula in `i` and `j`, or a list of lists.",
     ["grad", "sum(i, j, M[i,j]*C[i,j]) / n", "-p", "M=(i-j)^2"]),
    ("", ["check", "multiclass_mcc"]),
    ("", ["compile", "quadratic_kappa", "--option", "from_logits=True", "-o", "qwk_loss.py"]),
    ("Formulas with let-bindings can come from stdin with `-`.",
     ("stdin", "p = TP/(TP+FP)\nr = TP/(TP+FN)\n2*p*r/(p + r)\n")),
    ("## Errors\n\nA bad formula, unknown name, missing parameter or bad option prints one "
     "message to stderr and exits with status 2. Syntax errors show the line with a caret.",
     ["grad", "TP/(TP+FP))"]),
    ("", ["grad", "f2"]),
    ("", ["check", "TP/(TP + b*FP)"]),
    ("", ["compile", "f1", "--relaxation", "sigmoid"]),
    ("", ["compile", "f1", "--option", "reduction=bogus"]),
    ("", ["compile", "f1", "--relaxation", "softmax"]),
]


@contextlib.contextmanager
def _session(cwd: str, stdin: str) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """stdout, stderr and stdin swapped for strings, in ``cwd``, with a fresh process's
    warning filters and an 100-column terminal (for argparse's help)."""
    out, err = io.StringIO(), io.StringIO()
    saved = os.getcwd(), os.environ.get("COLUMNS"), sys.stdin
    os.chdir(cwd)
    os.environ["COLUMNS"] = "100"
    sys.stdin = io.StringIO(stdin)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            warnings.resetwarnings()
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("default", UserWarning)
            yield out, err
    finally:
        os.chdir(saved[0])
        if saved[1] is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved[1]
        sys.stdin = saved[2]


def _run(argv: list[str], cwd: str, stdin: str = "") -> tuple[str, int]:
    """``metricc ARGV``'s output (stdout, then stderr: warnings and errors) and exit status."""
    from metricc.cli import main

    with _session(cwd, stdin) as (out, err):
        try:
            code = main(argv)
        except SystemExit as e:  # --help
            code = int(e.code or 0)
    return out.getvalue() + err.getvalue(), code


def _run_python(code: str, cwd: str) -> str:
    """Run ``code`` (saved as use_loss.py in ``cwd``, it imports the file written there)
    as a script; its output."""
    with _session(cwd, "") as (out, err):
        sys.path.insert(0, cwd)
        try:
            runpy.run_path(str(Path(cwd) / "use_loss.py"), run_name="__main__")
        finally:
            sys.path.remove(cwd)
            for name in [m for m in sys.modules if m == "f2_loss"]:
                del sys.modules[name]
    return out.getvalue() + err.getvalue()


def _sizes() -> list[str]:
    import metricc

    rows = ["| metric | pasted runtime modules | lines | size |", "|---|---|---|---|"]
    for shown, formula, options in SIZES:
        m = metricc.compile(formula)
        try:
            text = m.standalone(None, warn_monotonicity=False, **options)
        except metricc.MetricError:
            rows.append(f"| {shown} | refused: files do not carry constraints yet | | |")
            continue
        modules = text.split("\n# --- metricc.")[1:]
        rows.append(f"| {shown} | {len(modules)} | {len(text.splitlines()):,} | "
                    f"{len(text.encode()) / 1000:.0f} KB |")
    return [*rows, "", "Most of what remains is the code those options run and their checks, kept "
            "so that the file raises the same errors as the in-process loss.", ""]


def _excerpt(step: tuple[str, str], tmp: str) -> list[str]:
    lines = (Path(tmp) / step[1]).read_text(encoding="utf-8").splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("class F2Loss"))
    shown = lines[:32] if step[0] == "head" else lines[start:]
    return ["<!-- not run: an excerpt of the generated f2_loss.py -->", "```python",
            *shown, "```", ""]


HEADER = [
    "# The `metricc` command",
    "",
    "<!-- Generated by docs/make_cli_transcript.py: every output below is real; "
    "edit that script, not this file. -->",
    "",
    "`metricc` (also `python -m metricc`) inspects, checks and exports metrics from the "
    "shell. `grad` and `list` never import torch, so they answer quickly. Exit status: 0 "
    "success, 1 `check` found a problem, 2 a usage or formula error.",
    "",
]


def section(prose: str, step: list[str] | tuple[str, str], tmp: str) -> list[str]:
    """The page's lines for one entry of :data:`SESSION`, its command run now in ``tmp``
    (entries run in order: the excerpts and the script read the file a command wrote)."""
    parts = [prose, ""] if prose else []
    if isinstance(step, tuple) and step[0] == "sizes":
        return [*parts, *_sizes()]
    if isinstance(step, tuple) and step[0] in ("head", "tail"):
        return [*parts, *_excerpt(step, tmp)]
    if isinstance(step, tuple) and step[0] == "python":
        (Path(tmp) / "use_loss.py").write_text(step[1], encoding="utf-8")
        out = _run_python(step[1], tmp)
        return [*parts, "<!-- not run: needs f2_loss.py, written by the command above; this "
                "script runs it and shows its output -->", "```python",
                step[1].rstrip(), "```", "", "```console",
                "$ python use_loss.py", out.rstrip(), "```", ""]
    if isinstance(step, tuple) and step[0] == "stdin":
        out, code = _run(["grad", "-"], tmp, step[1])
        shown_cmd = "$ printf '" + step[1].replace("\n", "\\n") + "' | metricc grad -"
    else:
        assert isinstance(step, list)
        out, code = _run(step, tmp)
        shown_cmd = "$ " + shlex.join(["metricc", *step])
    block = ["```console", shown_cmd, out.rstrip()]
    if code:
        block.append(f"[exit status {code}]")
    return [*parts, *block, "```", ""]


def render() -> str:
    """The text of docs/cli.md, every output produced now."""
    parts = list(HEADER)
    with tempfile.TemporaryDirectory() as tmp:
        for prose, step in SESSION:
            parts += section(prose, step, tmp)
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with docs/cli.md instead of writing it; exit 1 if it differs")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text(encoding="utf-8") == text
        print("docs/cli.md is current" if current else
              "docs/cli.md is stale: run python docs/make_cli_transcript.py")
        return 0 if current else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # this checkout's metricc, installed or not
    raise SystemExit(main())
