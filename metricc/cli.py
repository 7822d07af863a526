"""The ``metricc`` command: compile, grad, check and list metrics from the shell.

Every user mistake (bad formula, unknown name, missing parameter, bad option)
prints one message to stderr and exits with status 2; success exits 0. ``grad``
and ``list`` never import torch, so they answer in well under a second.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .errors import MetricError, MissingParameterError
from .runtime.options import RELAXATION_NAMES

__all__ = ["build_parser", "counts_grad", "curve_grad", "main", "matrix_grad"]

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


class UsageError(MetricError):
    """A command line argparse refused."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) raised instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


_FORMATTER = argparse.RawDescriptionHelpFormatter


def _pairs(items: Sequence[str] | None, flag: str) -> list[tuple[str, str]]:
    out = []
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UsageError(f"{flag} expects NAME=VALUE, got {item!r}")
        out.append((key.strip(), value.strip()))
    return out


def _param_value(key: str, text: str) -> Any:
    """A number; or, for a K x K parameter, a list of lists or a formula in i, j."""
    if text.lstrip().startswith("["):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            raise UsageError(f"--param {key}={text:.60}: a matrix is a list of lists of numbers, "
                             "e.g. [[0,1],[1,0]]") from None
    try:
        return int(text) if text.strip().lstrip("+-").isdigit() else float(text)
    except ValueError:
        if any(c.isalpha() for c in text):
            return text  # a K x K parameter as a formula in i and j, e.g. (i-j)^2
        raise UsageError(f"--param {key}={text}: the value must be a number") from None


def _option_value(text: str) -> Any:
    """``--option`` values: Python literals (numbers, True/False/None in any case, quoted
    strings), else the bare word as a string (``reduction=sum``). Never evaluated as code;
    the loss then checks each option's type and range (``offset=nan`` is refused there)."""
    word = text.strip().lower()
    if word in _WORDS:  # `from_logits=false` means False, not the string "false"
        return _WORDS[word]
    if len(text) > _MAX_OPTION_LENGTH:
        # literal_eval recurses per operator: 60k terms would end in a RecursionError traceback.
        raise UsageError(f"--option value of {len(text)} characters; an option is a number, a "
                         f"word or a short literal (at most {_MAX_OPTION_LENGTH} characters)")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        return text


#: Longest ``--option`` value; the longest real one (a class list) is far shorter.
_MAX_OPTION_LENGTH = 1000


_WORDS: dict[str, Any] = {"true": True, "false": False, "none": None, "null": None}


def _compile(args: argparse.Namespace) -> Any:
    from . import compile

    # Neither flag (or `grad`, which has none): the metric's own direction.
    hib = (False if getattr(args, "lower_is_better", False)
           else True if getattr(args, "higher_is_better", False) else None)
    try:
        # FORMULA `-` reads the formula (several lines allowed) from stdin.
        text = sys.stdin.read() if args.formula == "-" else args.formula
        return compile(text, higher_is_better=hib,
                       **{k: _param_value(k, v) for k, v in _pairs(args.param, "--param")})
    except MissingParameterError as e:
        flags = " ".join(f"--param {p}=<number>" for p in e.missing)
        raise MissingParameterError(f"{e} (on the command line: {flags})", e.missing) from None


def _add_formula(p: argparse.ArgumentParser, what: str = "FORMULA") -> None:
    p.add_argument("formula", metavar=what,
                   help="a formula over TP, FP, FN, TN (let-bindings separated by ';' or "
                        "newlines), a metric name, or '-' to read it from stdin")
    p.add_argument("-p", "--param", action="append", metavar="NAME=VALUE",
                   help="a value for a formula parameter (repeatable), e.g. --param beta=2")


def _add_direction(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--higher-is-better", action="store_true",
                   help="the metric is better when higher (default: a named metric's own "
                        "direction, else higher)")
    g.add_argument("--lower-is-better", action="store_true",
                   help="the metric is better when lower (the loss is the metric itself)")


# --- subcommands ----------------------------------------------------------------------------

def matrix_grad(m: Any, latex: bool) -> int:
    if latex:
        return _print_rows([("f", m.expr), (r"\frac{\partial f}{\partial C_{a,b}}", m.gradient_expr)],
                           _latex)
    _print_rows([("f", m.expr_text), ("df/dC[a,b]", m.gradient_text)])
    print("(symbolic in K; C[i,j] counts true class i predicted as j, a and b are class indices)")
    return EXIT_OK


