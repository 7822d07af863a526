"""Standalone loss files: torch-only, equal to the in-process loss, deterministic, ruff-clean."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from blocked_imports import PRELUDE

import metricc
from metricc.runtime.loss import MetricLoss
from metricc.standalone_file import standalone_source

ROOT = Path(__file__).resolve().parents[1]

NASTY = (
    '# """; import os; os.system("echo pwned") # \\ back\\slash \x01 \u2028 ünïcode\n'
    "import = TP/(TP+FP)   # precision\n"
    "lambda = TP/(TP+FN)\n"
    "min(import, lambda) + 0.1*log(1 + TP/(TP+FP+FN+TN))"
    " + abs(import - lambda)*max(import, lambda, 0.3)"
    " + 0.01*exp(-FP/(FP+TN))"
)

# (formula, compile kwargs, class name, relaxation, loss options, input kind)
CASES: list[tuple[str, dict[str, Any], str, str, dict[str, Any], str]] = [
    ("f1", {}, "F1Loss", "anyloss", {}, "probabilities"),
    ("mcc", {}, "MccLoss", "linear", {"multidim_average": "samplewise", "reduction": "none"},
     "probabilities"),
    ("fbeta", {"beta": 2.0}, "F2Loss", "sigmoid",
     {"from_logits": True, "slope": 2.0, "offset": 0.1}, "logits"),
    (NASTY, {}, "NastyLoss", "anyloss", {"amplifier": 20.0, "backward": "autograd"},
     "probabilities"),
    ("fdr", {}, "FdrLoss", "anyloss",
     {"from_logits": True, "multidim_average": "samplewise", "reduction": "sum"}, "logits"),
    ("g_mean", {}, "GMeanLoss", "linear", {"eps": 1e-5}, "probabilities"),
    # Options the runtime gained after this writer was written come along with its text.
    ("jaccard", {}, "JaccardLoss", "linear",
     {"mode": "multiclass", "from_logits": True, "ignore_index": 255, "average": "weighted",
      "class_weights": [1.0, 2.0, 0.5]},
     "classes"),
]

CHILD = PRELUDE + r'''

results = {"blocked": blocked}
for job in json.load(open(sys.argv[1])):
    spec = importlib.util.spec_from_file_location(job["module"], job["path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = getattr(module, job["class"])
    data = torch.load(job["inputs"])
    x = data["x"].clone().requires_grad_(True)
    out = cls()(x, data["y"])  # the defaults chosen at generation time
    out.sum().backward()
    results[job["class"]] = {
        "loss": out.detach(), "grad": x.grad, "formula": cls.formula,
        "higher_is_better": cls.higher_is_better,
        "params": list(inspect.signature(cls).parameters),
    }
results["leaked"] = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
torch.save(results, sys.argv[2])
'''


def _inputs(kind: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if kind == "classes":  # (N, C, H, W) logits, (N, H, W) class indices, some ignored
        x = torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64)
        y = torch.randint(0, 3, (2, 4, 5), generator=g)
        y[0, 0] = 255
        return x, y
    x = torch.randn(4, 3, 7, generator=g, dtype=torch.float64) * 2
    if kind == "probabilities":
        x = torch.sigmoid(x)
    y = (torch.rand(4, 3, 7, generator=g, dtype=torch.float64) < 0.3).to(torch.float64)
    y[0] = 0  # one sample with no positives
    return x, y


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Write every case's file, run them all in one torch-only subprocess."""
    tmp = tmp_path_factory.mktemp("standalone")
    jobs, expected = [], {}
    for i, (formula, kw, name, relaxation, options, kind) in enumerate(CASES):
        m = metricc.compile(formula, **kw)
        path = tmp / f"loss_{i}.py"
        path.write_text(standalone_source(m, name, relaxation, warn_monotonicity=False, **options),
                        encoding="utf-8")
        x, y = _inputs(kind, i)
        torch.save({"x": x, "y": y}, tmp / f"in_{i}.pt")
        xg = x.clone().requires_grad_(True)
        out = m.loss(relaxation, warn_monotonicity=False, **options)(xg, y)
        out.sum().backward()
        expected[name] = {"loss": out.detach(), "grad": xg.grad, "formula": formula.strip(),
                          "higher_is_better": m.higher_is_better}
        jobs.append({"module": f"loss_{i}", "path": str(path), "class": name,
                     "inputs": str(tmp / f"in_{i}.pt")})
    (tmp / "jobs.json").write_text(json.dumps(jobs))
    (tmp / "child.py").write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(tmp / "child.py"), str(tmp / "jobs.json"),
                           str(tmp / "out.pt")], cwd=tmp, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "pwned" not in proc.stdout + proc.stderr
    return {"dir": tmp, "expected": expected, "got": torch.load(tmp / "out.pt")}


