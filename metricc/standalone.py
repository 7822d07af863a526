"""Standalone loss files: one module that needs only torch, for images without metricc.

:func:`emit_standalone` pastes the text of :mod:`metricc.runtime` (torch-only on
purpose) as it is at generation time, the generated kernels and one small
subclass of ``MetricLoss`` into a single deterministic module, so every option
the runtime has (relaxations, reductions, whatever it gains later) comes along.

User text reaches the file only as a ``repr()`` string literal (the formula), as
escaped docstring text, and as numbers: the class name must be a plain
identifier and option values must be Python literals.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .emit import KERNEL_NAMES
from .errors import MetricError

if TYPE_CHECKING:
    from .metric import Metric

__all__ = ["default_class_name", "emit_standalone", "runtime_source"]

_RUNTIME = Path(__file__).with_name("runtime.py")
_LITERALS = (bool, int, float, str, type(None))
#: Generated lines are wrapped to this width, so the file passes common line-length rules.
WIDTH = 88


def runtime_source() -> tuple[str, ast.Module]:
    """The text of ``metricc/runtime.py`` without its module docstring, and its AST.

    Refuses (an internal error) if the runtime ever imports anything beyond torch
    and the standard library: the standalone file would then not stand alone.
    """
    text = _RUNTIME.read_text(encoding="utf-8")
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            # A relative import (level > 0) names a metricc module: never allowed.
            roots = ["." * node.level + (node.module or "").split(".")[0]]
        elif isinstance(node, ast.Import):
            roots = [a.name.split(".")[0] for a in node.names]
        else:
            continue
        for root in roots:
            if root not in ("torch", "__future__") and root not in sys.stdlib_module_names:
                raise RuntimeError(f"metricc/runtime.py imports {root!r}; it must stay torch-only "
                                   "so that standalone loss files need nothing else")
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        text = "\n".join(text.splitlines()[body[0].end_lineno:]).lstrip("\n")
    return text.rstrip("\n") + "\n", tree


def default_class_name(metric: Metric) -> str:
    """``F1Loss`` for ``f1``, ``BalancedAccuracyLoss`` for ``balanced_accuracy``, else
    ``CustomMetricLoss``."""
    if not metric.name:
        return "CustomMetricLoss"
    return "".join(part[:1].upper() + part[1:] for part in metric.name.split("_")) + "Loss"


def _escape(c: str) -> str:
    """A visible escape for a control character or line separator, not the raw character."""
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def _doc(text: str) -> str:
    """``text`` made safe inside a triple-quoted (non-raw) docstring."""
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return "".join(c if c == "\n" or c.isprintable() else _escape(c) for c in text)


def _literal(value: Any) -> str:
    """Python source of a literal; strings in double quotes, non-printables escaped."""
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else (
            f"({inner})" if isinstance(value, tuple) else f"[{inner}]")
    if not isinstance(value, str):
        return repr(value)
    simple = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}
    return '"' + "".join(simple.get(c) or (c if c.isprintable() else _escape(c))
                         for c in value) + '"'


def _wrap_doc(text: str) -> str:
    lines = []
    for line in text.splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        lines.extend(textwrap.wrap(line, WIDTH, subsequent_indent=indent + "    ",
                                   break_long_words=False, break_on_hyphens=False) or [""])
    return "\n".join(lines)


def _wrap_code(source: str) -> str:
    """Break long ``name = expression`` lines inside parentheses, at spaces.

    Generated expressions hold no string literals, so every space lies between tokens.
    """
    out = []
    for line in source.splitlines():
        m = re.fullmatch(r"(\s*)(\w+) = (.+)", line)
        if len(line) <= WIDTH or not m:
            out.append(line)
            continue
        indent, target, expr = m.groups()
        out.append(f"{indent}{target} = (")
        out.extend(textwrap.wrap(expr, WIDTH - 4, initial_indent=indent + "    ",
                                 subsequent_indent=indent + "    ",
                                 break_long_words=False, break_on_hyphens=False))
        out.append(f"{indent})")
    return "\n".join(out) + "\n"


def _string_attribute(name: str, text: str) -> str:
    """``    name = "text"`` on one line, or split into implicitly joined pieces."""
    one = f"    {name} = {_literal(text)}\n"
    if len(one) <= WIDTH + 1:
        return one
    pieces = [text[i:i + 60] for i in range(0, len(text), 60)]
    return (f"    {name} = (\n" + "".join(f"        {_literal(p)}\n" for p in pieces)
            + "    )\n")


def _init_params(tree: ast.Module) -> list[tuple[str, str | None, str | None, bool]]:
    """``MetricLoss.__init__``'s parameters: (name, annotation, default source, keyword-only)."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "MetricLoss":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    a = item.args
                    if a.vararg or a.kwarg or a.posonlyargs:
                        raise RuntimeError("MetricLoss.__init__ must take plain named options")
                    out: list[tuple[str, str | None, str | None, bool]] = []
                    pos = a.args[1:]  # skip self
                    defaults: list[ast.expr | None] = [None] * (len(pos) - len(a.defaults))
                    defaults += list(a.defaults)
                    for arg, d in zip(pos, defaults, strict=True):
                        out.append((arg.arg, arg.annotation and ast.unparse(arg.annotation),
                                    d and ast.unparse(d), False))
                    for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
                        out.append((arg.arg, arg.annotation and ast.unparse(arg.annotation),
                                    d and ast.unparse(d), True))
                    return out
    raise RuntimeError("metricc/runtime.py has no MetricLoss.__init__")