def counts_grad(m: Any, latex: bool) -> int:
    """The objective's derivatives, then each constraint's (``h`` for ``h >= b``/``h <= b``)."""
    _counts_rows(m, latex, "f")
    for i, c in enumerate(m.constraints, 1):
        h = f"h{i}"
        print(f"\nconstraint {i}: {c.text}  ({h} {c.op} {c.bound:g})" if not latex
              else f"% constraint {i}: {c.text}")
        _counts_rows(c.metric, latex, h)
    return EXIT_OK


def _counts_rows(m: Any, latex: bool, f: str) -> int:
    import sympy

    from .analysis.counts import simplify

    d = m.gradient
    g1, g0 = simplify(d["TP"] - d["FN"]), simplify(d["FP"] - d["TN"])
    rows = [(f, m.expr), *((f"d{f}/d{k}", d) for k, d in m.gradient.items()),
            (f"g1 = d{f}/dTP - d{f}/dFN", g1), (f"g0 = d{f}/dFP - d{f}/dTN", g0)]
    if latex:
        names = {s: rf"\mathrm{{{s.name}}}" for s in m.expr.free_symbols | set(
            sym for _, e in rows for sym in e.free_symbols)}
        labels = {f: f, **{f"d{f}/d{k}": rf"\frac{{\partial {f}}}{{\partial \mathrm{{{k}}}}}"
                           for k in m.gradient},
                  f"g1 = d{f}/dTP - d{f}/dFN": rf"g_1 = {f}_{{\mathrm{{TP}}}} - {f}_{{\mathrm{{FN}}}}",
                  f"g0 = d{f}/dFP - d{f}/dTN": rf"g_0 = {f}_{{\mathrm{{FP}}}} - {f}_{{\mathrm{{TN}}}}"}
        return _print_rows(rows, lambda label, e: (labels[label],
                                                   sympy.latex(e, symbol_names=names)))
    return _print_rows(rows)


def _print_rows(rows: list[tuple[str, Any]],
                latex: Callable[[str, Any], tuple[str, str]] | None = None) -> int:
    """``label = expression`` lines, aligned as text or one LaTeX line each."""
    width = 0 if latex else max(len(label) for label, _ in rows)
    for label, e in rows:
        left, right = latex(label, e) if latex else (label.ljust(width), str(e))
        print(f"{left} = {right}")
    return EXIT_OK


def _latex(label: str, e: Any) -> tuple[str, str]:
    import sympy

    return label, sympy.latex(e)


def _local_forms(m: Any, latex: bool, note: str) -> int:
    """``metricc grad`` of a statistic of reductions: the metric, its local forms, a note."""
    rows = [("f", m.expr), *m.gradient.items()]
    if latex:
        return _print_rows(rows, _latex)
    _print_rows(rows)
    print(note)
    return EXIT_OK


def curve_grad(m: Any, latex: bool) -> int:
    return _local_forms(m, latex, "(the local forms, symbolic in the number of thresholds T: f = h(r0, r1, ...) "
                        "over the reductions r_j; dV/dTP_k = sum_j dh/dr_j (dterm/dTP_k at k + dterm/dTP_k+1 "
                        "at k - 1) for area/steps, TP1 FP1 ... being the counts at k + 1; docs/curve.md)")


def groups_grad(m: Any, latex: bool) -> int:
    return _local_forms(m, latex, "(the local forms, symbolic in the number of groups G: f = h(r0, r1, ..., TP, "
                        "FP, FN, TN) over the reductions r_j and the overall counts; dV/dTP_g = sum_j dh/dr_j "
                        "dr_j/df_g df_j/dTP at group g's counts + dh/dTP; docs/groups.md)")


def cmd_grad(args: argparse.Namespace) -> int:
    m = _compile(args)
    from .analysis.statistics import resolve

    printer: Callable[[Any, bool], int] = resolve(m.statistic.grad_printer)  # the declaration's
    return printer(m, args.latex)


def cmd_list(args: argparse.Namespace) -> int:
    from .library import REGISTRIES

    rows = [("name", "better", "aliases", "formula")]
    for m in (m for registry in REGISTRIES for m in registry.values()):
        formula = "; ".join(line.split("#")[0].strip() for line in m.formula.splitlines())
        if m.params:
            formula += "   [" + ", ".join(
                f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                for k, v in m.params.items()) + "]"
        rows.append((m.name, "higher" if m.higher_is_better else "lower",
                     ", ".join(m.aliases) or "-", formula))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3])
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    m = _compile(args)
    report = m.check()
    print(report)
    print()
    from .errors import VerificationError

    try:
        verification = m.verify(raise_on_failure=False)
    except VerificationError as e:
        print(f"verification: FAILED\n{e}")
        return EXIT_PROBLEM
    print(verification)
    # Every statistic's check report says depends_on_predictions and wrong_way().
    trains = report.depends_on_predictions and not report.wrong_way()
    return EXIT_OK if verification.ok and trains else EXIT_PROBLEM


