"""The package's structure: no import cycle, small torch-only runtime modules, one relaxation
registry, and string options checked in one place with suggestions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import metricc
from metricc.runtime.options import CHOICES, RELAXATION_NAMES, look_up_option

PACKAGE = Path(metricc.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every metricc module -> the metricc modules it imports anywhere (in functions and
    under ``TYPE_CHECKING`` too)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    root = f"{base}.{node.module}" if node.module else base
                else:
                    root = node.module or ""
                # "from . import x" may name a submodule x
                targets = [root, *(f"{root}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def test_no_import_cycle_anywhere_in_the_package() -> None:
    graph = _imports()
    assert "metricc.runtime.loss" in graph and "metricc.language.symbols" in graph
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt):], nxt] if nxt in path else [node, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_symbols_analysis_and_emission_need_no_parser() -> None:
    graph = _imports()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    for module in ("metricc.language.symbols", "metricc.analysis.counts", "metricc.analysis.counts_check",
                   "metricc.analysis.matrix", "metricc.emit.counts", "metricc.emit.matrix"):
        assert "metricc.language.parse" not in reach(module), module
    assert reach("metricc.language.symbols") == set()


def test_runtime_modules_are_small_and_import_only_torch_and_each_other() -> None:
    from metricc.emit.standalone import SOURCES

    runtime = sorted((PACKAGE / "runtime").glob("*.py"))
    pasted = {path.resolve() for _, path in SOURCES}
    for path in runtime:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= 400, f"{path.name} has {lines} lines"
        if path.name != "__init__.py":
            assert path.resolve() in pasted, f"{path.name} is not pasted into standalone files"
    graph = _imports()
    for name, edges in graph.items():
        if name.startswith("metricc.runtime"):
            assert edges <= {n for n in graph if n.startswith("metricc.runtime")} | {
                "metricc.errors"}, (name, edges)


def test_one_relaxation_registry_read_by_cli_and_verify() -> None:
    from metricc.cli import build_parser
    from metricc.runtime.relax import RELAXATIONS, Relaxation

    assert tuple(RELAXATIONS) == RELAXATION_NAMES == CHOICES["relaxation"]
    assert all(isinstance(r, Relaxation) and r.name == k for k, r in RELAXATIONS.items())
    compile_parser = build_parser()._subparsers._group_actions[0].choices["compile"]
    (action,) = [a for a in compile_parser._actions if a.dest == "relaxation"]
    assert tuple(action.choices) == RELAXATION_NAMES
    report = metricc.compile("f1").verify()
    for name in RELAXATION_NAMES:
        if RELAXATIONS[name].class_wise:  # acts on a class dimension: its own checks
            assert any(c.name.startswith(f"{name} backward == Jacobian") for c in report.checks)
            assert any(c.name.startswith(f"{name}/symbolic (multiclass,") for c in report.checks)
            continue
        assert any(c.name.startswith(f"relax_grad == d relax/ds ({name},") for c in report.checks)
        assert any(c.name.startswith(f"{name}/symbolic:") for c in report.checks)


def test_cli_options_load_without_torch() -> None:
    code = ("import sys, metricc.cli, metricc.runtime.options as o; "
            "assert 'torch' not in sys.modules, 'torch was imported'; print(o.RELAXATION_NAMES)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stderr
    assert "anyloss" in out.stdout


@pytest.mark.parametrize(("option", "value", "hint"), [
    ("relaxation", "anyloos", "(did you mean 'anyloss'?)"),
    ("relaxation", "Linear", "(did you mean 'linear'?)"),
    ("reduction", "summ", "(did you mean 'sum'?)"),
    ("mode", "multi_class", "(did you mean 'multiclass'?)"),
    ("average", "marco", "(did you mean 'macro'?)"),
    ("multidim_average", "sample_wise", "(did you mean 'samplewise'?)"),
    ("backward", "autgrad", "(did you mean 'autograd'?)"),
])
def test_every_string_option_suggests_the_closest_value(option: str, value: str,
                                                         hint: str) -> None:
    assert look_up_option(option, CHOICES[option][0]) == CHOICES[option][0]
    with pytest.raises(metricc.MetricError, match="is not one of") as info:
        look_up_option(option, value)
    assert str(info.value).endswith(hint)
    kwargs = {"from_logits": True} if option != "relaxation" else {}
    positional = (value,) if option == "relaxation" else ()
    if option != "relaxation":
        kwargs[option] = value
    with pytest.raises(metricc.MetricError, match=r"did you mean"):
        metricc.compile("f1").loss(*positional, **kwargs)


def test_option_values_that_are_not_strings_get_no_suggestion() -> None:
    with pytest.raises(metricc.MetricError, match=r"^reduction=3 is not one of 'mean', 'sum', "
                                                  r"'none'$"):
        look_up_option("reduction", 3)
