"""Standalone loss files: one module that needs only torch, for images without metricc.

:func:`emit_standalone` writes, from data (:class:`StandaloneSpec`: kernel source,
class name, class attributes, options, docstring lines, the runtime base class), the
pasted runtime (:func:`metricc.emit.runtime_source.runtime_source`), the generated
kernels and one small subclass of the statistic's runtime loss, into a single
deterministic module, for every statistic. Every option the runtime has comes
along, and the file raises metricc's own exception classes.

User text reaches the file only as a ``repr()``-style string literal (the formula),
as escaped docstring text, and as numbers: the class name must be a plain identifier
not taken in the file, and option values are normalised to plain built-in values.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import keyword
import numbers
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import MetricError
from .runtime_source import SOURCES, WIDTH, loaded_names, needed_modules, runtime_source, used_names

__all__ = ["SOURCES", "StandaloneSpec", "check_class_name", "emit_standalone", "literal", "plain_option",
           "runtime_source"]

_LITERALS = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class StandaloneSpec:
    """Everything a standalone file is written from (no metric object)."""

    class_name: str
    #: The runtime class the file's class subclasses (``MetricLoss``, ``MatrixLoss``).
    base: str
    kernels_source: str
    kernel_names: tuple[str, ...]
    #: ``(name, value)`` class attributes: the formula, the direction, K x K parameters.
    attributes: tuple[tuple[str, Any], ...]
    #: The base class's ``__init__`` parameters after ``self``; ``defaults`` replace defaults.
    parameters: tuple[inspect.Parameter, ...]
    defaults: tuple[tuple[str, Any], ...]
    #: The module docstring, line by line; and the class's one-line docstring.
    doc: tuple[str, ...]
    class_doc: str


def plain_option(key: str, value: Any) -> Any:
    """An option value as a plain built-in (``bool``, ``int``, ``float``, ``str``, ``None`` or a
    tuple of those): the file prints it, never the ``repr`` of a caller's object.

    >>> import enum
    >>> class Mode(enum.IntEnum):
    ...     TWO = 2
    >>> plain_option("n", Mode.TWO), plain_option("x", [1, 0.5])
    (2, (1, 0.5))
    """
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        items = tuple(plain_option(key, v) for v in value)
        if any(isinstance(v, tuple) for v in items):
            raise MetricError(f"option {key}={value!r} cannot be written into a file: a list "
                              "of numbers, strings, booleans or None, not of lists")
        return items
    if isinstance(value, bool) or type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    raise MetricError(f"option {key}={value!r:.60} cannot be written into a file; options must "
                      "be numbers, strings, booleans, None or a list of those")


def check_class_name(name: str, kernels_source: str, suggestion: str, base: str | None = None) -> None:
    """Refuse a class name that is not a plain identifier, or is taken inside the file.

    The class is a module global: named like something a function of the file looks
    up (``dist``, ``MetricLoss``, a kernel argument such as ``eps`` or ``K``) or like a
    builtin (``float``, ``super``) it would replace that on first use. ``base`` is the
    runtime class the file subclasses (its runtime is pasted; everything with None).
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or keyword.iskeyword(name) \
            or len(name) > 100:
        raise MetricError(f"class name {name!r} is not a plain Python identifier; use letters, "
                          f"digits and underscores, e.g. {suggestion}")
    _, tree = runtime_source(base)
    reserved = (used_names(tree) | used_names(ast.parse(kernels_source))
                | set(dir(builtins)) | {"torch", "annotations"})
    if name in reserved:
        what = "a Python builtin" if name in dir(builtins) else "taken inside the generated file"
        raise MetricError(f"class name {name!r} is {what}; choose another, e.g. {suggestion}")


def _escape(c: str) -> str:
    """A visible escape for a control character or line separator, not the raw character."""
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def _doc(text: str) -> str:
    """``text`` made safe inside a triple-quoted (non-raw) docstring."""
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return "".join(c if c == "\n" or c.isprintable() else _escape(c) for c in text)


def literal(value: Any) -> str:
    """Python source of a literal; strings in double quotes, non-printables escaped."""
    if isinstance(value, (list, tuple)):
        inner = ", ".join(literal(v) for v in value)
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


def _attribute(name: str, value: Any) -> str:
    """``    name = value`` on one line; a long string split into implicitly joined pieces."""
    one = f"    {name} = {literal(value)}\n"
    if not isinstance(value, str) or len(one) <= WIDTH + 1:
        return one
    pieces = [value[i:i + 60] for i in range(0, len(value), 60)]
    return (f"    {name} = (\n" + "".join(f"        {literal(p)}\n" for p in pieces)
            + "    )\n")