def cmd_compile(args: argparse.Namespace) -> int:
    m = _compile(args)
    options = {k: _option_value(v) for k, v in _pairs(args.option, "--option")}
    if args.from_logits:
        options["from_logits"] = True
    if "relaxation" in options:
        raise UsageError("give the relaxation with --relaxation, not --option")
    # No --relaxation: the loss class's own default (softmax for mode=multiclass and K x K
    # metrics, else anyloss), as Metric.loss() without one. Metric.standalone writes.
    to_stdout = args.output in (None, "-")
    source = m.standalone(None if to_stdout else args.output, args.relaxation,
                          class_name=args.name, **options)
    if to_stdout:
        sys.stdout.write(source)
    else:
        print(f"wrote {args.output}", file=sys.stderr)
    return EXIT_OK


# --- parser --------------------------------------------------------------------------------

_EPILOG_MAIN = """\
examples:
  metricc list
  metricc grad f1
  metricc check "mcc"
  metricc compile f1 --relaxation anyloss -o f1_loss.py

exit status: 0 success, 1 'check' found a problem, 2 a usage or formula error."""

_EPILOG = {
    "compile": """\
example:
  metricc compile fbeta --param beta=2 --name F2Loss -o f2_loss.py
  metricc compile "2*TP/(2*TP+FP+FN)" --relaxation sigmoid --from-logits \\
      --option slope=2 --option reduction=sum

The file imports only torch: copy it into a project and use
  from f2_loss import F2Loss; loss = F2Loss()(probabilities, targets)""",
    "grad": """\
example:
  metricc grad f1
  metricc grad "TP/(TP + alpha*FP + beta*FN)" -p alpha=0.3 -p beta=0.7 --latex

g1 and g0 are the two numbers per confusion matrix the symbolic backward pass needs:
d loss/d a_i is y_i g1 + (1 - y_i) g0 (docs/architecture.md).""",
    "check": """\
example:
  metricc check mcc
  metricc check "FP/(TP+FP)"          # exits 1: this loss would train the wrong way

exit status: 0 all good, 1 the loss trains the wrong way (or not at all: a formula of
P and N only) or verification failed, 2 a usage or formula error.""",
    "list": """\
example:
  metricc list""",
}


def build_parser() -> argparse.ArgumentParser:
    """The ``metricc`` argument parser (subcommands compile, grad, check, list)."""
    from . import __version__

    parser = _Parser(prog="metricc", formatter_class=_FORMATTER, epilog=_EPILOG_MAIN,
                     description="Compile confusion-matrix metrics into verified, "
                                 "differentiable PyTorch losses.")
    parser.add_argument("--version", action="version", version=f"metricc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def add(name: str, func: Callable[[argparse.Namespace], int], help: str
            ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".",
                           epilog=_EPILOG[name], formatter_class=_FORMATTER)
        p.set_defaults(func=func)
        return p

    p = add("compile", cmd_compile, "write a standalone loss module that needs only torch")
    _add_formula(p, "FORMULA_OR_NAME")
    p.add_argument("--relaxation", choices=RELAXATION_NAMES, default=None,
                   help="how predictions are relaxed to soft 0/1 (default: softmax with "
                        "--option mode=multiclass, else anyloss; K x K metrics: their own "
                        "default, a sharpened softmax)")
    p.add_argument("--name", metavar="CLASS",
                   help="the loss class name (default: from the metric, e.g. F1Loss)")
    p.add_argument("--from-logits", action="store_true",
                   help="the loss takes logits (required by --relaxation sigmoid)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="another default of the loss class, e.g. amplifier=50, reduction=sum, "
                        "multidim_average=samplewise (repeatable)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    _add_direction(p)

    p = add("grad", cmd_grad, "print the simplified metric and its four partial derivatives")
    _add_formula(p)
    p.add_argument("--latex", action="store_true", help="print LaTeX instead of plain text")

    p = add("check", cmd_check,
            "analyse a metric (undefined set, monotonicity, range) and verify its gradient")
    _add_formula(p)
    _add_direction(p)

    add("list", cmd_list, "list the named metrics with formula, aliases and direction")
    return parser


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    print(f"metricc: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 problem found, 2 error)."""
    parser = build_parser()
    saved = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        args = parser.parse_args(argv)
        return int(args.func(args))
    except MetricError as e:
        print(f"metricc: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `metricc list | head`: stop quietly; point stdout at devnull so the
        # interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    finally:
        warnings.showwarning = saved


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
