"""The runtime half of a standalone file: the torch-only modules pasted into one text.

:func:`runtime_source` pastes the runtime modules (torch-only on purpose) and
``errors.py`` that the file's loss class needs (:func:`needed_modules`: the module
defining its base class and what that imports, read from the ASTs), as they are at
generation time and in the fixed order of :data:`SOURCES`; the assembly is lark's standalone generator's idea: modules
concatenated, their imports of each other dropped. Given the names the rest of the
file uses, it pastes only what those reach (:func:`prune`): the top-level
definitions reachable from them by name, without their multi-line docstrings.
"""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

from ..analysis.statistics import STATISTICS

__all__ = ["SOURCES", "WIDTH", "loaded_names", "needed_modules", "prune", "runtime_source",
           "top_level_names", "used_names"]

_PACKAGE = Path(__file__).resolve().parents[1]
#: The runtime every statistic shares, in the order a module may import the ones before it.
_SHARED = ("metricc.errors", "metricc.runtime.options", "metricc.runtime.sigmoids",
           "metricc.runtime.relax_base", "metricc.runtime.relax", "metricc.runtime.counts",
           "metricc.runtime.distributed", "metricc.runtime.hints", "metricc.runtime.modes",
           "metricc.runtime.averages", "metricc.runtime.weights", "metricc.runtime.loss_base",
           "metricc.runtime.logit_grad",
           "metricc.runtime.symbolic", "metricc.runtime.loss", "metricc.runtime.constraint_defaults",
           "metricc.runtime.constraint_state", "metricc.runtime.constrained")
#: What wraps any statistic's loss, after them all.
_TAIL = ("metricc.runtime.warm_start",)
#: The modules a standalone file is made of, in this order: each may import only
#: torch, the standard library and the modules before it (those imports are dropped). After
#: the shared runtime, each statistic's own modules, as its declaration lists them
#: (``Statistic.runtime_modules``, in the order of ``STATISTICS``).
SOURCES: tuple[tuple[str, Path], ...] = tuple(
    (name, _PACKAGE.joinpath(*name.split(".")[1:]).with_suffix(".py"))
    for name in (*_SHARED, *(m for s in STATISTICS.values() for m in s.runtime_modules), *_TAIL))
#: Generated lines are wrapped to this width, so the file passes common line-length rules.
WIDTH = 88


def _imported_module(node: ast.ImportFrom, module: str) -> str:
    """The absolute name a relative ``from ... import`` in ``module`` refers to."""
    parts = module.split(".")[: -node.level]
    return ".".join([*parts, *(node.module.split(".") if node.module else [])])


@dataclass(frozen=True)
class _Pasted:
    """One runtime module as the file holds it."""

    body: str
    plain: tuple[str, ...]  # "import x" lines
    froms: tuple[tuple[str, tuple[str, ...]], ...]  # (module, names) of "from x import ..."
    #: The earlier runtime modules it imports, anywhere in its text (also inside functions).
    imports: frozenset[str]
    defines: frozenset[str]