def _signature(parameters: Sequence[inspect.Parameter], chosen: dict[str, Any]
               ) -> tuple[list[str], list[str]]:
    """The class's ``__init__`` lines: the base's options with ``chosen`` defaults, and the
    ``super().__init__`` call passing them on."""
    sig, call = ["        self,"], []
    star = False
    for p in parameters:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise RuntimeError("the runtime loss's __init__ must take plain named options")
        kwonly = p.kind == p.KEYWORD_ONLY
        if kwonly and not star:
            sig.append("        *,")
            star = True
        text = p.name + ("" if p.annotation is p.empty else f": {p.annotation}")
        if p.name in chosen:
            text += f" = {literal(chosen[p.name])}"
        elif p.default is not p.empty:
            if not isinstance(p.default, _LITERALS):
                raise RuntimeError(f"loss option {p.name} must default to a literal")
            text += f" = {literal(p.default)}"
        sig.append(f"        {text},")
        call.append(f"            {p.name}={p.name}," if kwonly else f"            {p.name},")
    # a typo gets metricc's did-you-mean (unknown_loss_option), not Python's bare TypeError
    sig.append("        **unknown: object,")
    return sig, call


def _contents(class_name: str, base: str, modules: Sequence[str]) -> str:
    """A comment that says what the file holds and where: its sections, in order."""
    pasted = textwrap.fill(", ".join(m.rpartition(".")[2] for m in modules), WIDTH - 6,
                           initial_indent="#     ", subsequent_indent="#     ")
    return (f"\n# Contents, in this order (sections start with '# --- '):\n"
            f"#  1. the runtime {class_name} needs, pasted from metricc ({len(modules)} modules):\n"
            f"{pasted}\n"
            f"#     only the definitions {class_name} reaches; their docstrings are in metricc's\n"
            f"#     sources (metricc/runtime/, metricc/errors.py);\n"
            f"#  2. the kernels generated from the metric's SymPy form;\n"
            f"#  3. {class_name}, a subclass of {base} holding those kernels (at the end).\n\n")


def emit_standalone(spec: StandaloneSpec) -> str:
    """Source of one self-contained module (needs only torch) holding ``spec.class_name``.

    The class subclasses the pasted ``spec.base`` with the kernels and takes the same
    options; ``spec.defaults`` become its default arguments (lists as tuples: a mutable
    default would be shared between instances). The same spec gives the same bytes.
    ``metricc.Metric.standalone`` builds the spec (and checks the options by building
    the in-process loss); this function only writes.
    """
    check_class_name(spec.class_name, spec.kernels_source, "F1Loss", spec.base)
    # Only what the class reaches: its base and the kernels' globals, followed by name.
    # (and what the generated constructor itself calls: the did-you-mean of a typo)
    uses = frozenset({spec.base, "unknown_loss_option"} | loaded_names(ast.parse(spec.kernels_source)))
    runtime, _ = runtime_source(spec.base, uses)
    modules = [m for m in needed_modules(spec.base) if f"\n# --- {m} " in runtime]
    chosen = {k: plain_option(k, v) for k, v in spec.defaults}
    sig, call = _signature(spec.parameters, chosen)
    parts = [
        '"""' + _wrap_doc(_doc("\n".join(spec.doc))) + '\n"""\n',
        _contents(spec.class_name, spec.base, modules),
        runtime,
        "\n\n# --- generated from the metric's SymPy form " + "-" * 40 + "\n\n",
        _wrap_code(spec.kernels_source.rstrip("\n")),
        "\n\n",
        f"# --- {spec.class_name} " + "-" * max(3, WIDTH - 7 - len(spec.class_name)) + "\n\n",
        f"class {spec.class_name}({spec.base}):\n",
        f'    """{spec.class_doc}"""\n\n',
        *(_attribute(k, v) for k, v in spec.attributes),
        *(f"    {k} = staticmethod({k})\n" for k in spec.kernel_names),
        "\n",
        "    def __init__(\n",
        *(line + "\n" for line in sig),
        "    ) -> None:\n",
        "        if unknown:\n",
        "            options = (\n",
        *(line + "\n" for line in textwrap.wrap(
            " ".join(literal(p.name) + "," for p in spec.parameters), WIDTH,
            initial_indent=" " * 16, subsequent_indent=" " * 16)),
        "            )\n",
        "            raise unknown_loss_option(next(iter(unknown)), options)\n",
        "        super().__init__(\n",
        *(line + "\n" for line in call),
        "        )\n",
    ]
    return "".join(parts)
