"""Regenerate docs/cli.md by running every command it shows (nothing in it is hand-written output).

    python docs/make_cli_transcript.py

Commands run as ``python -m metricc ...`` (the same code as the ``metricc`` script) in a
temporary directory, so the files that ``compile -o`` writes do not land in the repository.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
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

# (markdown before the block, argv after "metricc", or a ("python", code) pair)
SESSION: list[tuple[str, list[str] | tuple[str, str]]] = [
    ("## Overview\n\nEvery subcommand has `--help` with an example.", ["--help"]),
    ("## `metricc list`: the named metrics\n\nName, direction, aliases and formula "
     "(parameters with their defaults in brackets).", ["list"]),
    ("## `metricc grad`: the metric and its partial derivatives\n\n`g1` and `g0` are the two "
     "numbers per batch the symbolic backward pass needs.", ["grad", "f1"]),
    ("Parameters are given with `--param` (or `-p`); numbers stay exact.",
     ["grad", "TP/(TP + alpha*FP + beta*FN)", "--param", "alpha=0.3", "--param", "beta=0.7"]),
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


def _run(argv: list[str], cwd: str, stdin: str | None = None) -> tuple[str, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    proc = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                          timeout=600)
    # stderr after stdout: each command prints to one of them (warnings/errors to stderr).
    return proc.stdout + proc.stderr, proc.returncode


def main() -> None:
    parts = [
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
    with tempfile.TemporaryDirectory() as tmp:
        for prose, step in SESSION:
            if prose:
                parts += [prose, ""]
            if isinstance(step, tuple) and step[0] in ("head", "tail"):
                lines = (Path(tmp) / step[1]).read_text(encoding="utf-8").splitlines()
                start = next(i for i, ln in enumerate(lines) if ln.startswith("class F2Loss"))
                shown = lines[:32] if step[0] == "head" else lines[start:]
                parts += ["<!-- not run: an excerpt of the generated f2_loss.py -->", "```python",
                          *shown, "```", ""]
                continue
            if isinstance(step, tuple) and step[0] == "python":
                (Path(tmp) / "use_loss.py").write_text(step[1])
                out, code = _run([sys.executable, "use_loss.py"], tmp)
                parts += ["<!-- not run: needs f2_loss.py, written by the command above; this "
                          "script runs it and shows its output -->", "```python",
                          step[1].rstrip(), "```", "", "```console",
                          "$ python use_loss.py", out.rstrip(), "```", ""]
                continue
            if isinstance(step, tuple) and step[0] == "stdin":
                out, code = _run([sys.executable, "-m", "metricc", "grad", "-"], tmp, step[1])
                shown_cmd = "$ printf '" + step[1].replace("\n", "\\n") + "' | metricc grad -"
            else:
                assert isinstance(step, list)
                out, code = _run([sys.executable, "-m", "metricc", *step], tmp)
                shown_cmd = "$ " + shlex.join(["metricc", *step])
            block = ["```console", shown_cmd, out.rstrip()]
            if code:
                block.append(f"[exit status {code}]")
            parts += [*block, "```", ""]
    OUT.write_text("\n".join(parts).rstrip() + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
