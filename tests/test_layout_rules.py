"""The rules of docs/architecture.md, enforced: stage folders in the order data flows, imports
that go down the stages, no private names across modules, small modules and functions.

Imports are read from the source (inside functions and under ``TYPE_CHECKING`` too), so a
lazy import cannot hide an arrow that runs back up.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import metricc

PACKAGE = Path(metricc.__file__).resolve().parent

#: Rank of each stage: a module imports only modules of a lower rank or of its own folder.
#: The runtime is torch-only and pasted into standalone files, so it sits below the
#: SymPy stages although the loss runs after them; ``verify`` and ``evaluate`` both read
#: the stages before them and never each other.
RANKS = {"base": 0, "runtime": 1, "language": 2, "analysis": 3, "emit": 4,
         "verify": 5, "evaluate": 5, "facade": 6}
BASE = {"metricc.errors", "metricc.library"}

#: Functions allowed past 80 lines, each a hot path whose length buys speed (see the comment
#: at each): splitting them costs a Python call per loss evaluation, measurable on small batches.
LONG_FUNCTIONS_ALLOWED: set[str] = {"metricc/runtime/loss.py:MetricLoss.forward",
                                   "metricc/runtime/symbolic.py:symbolic_function"}
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 400


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


MODULES = _modules()


def _folder(name: str) -> str:
    parts = name.split(".")
    if name in BASE:
        return "base"
    if len(parts) > 2 or (len(parts) == 2 and MODULES[name].name == "__init__.py"):
        return parts[1]
    return "facade"


def _imports(name: str) -> list[tuple[str, list[str], int]]:
    """``(imported module, names, line)`` for every import of a metricc module in ``name``."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                root = f"{base}.{node.module}" if node.module else base
            else:
                root = node.module or ""
            names = [a.name for a in node.names]
            if root in MODULES:
                found.append((root, names, node.lineno))
            for a in names:  # "from . import x": a submodule
                if f"{root}.{a}" in MODULES:
                    found.append((f"{root}.{a}", [], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if a.name in MODULES]
    return found


def test_every_module_is_in_a_known_stage() -> None:
    folders = {_folder(n) for n in MODULES}
    assert folders <= set(RANKS), folders - set(RANKS)
    assert {"language", "analysis", "emit", "runtime", "verify", "evaluate"} <= folders


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_the_stages(name: str) -> None:
    here = _folder(name)
    for target, _, line in _imports(name):
        there = _folder(target)
        if target == "metricc" or there == here:
            continue
        assert RANKS[there] < RANKS[here], (
            f"{name}:{line} imports {target}: {here} (rank {RANKS[here]}) may import only "
            f"lower stages, but {there} has rank {RANKS[there]}")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_another_modules_private_names(name: str) -> None:
    for target, names, line in _imports(name):
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        assert not private, f"{name}:{line} imports {private} from {target}: give them public names"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_sys_modules_tricks(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "modules" and \
                isinstance(node.value, ast.Name) and node.value.id == "sys":
            pytest.fail(f"{name}:{node.lineno} reads sys.modules")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_and_functions_are_small(name: str) -> None:
    path = MODULES[name]
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{name} has {len(text.splitlines())} lines"
    rel = path.relative_to(PACKAGE.parent).as_posix()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = f"{prefix}{child.name}"
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if f"{rel}:{qual}" in LONG_FUNCTIONS_ALLOWED:
                    body = text.splitlines()[child.lineno - 1: child.end_lineno]
                    assert any("hot path" in ln for ln in body), f"{rel}:{qual} needs a comment saying why"
                else:
                    assert lines <= MAX_FUNCTION_LINES, f"{rel}:{qual} has {lines} lines"
                visit(child, f"{qual}.")

    visit(ast.parse(text), "")


def test_the_architecture_page_names_every_module() -> None:
    """docs/architecture.md is the module map: a module it does not name is a map gone stale."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [p.relative_to(PACKAGE).as_posix() for p in MODULES.values()
               if p.name != "__init__.py" and p.name not in page]
    assert not missing, f"docs/architecture.md does not name {missing}"
