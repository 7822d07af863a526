"""Standalone loss files: one module that needs only torch, for images without metricc.

:func:`emit_standalone` pastes the runtime modules (torch-only on purpose) and
``errors.py``, as they are at generation time and in the fixed order of
:data:`SOURCES`, then the generated kernels and one small subclass of
``MetricLoss``, into a single deterministic module. Every option the runtime
has (relaxations, modes, whatever it gains later) comes along, and the file
raises metricc's own exception classes. The assembly is lark's standalone
generator's idea: modules concatenated, their imports of each other dropped.

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

from ..errors import MetricError
from .counts import KERNEL_NAMES
from .loss_class import loss_parameters

if TYPE_CHECKING:
    from ..metric import Metric

__all__ = ["SOURCES", "default_class_name", "emit_standalone", "runtime_source"]

_PACKAGE = Path(__file__).resolve().parents[1]
#: The modules a standalone file is made of, in this order: each may import only
#: torch, the standard library and the modules before it (those imports are dropped).
SOURCES: tuple[tuple[str, Path], ...] = tuple(
    (name, _PACKAGE.joinpath(*name.split(".")[1:]).with_suffix(".py")) for name in (
        "metricc.errors",
        "metricc.runtime.options",
        "metricc.runtime.sigmoids",
        "metricc.runtime.relax_base",
        "metricc.runtime.relax",
        "metricc.runtime.counts",
        "metricc.runtime.distributed",
        "metricc.runtime.hints",
        "metricc.runtime.modes",
        "metricc.runtime.averages",
        "metricc.runtime.weights",
        "metricc.runtime.logit_grad",
        "metricc.runtime.symbolic",
        "metricc.runtime.loss",
        "metricc.runtime.constraint_state",
        "metricc.runtime.constrained",
        "metricc.runtime.matrix",
    ))
_LITERALS = (bool, int, float, str, type(None))
#: Generated lines are wrapped to this width, so the file passes common line-length rules.
WIDTH = 88


def _imported_module(node: ast.ImportFrom, module: str) -> str:
    """The absolute name a relative ``from ... import`` in ``module`` refers to."""
    parts = module.split(".")[: -node.level]
    return ".".join([*parts, *(node.module.split(".") if node.module else [])])


def _is_docstring(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def runtime_source() -> tuple[str, ast.Module]:
    """The runtime text of a standalone file (imports first), and its AST.

    Each module of :data:`SOURCES` loses its docstring, ``__all__`` and
    top-level imports; the imports of torch and the standard library are
    merged at the top, and imports of the earlier modules are dropped. Refuses
    (an internal error) any other import, and a name defined twice: the
    standalone file would then not stand alone, or not work.
    """
    plain: list[str] = []  # "import x" lines, first seen first
    froms: dict[str, list[str]] = {}  # module -> names, for "from x import a, b"
    bodies: list[str] = []
    pasted: set[str] = set()
    defined: dict[str, str] = {}
    for module, path in SOURCES:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        drop: set[int] = set()
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = _imported_module(node, module)
                if target not in pasted:
                    raise RuntimeError(f"{path.name} imports {target!r}; a runtime module must "
                                       "stay torch-only (importing only torch, the standard "
                                       "library and the runtime modules before it) so that "
                                       "standalone loss files need nothing else")
                continue
            if isinstance(node, ast.ImportFrom):
                roots = [(node.module or "").split(".")[0]]
            elif isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            else:
                continue
            for root in roots:
                if root not in ("torch", "__future__") and root not in sys.stdlib_module_names:
                    raise RuntimeError(f"{path.name} imports {root!r}; it must stay torch-only "
                                       "so that standalone loss files need nothing else")
        for i, node in enumerate(tree.body):
            span = set(range(node.lineno - 1, node.end_lineno or node.lineno))
            if i == 0 and _is_docstring(node):
                drop |= span
            elif isinstance(node, ast.Import):
                drop |= span
                for a in node.names:
                    line = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
                    if line not in plain:
                        plain.append(line)
            elif isinstance(node, ast.ImportFrom):
                drop |= span
                if node.level or node.module == "__future__":
                    continue
                names = froms.setdefault(node.module or "", [])
                names += [a.name + (f" as {a.asname}" if a.asname else "")
                          for a in node.names if a.name not in names]
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                drop |= span
        for name in _top_level_names(tree, imports=False):
            if name in defined:
                raise RuntimeError(f"{name!r} is defined in both {defined[name]} and {module}; "
                                   "standalone files paste them into one namespace")
            defined[name] = module
        body = "\n".join(line for k, line in enumerate(lines) if k not in drop).strip("\n")
        bodies.append(f"# --- {module} " + "-" * max(3, WIDTH - 7 - len(module)) + "\n\n" + body)
        pasted.add(module)
    head = ["from __future__ import annotations"]
    for third_party in (False, True):  # standard library, then torch, sorted as isort does
        def ours(module: str, third_party: bool = third_party) -> bool:
            return (module.split(".")[0] == "torch") == third_party

        section = sorted(line for line in plain if ours(line.split()[1]))
        section += [f"from {m} import {', '.join(sorted(n))}"
                    for m, n in sorted(froms.items()) if ours(m)]
        head += ["", *section]
    text = "\n".join(head) + "\n\n" + "\n\n\n".join(bodies) + "\n"
    return text, ast.parse(text)


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


def _init_params() -> list[tuple[str, str | None, Any, bool]]:
    """``MetricLoss``'s options: (name, annotation, default or ``_NO_DEFAULT``, keyword-only)."""
    out = []
    for p in loss_parameters():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise RuntimeError("MetricLoss.__init__ must take plain named options")
        annotation = None if p.annotation is p.empty else str(p.annotation)
        default = _NO_DEFAULT if p.default is p.empty else p.default
        out.append((p.name, annotation, default, p.kind == p.KEYWORD_ONLY))
    return out


_NO_DEFAULT = object()


def _top_level_names(tree: ast.Module, imports: bool = True) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if imports:
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


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
                    relaxation: str | None = None, *, warn_monotonicity: bool = True,
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
    if getattr(metric, "constraints", ()):
        # The file would hold the objective alone and silently drop the constraints.
        raise MetricError("standalone files do not carry constraints yet; use "
                          "metricc.compile(...).loss() in Python, or compile the objective alone")
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
    # No relaxation given: the class keeps MetricLoss's default (softmax in multiclass
    # mode, else anyloss), decided from the mode at construction.
    chosen = {**({"relaxation": relaxation} if relaxation is not None else {}),
              **{k: tuple(v) if isinstance(v, list) else v for k, v in defaults.items()}}
    params = _init_params()
    sig, call = ["        self,"], []
    star = False
    for pname, annotation, default, kwonly in params:
        if kwonly and not star:
            sig.append("        *,")
            star = True
        text = pname + (f": {annotation}" if annotation else "")
        if pname in chosen:
            text += f" = {_literal(chosen[pname])}"
        elif default is not _NO_DEFAULT:
            if not isinstance(default, _LITERALS):
                raise RuntimeError(f"MetricLoss option {pname} must default to a literal")
            text += f" = {_literal(default)}"
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
        f"    loss_fn = {name}()" + (f"  # defaults: {shown}" if shown else ""),
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
        *([_string_attribute("micro_refusal", metric.loss_class.micro_refusal)]
          if metric.loss_class.micro_refusal else []),
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