@functools.lru_cache(maxsize=64)
def _read(module: str, text: str, earlier: frozenset[str], name: str) -> _Pasted:
    """``module``'s text without its docstring, ``__all__`` and top-level imports.

    Cached by the text itself, so an edited module is read again. Refuses (an internal
    error) an import of anything but torch, the standard library and ``earlier``.
    """
    lines = text.splitlines()
    drop: set[int] = set()
    tree = ast.parse(text)
    imports: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            target = _imported_module(node, module)
            if target not in earlier:
                raise RuntimeError(f"{name} imports {target!r}; a runtime module must "
                                   "stay torch-only (importing only torch, the standard "
                                   "library and the runtime modules before it) so that "
                                   "standalone loss files need nothing else")
            imports.add(target)
            continue
        if isinstance(node, ast.ImportFrom):
            roots = [(node.module or "").split(".")[0]]
        elif isinstance(node, ast.Import):
            roots = [a.name.split(".")[0] for a in node.names]
        else:
            continue
        for root in roots:
            if root not in ("torch", "__future__") and root not in sys.stdlib_module_names:
                raise RuntimeError(f"{name} imports {root!r}; it must stay torch-only "
                                   "so that standalone loss files need nothing else")
    plain: list[str] = []
    froms: dict[str, list[str]] = {}
    for i, node in enumerate(tree.body):
        span = set(range(node.lineno - 1, node.end_lineno or node.lineno))
        if i == 0 and ast.get_docstring(tree) is not None:
            drop |= span
        elif isinstance(node, ast.Import):
            drop |= span
            plain += [f"import {a.name}" + (f" as {a.asname}" if a.asname else "") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            drop |= span
            if not node.level and node.module != "__future__":
                froms.setdefault(node.module or "", []).extend(
                    a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            drop |= span
    body = "\n".join(line for k, line in enumerate(lines) if k not in drop).strip("\n")
    return _Pasted(body, tuple(plain), tuple((m, tuple(n)) for m, n in froms.items()),
                   frozenset(imports), frozenset(top_level_names(tree, imports=False)))


def _modules() -> dict[str, _Pasted]:
    """Every module of :data:`SOURCES`, checked: torch-only, no name defined twice."""
    read: dict[str, _Pasted] = {}
    defined: dict[str, str] = {}
    for module, path in SOURCES:
        pasted = _read(module, path.read_text(encoding="utf-8"), frozenset(read), path.name)
        for name in sorted(pasted.defines):
            if name in defined:
                raise RuntimeError(f"{name!r} is defined in both {defined[name]} and {module}; "
                                   "standalone files paste them into one namespace")
            defined[name] = module
        read[module] = pasted
    return read


def needed_modules(base: str | None = None) -> tuple[str, ...]:
    """The modules of :data:`SOURCES` a file whose class subclasses ``base`` needs, in order.

    The module defining ``base`` and, transitively, every earlier module it imports
    (read from their ASTs); all of them when ``base`` is None.

    >>> needed = needed_modules("MetricLoss")
    >>> "metricc.runtime.loss" in needed, "metricc.runtime.matrix" in needed
    (True, False)
    """
    modules = _modules()
    if base is None:
        return tuple(modules)
    owners = [m for m, p in modules.items() if base in p.defines]
    if not owners:
        raise RuntimeError(f"no runtime module defines {base!r}")
    need, todo = set(), [owners[0]]
    while todo:
        module = todo.pop()
        if module not in need:
            need.add(module)
            todo.extend(modules[module].imports)
    return tuple(m for m in modules if m in need)


def runtime_source(base: str | None = None, uses: frozenset[str] | None = None
                   ) -> tuple[str, ast.Module]:
    """The runtime text of a standalone file (imports first), and its AST.

    Holds the modules of :data:`SOURCES` that a subclass of ``base`` needs
    (:func:`needed_modules`; all with no ``base``), each without its docstring,
    ``__all__`` and top-level imports; the imports of torch and the standard
    library are merged at the top, and imports of the earlier modules are dropped.
    With ``uses`` (the names the rest of the file looks up: its loss class's base,
    the kernels' globals), only what those reach is pasted (:func:`prune`), and only
    the imports the pasted text uses; a module left empty has no section.
    Every module of :data:`SOURCES` is checked, pasted or not: an import of
    anything else, or a name defined twice, is refused (an internal error): the
    standalone file would then not stand alone, or not work.
    """
    modules = _modules()
    chosen = needed_modules(base)
    kept = prune(tuple((m, modules[m].body) for m in chosen), uses) if uses is not None else {
        m: modules[m].body for m in chosen}
    loaded = (loaded_names(ast.parse("\n\n".join(kept.values()))) | uses) if uses is not None else None
    plain: list[str] = []  # "import x" lines, first seen first
    froms: dict[str, list[str]] = {}  # module -> names, for "from x import a, b"
    bodies: list[str] = []
    for module in chosen:
        pasted = modules[module]
        plain += [line for line in pasted.plain if line not in plain
                  and (loaded is None or _bound(line.split()[-1]) in loaded)]
        for source, names in pasted.froms:
            have = froms.setdefault(source, [])
            have += [n for n in names if n not in have and (loaded is None or _bound(n) in loaded)]
        if kept[module]:
            bodies.append(f"# --- {module} " + "-" * max(3, WIDTH - 7 - len(module)) + "\n\n"
                          + kept[module])
    head = ["from __future__ import annotations"]
    for third_party in (False, True):  # standard library, then torch, sorted as isort does
        def ours(module: str, third_party: bool = third_party) -> bool:
            return (module.split(".")[0] == "torch") == third_party

        section = sorted(line for line in plain if ours(line.split()[1]))
        section += [f"from {m} import {', '.join(sorted(n))}"
                    for m, n in sorted(froms.items()) if ours(m) and n]
        head += ["", *section]
    text = "\n".join(head) + "\n\n" + "\n\n\n".join(bodies) + "\n"
    return text, ast.parse(text)


def _bound(name: str) -> str:
    """The name an import binds: ``a.b`` binds ``a``; ``x as y`` binds ``y``."""
    return name.split(" as ")[-1].split(".")[0]


def loaded_names(tree: ast.AST) -> set[str]:
    """Every name ``tree`` looks up (annotations included), at any depth."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _defined(node: ast.stmt) -> set[str]:
    """The module globals a top-level definition or assignment binds (empty for anything else)."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def _docstring_lines(node: ast.stmt) -> set[int]:
    """0-based lines of the multi-line docstrings of the functions and classes in ``node``
    that have more in their body (a docstring alone stays: the body would be empty)."""
    drop: set[int] = set()
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and len(n.body) > 1 \
                and ast.get_docstring(n, clean=False) is not None:
            doc = n.body[0]
            if doc.end_lineno and doc.end_lineno > doc.lineno:
                drop |= set(range(doc.lineno - 1, doc.end_lineno))
    return drop


def _blocks(body: str) -> list[tuple[ast.stmt | None, list[str]]]:
    """``body``'s top-level statements, each with its lines: the comment lines just above
    it, the statement, the blank lines after it (docstrings of what it defines left out).
    The first entry (statement None) holds the lines before the first statement."""
    lines = body.splitlines()
    tree = ast.parse(body)
    starts: list[int] = []
    for node in tree.body:
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#") and (
                not starts or start - 1 >= (tree.body[len(starts) - 1].end_lineno or 0)):
            start -= 1
        starts.append(start)
    out: list[tuple[ast.stmt | None, list[str]]] = [(None, lines[:starts[0] if starts else None])]
    for i, node in enumerate(tree.body):
        end = starts[i + 1] if i + 1 < len(starts) else len(lines)
        doc = _docstring_lines(node)
        out.append((node, [line for k, line in enumerate(lines[starts[i]:end], starts[i])
                           if k not in doc]))
    return out


def prune(bodies: tuple[tuple[str, str], ...], uses: frozenset[str]) -> dict[str, str]:
    """Each ``(module, body)`` cut to the top-level definitions that ``uses`` reach.

    A definition (``def``, ``class``, a global assignment) is kept when a kept statement
    or ``uses`` looks its name up (read from the AST, conservatively: any load of the
    name, at any depth); every other statement (a module-level check, an ``if``) is
    kept and its names are followed too. Multi-line docstrings are left out (the
    file's readers find them in metricc's sources); comments stay.

    >>> kept = prune((("m", "def a():\\n    return b()\\n\\n\\ndef b():\\n    return 1\\n\\n\\n"
    ...                      "def c():\\n    return 2\\n"),), frozenset({"a"}))
    >>> "def b" in kept["m"], "def c" in kept["m"]
    (True, False)
    """
    blocks = {m: _blocks(body) for m, body in bodies}
    owners: dict[str, list[tuple[str, int]]] = {}
    todo = set(uses)
    keep = set()
    for m, entries in blocks.items():
        for i, (node, _) in enumerate(entries):
            if node is None:
                continue
            names = _defined(node)
            for name in names:
                owners.setdefault(name, []).append((m, i))
            if not names:
                keep.add((m, i))
                todo |= loaded_names(node)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        seen.add(name)
        for where in owners.get(name, []):
            if where not in keep:
                keep.add(where)
                node = blocks[where[0]][where[1]][0]
                assert node is not None
                todo |= loaded_names(node) - seen
    return {m: "\n".join(line for i, (node, lines) in enumerate(entries)
                         if node is None or (m, i) in keep for line in lines).strip("\n")
            for m, entries in blocks.items()}


def top_level_names(tree: ast.Module, imports: bool = True) -> set[str]:
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


def used_names(tree: ast.AST) -> set[str]:
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
