"""Where the package's lines come from: 0.1's code, the restructure, or the features since.

Every line of ``metricc/**/*.py`` at a revision is blamed with moves and copies followed
across files (``git blame -w -M -C -C``), so code that the restructure moved keeps the
commit that wrote it. A line whose commit is reachable from ``--base`` (0.1) is 0.1's
code; any other line goes to the work its commit served, read from the commit's subject
with the table ``WORK`` below (first match wins; the rest is the restructure and its
review). Lines are counted twice: all of them, and code lines (not blank, not a comment,
not a docstring). The classification is by commit, so a commit that mixed two kinds of
work counts for the first it names; the table is the place to argue with.

    python benchmarks/package_size.py                 # HEAD against eb66a9d (0.1)
    python benchmarks/package_size.py --files metricc/errors.py --rev HEAD
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import tokenize
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (work, pattern of a commit subject), tried in order; unmatched commits are the restructure.
WORK = (
    ("curve statistic", r"curve|Curve|issue 25|soft histogram"),
    ("operating points", r"confidence|Confidence|BestFeasible|constrained_defaults|Constrained losses: "
                         r"defaults|issue 28|operating|Clopper|CONSTRAINED_DEFAULTS"),
    ("hardening and inputs", r"worker|budget|Budget|size\.py|hardening|issue 26|issue 27|cache|Cache|"
                             r"Did-you-mean|keyword|overflow|Extremes|DDP|hint|target-value|types that "
                             r"tell|Tame formulas|long kernels|within the time target|sign query|"
                             r"together\(\)|Faster emission|rename\(\)|diff remembered|rounded|proofs run "
                             r"in the analysis worker|First loss|reserved|K x K parameters cannot|"
                             r"[Ww]arn when|Refuse|State survives|undecided Min/Max|evaluators print|"
                             r"Probability hint|validate_inputs|paste only|2x2 partials that|killed from "
                             r"outside|singularities\(\) in four"),
)
RESTRUCTURE = "restructure and review"


def code_lines(source: str) -> set[int]:
    """Line numbers holding code: not blank, not only a comment, not in a docstring."""
    doc: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                doc.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in doc)
    return lines


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def tally(rev: str, base: str, files: list[str]) -> tuple[Counter[str], Counter[str]]:
    """``(all lines, code lines)`` per kind of work, over ``files`` at ``rev``."""
    old = set(git("rev-list", base).split())
    subjects: dict[str, str] = {}

    def work(commit: str) -> str:
        if commit in old:
            return "0.1"
        if commit not in subjects:
            subjects[commit] = git("log", "-1", "--format=%s", commit)
        return next((name for name, pattern in WORK if re.search(pattern, subjects[commit])),
                    RESTRUCTURE)

    every: Counter[str] = Counter()
    code: Counter[str] = Counter()
    for f in files:
        code_at = code_lines(git("show", f"{rev}:{f}"))
        blame = git("blame", "-w", "-M", "-C", "-C", "--line-porcelain", rev, "--", f)
        for m in re.finditer(r"^([0-9a-f]{40}) \d+ (\d+)", blame, flags=re.M):
            kind = work(m.group(1))
            every[kind] += 1
            code[kind] += int(m.group(2)) in code_at
    return every, code


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="HEAD")
    p.add_argument("--base", default="eb66a9d", help="the last commit of 0.1")
    p.add_argument("--files", nargs="*", help="default: every metricc/**/*.py at --rev")
    a = p.parse_args(argv)
    files = a.files or [f for f in git("ls-tree", "-r", "--name-only", a.rev, "metricc").split()
                        if f.endswith(".py")]
    base_files = [f for f in git("ls-tree", "-r", "--name-only", a.base, "metricc").split()
                  if f.endswith(".py")]
    base_all = sum(len(git("show", f"{a.base}:{f}").splitlines()) for f in base_files)
    base_code = sum(len(code_lines(git("show", f"{a.base}:{f}"))) for f in base_files)
    every, code = tally(a.rev, a.base, files)
    print(f"| lines of metricc/ at {a.rev} | all | code |\n|---|---|---|")
    for kind in ["0.1", RESTRUCTURE, *(name for name, _ in WORK)]:
        print(f"| {kind} | {every[kind]} | {code[kind]} |")
    print(f"| total | {sum(every.values())} | {sum(code.values())} |")
    kept = every["0.1"] + every[RESTRUCTURE], code["0.1"] + code[RESTRUCTURE]
    print(f"| 0.1 + restructure | {kept[0]} | {kept[1]} |")
    print(f"| the whole package at {a.base} (0.1) | {base_all} | {base_code} |")


if __name__ == "__main__":
    main()