def test_child_could_not_import_metricc_sympy_or_lark(generated: dict[str, Any]) -> None:
    assert generated["got"]["blocked"] == ["lark", "metricc", "sympy"]
    assert generated["got"]["leaked"] == []


@pytest.mark.parametrize("name", [c[2] for c in CASES])
def test_standalone_equals_in_process_loss_and_gradient(generated: dict[str, Any],
                                                        name: str) -> None:
    want, got = generated["expected"][name], generated["got"][name]
    assert got["loss"].dtype == torch.float64
    torch.testing.assert_close(got["loss"], want["loss"], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["grad"], want["grad"], rtol=1e-12, atol=1e-12)
    assert bool(want["grad"].abs().sum() > 0)
    assert got["formula"] == want["formula"]  # user text survives exactly, as data
    assert got["higher_is_better"] == want["higher_is_better"]
    # The same options as the in-process loss, in the same order, and a catch-all that
    # turns a typo into a MetricError with a did-you-mean (tests/test_messages36.py).
    options = [p for p in inspect.signature(MetricLoss.__init__).parameters if p != "self"]
    assert got["params"] == [*options, "unknown"]


def test_files_paste_only_the_runtime_their_loss_needs(generated: dict[str, Any]) -> None:
    """A binary F1 file holds no K x K, constraint or curve code, and the test above shows
    it still equals the in-process loss; a K x K file holds no 2x2 loss."""
    binary = (generated["dir"] / "loss_0.py").read_text(encoding="utf-8")
    assert "class F1Loss(MetricLoss):" in binary
    for absent in ("class MatrixLoss", "class ConstrainedLoss", "class ConstraintState",
                   "def soft_curve", "# --- metricc.runtime.matrix", "# --- metricc.runtime.constrained",
                   "# --- metricc.runtime.curve"):
        assert absent not in binary, absent
    # The contents comment lists the pasted modules, and each one has its section.
    assert "# Contents, in this order" in binary and "# --- F1Loss " in binary
    assert binary.index("# --- metricc.runtime.loss") < binary.index("class F1Loss(")
    matrix = standalone_source(metricc.compile("quadratic_kappa"))
    assert "(MatrixLoss):" in matrix and "class MetricLoss" not in matrix
    assert "class ConstrainedLoss" not in matrix
    # Smaller than pasting every runtime module (what every file held before).
    from metricc.emit.runtime_source import runtime_source

    everything = len(runtime_source()[0])
    assert len(binary) < 0.8 * everything and len(matrix) < 0.7 * everything