def _used_names(tree: ast.AST) -> set[str]:
    """Every name the file defines or looks up, at any depth.

    The class is a module global: named like something a function of the file
    looks up (``dist``, ``MetricLoss``) or like a builtin (``float``, ``super``)
    it would replace that on first use.
    """
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def emit_standalone(metric: Metric, class_name: str | None = None,
                    relaxation: str = "anyloss", *, warn_monotonicity: bool = True,
                    **defaults: Any) -> str:
    """Source of one self-contained module (needs only torch) holding ``class_name``.

    The class subclasses the pasted ``MetricLoss`` with the metric's kernels and
    takes the same options as ``metric.loss()``; ``relaxation`` and ``defaults``
    become its default arguments. The same metric and options always give the
    same bytes. Like ``metric.loss()``, it warns (:class:`metricc.MetricWarning`)
    when the metric moves the wrong way for training, unless ``warn_monotonicity=False``.

    >>> import metricc
    >>> src = emit_standalone(metricc.compile("f1"), amplifier=50.0)
    >>> "class F1Loss(MetricLoss):" in src and "amplifier: float = 50.0," in src
    True
    """
    name = class_name or default_class_name(metric)
    runtime, tree = runtime_source()
    reserved = (_used_names(tree) | _used_names(ast.parse(metric.kernels_source))
                | set(dir(builtins)) | {"torch", "annotations"})
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or keyword.iskeyword(name) \
            or len(name) > 100:
        raise MetricError(f"class name {name!r} is not a plain Python identifier; use letters, "
                          "digits and underscores, e.g. F1Loss")
    if name in reserved:
        what = "a Python builtin" if name in dir(builtins) else "taken inside the generated file"
        raise MetricError(f"class name {name!r} is {what}; choose another, e.g. "
                          + default_class_name(metric))
    for key, value in defaults.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(v, _LITERALS) and not isinstance(v, (list, tuple))
                   for v in items):
            raise MetricError(f"option {key}={value!r} cannot be written into a file; "
                              "options must be numbers, strings, booleans, None or a "
                              "list of those")
    # The in-process loss validates the options with the same code the file will run.
    metric.loss(relaxation, warn_monotonicity=warn_monotonicity, **defaults)

    # Lists become tuples: a mutable default argument would be shared between instances.
    chosen = {"relaxation": relaxation,
              **{k: tuple(v) if isinstance(v, list) else v for k, v in defaults.items()}}
    params = _init_params(tree)
    sig, call = ["        self,"], []
    star = False
    for pname, annotation, default, kwonly in params:
        if kwonly and not star:
            sig.append("        *,")
            star = True
        text = pname + (f": {annotation}" if annotation else "")
        if pname in chosen:
            text += f" = {_literal(chosen[pname])}"
        elif default is not None:
            try:  # same quoting as the chosen defaults
                text += f" = {_literal(ast.literal_eval(default))}"
            except (ValueError, SyntaxError):
                text += f" = {default}"
        sig.append(f"        {text},")
        call.append(f"            {pname}," if not kwonly else f"            {pname}={pname},")

    report = metric.check()
    direction = "higher is better; the loss is 1 - metric" if metric.higher_is_better \
        else "lower is better; the loss is the metric itself"
    gradient = metric.gradient
    width = max(len(k) for k in gradient)
    doc = [
        f"{name}: a differentiable PyTorch loss for a confusion-matrix metric.",
        "",
        "Generated by metricc; needs only torch (no metricc, sympy or lark).",
        "",
        "Formula as written:",
        "",
        # split("\n"), not splitlines(): the latter also breaks at U+2028 and friends.
        *("    " + line for line in metric.text.strip().split("\n")),
        "",
    ]
    if metric.parameters:
        doc += ["Parameters: " + ", ".join(f"{k} = {v!r}" for k, v in
                                          sorted(metric.parameters.items())), ""]
    doc += [
        f"Simplified: {metric.expr}",
        f"Direction: {direction}.",
        "",
        "Partial derivatives (the backward pass uses g1 = d/dTP - d/dFN and",
        "g0 = d/dFP - d/dTN of the eps-guarded metric):",
        "",
        *(f"    d/d{k}{' ' * (width - len(k))} = {d}" for k, d in gradient.items()),
        "",
        "Monotonicity: " + ", ".join(f"{k} {m}" for k, m in report.monotonicity.items()) + ".",
    ]
    if report.undefined:
        # Sorted: the analysis walks min()/max() arguments in hash order, and the
        # file must not depend on PYTHONHASHSEED.
        doc += ["Undefined where: " + "; ".join(sorted(str(s) for s in report.undefined)) + ";",
                "the loss adds eps to every denominator, root and log argument there."]
    shown = ", ".join(f"{k}={_literal(v)}" for k, v in chosen.items())
    doc += [
        "",
        "Usage::",
        "",
        f"    loss_fn = {name}()  # defaults: {shown}",
        f"    loss = loss_fn({'logits' if chosen.get('from_logits') else 'probabilities'}, targets)",
        "    loss.backward()",
    ]
    class_doc = (f"``{'1 - ' if metric.higher_is_better else ''}metric`` on a relaxed "
                 "confusion matrix; options as in ``MetricLoss``.")
    parts = [
        '"""' + _wrap_doc(_doc("\n".join(doc))) + '\n"""\n',
        runtime,
        "\n\n# --- generated from the metric's SymPy form " + "-" * 40 + "\n\n",
        _wrap_code(metric.kernels_source.rstrip("\n")),
        "\n\n",
        f"class {name}(MetricLoss):\n",
        f'    """{class_doc}"""\n\n',
        _string_attribute("formula", metric.text.strip()),
        f"    higher_is_better = {metric.higher_is_better!r}\n",
        *(f"    {k} = staticmethod({k})\n" for k in KERNEL_NAMES),
        "\n",
        "    def __init__(\n",
        *(line + "\n" for line in sig),
        "    ) -> None:\n",
        "        super().__init__(\n",
        *(line + "\n" for line in call),
        "        )\n",
    ]
    return "".join(parts)