def test_files_pass_ruff(generated: dict[str, Any]) -> None:
    files = sorted(str(p) for p in generated["dir"].glob("loss_*.py"))
    for config in (["--isolated"], ["--config", str(ROOT / "pyproject.toml")]):
        proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *config,
                               *files], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_user_text_is_only_data(generated: dict[str, Any]) -> None:
    source = (generated["dir"] / "loss_3.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "os" not in names  # the binding names (import, lambda) cannot even be Names
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert not any("system" in c for c in calls)
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    roots |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom)}
    assert all(n.level == 0 for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert "torch" in roots
    assert roots - {"torch"} <= set(sys.stdlib_module_names)


def test_docstring_has_formula_simplified_form_and_partials() -> None:
    m = metricc.compile("f1")
    doc = ast.get_docstring(ast.parse(standalone_source(m)))
    assert doc is not None
    assert "    f1\n" in doc and f"Simplified: {m.expr}" in doc
    for k, d in m.gradient.items():
        assert f"d/d{k} = {d}" in doc
    assert "FN + FP + 2*TP = 0  (0/0)" in doc


DETERMINISM = r'''
import sys
import metricc
from metricc.standalone_file import standalone_source
for f in ("f1", "mcc", "prevalence_threshold", sys.argv[1]):
    sys.stdout.write(standalone_source(metricc.compile(f), warn_monotonicity=False))
'''


def test_same_input_same_bytes() -> None:
    here = "".join(standalone_source(metricc.compile(f), warn_monotonicity=False)
                   for f in ("f1", "mcc", "prevalence_threshold", NASTY))
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", DETERMINISM, NASTY], env=env,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode("utf-8") == here


MATRIX_NAMED = ("quadratic_kappa", "linear_kappa", "multiclass_mcc", "multiclass_balanced_accuracy",
                "min(multiclass_mcc, quadratic_kappa)")


def test_matrix_files_do_not_depend_on_the_hash_seed() -> None:
    """The K x K kernels number their indices by the formula's shape and list their matrix entries
    in name order, not in the order of SymPy's creation counters or of a set."""
    here = "".join(standalone_source(metricc.compile(f), warn_monotonicity=False)
                   for f in MATRIX_NAMED)
    script = ("import sys, metricc\nfrom metricc.standalone_file import standalone_source\n"
              "for f in sys.argv[1:]:\n"
              "    sys.stdout.write(standalone_source(metricc.compile(f), warn_monotonicity=False))\n")
    for seed in ("1", "2", "5"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-c", script, *MATRIX_NAMED], env=env,
                              capture_output=True, timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout.decode("utf-8") == here, f"PYTHONHASHSEED={seed}"


def test_default_and_chosen_options() -> None:
    m = metricc.compile("balanced_accuracy")
    # one class-name rule: the standalone class is named as the in-process one
    assert m.loss_class.__name__ == "BalancedAccuracyLoss"
    assert metricc.compile("TP/(TP+FP)").loss_class.__name__ == "CustomMetricLoss"
    assert "class BalancedAccuracyLoss(MetricLoss):" in standalone_source(m)
    src = standalone_source(m, relaxation="linear", reduction="sum", eps=1e-6)
    assert 'relaxation: str | None = "linear",' in src and 'reduction: str = "sum",' in src
    assert "eps: float = 1e-06," in src and "amplifier: float = 73.0," in src


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"class_name": "import os"}, "not a plain Python identifier"),
    ({"class_name": "class"}, "not a plain Python identifier"),
    ({"class_name": "F1Lоss"}, "not a plain Python identifier"),  # Cyrillic o
    ({"class_name": "MetricLoss"}, "is taken"),
    ({"class_name": "torch"}, "is taken"),
    ({"amplifier": [[1]]}, "cannot be written into a file"),
    ({"amplifier": object()}, "cannot be written into a file"),
    ({"reduction": "bogus"}, "is not one of"),
    ({"unknown": 1}, "unknown loss option"),
])
def test_bad_names_and_options(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(metricc.MetricError, match=match):
        standalone_source(metricc.compile("f1"), **kwargs)


def test_runtime_must_stay_torch_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import metricc.emit.runtime_source as sa

    bad = tmp_path / "bad.py"
    for text in ('"""doc"""\nimport torch\nfrom ..parse import COUNTS\n',  # not pasted
                 '"""doc"""\nimport torch\nimport sympy\n',
                 '"""doc"""\nfrom .loss import MetricLoss\n'):  # pasted, but later
        bad.write_text(text)
        monkeypatch.setattr(sa, "SOURCES", (*sa.SOURCES[:2], ("metricc.runtime.bad", bad),
                                            *sa.SOURCES[2:]))
        with pytest.raises(RuntimeError, match="must stay torch-only"):
            standalone_source(metricc.compile("f1"))
    bad.write_text('"""doc"""\ndef relax():\n    pass\n')  # a name another module defines
    monkeypatch.setattr(sa, "SOURCES", (*sa.SOURCES, ("metricc.runtime.bad", bad)))
    with pytest.raises(RuntimeError, match="defined in both"):
        standalone_source(metricc.compile("f1"))


def test_standalone_raises_its_own_metric_error(tmp_path: Path) -> None:
    import importlib.util

    path = tmp_path / "f1_loss.py"
    path.write_text(standalone_source(metricc.compile("f1")), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("f1_loss_errors", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.MetricError, ValueError)
    with pytest.raises(module.MetricError, match=r"did you mean 'sum'"):
        module.F1Loss(reduction="summ")
    with pytest.raises(module.MetricError, match="same shape"):
        module.F1Loss()(torch.rand(3), torch.ones(4))
