"""The README's example runs verbatim, and its commands match .ci/run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _blocks(lang: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_readme_python_example_runs() -> None:
    (code,) = _blocks("python")
    namespace: dict = {"__name__": "readme"}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["m"].value(tp=30, fp=5, fn=10, tn=955) == 0.8


def test_readme_opens_with_two_commands_and_ci_runs_the_test_one() -> None:
    bash = _blocks("bash")
    assert len(bash) >= 2
    main_cmd = bash[0].strip().splitlines()[-1]
    test_cmd = bash[1].strip().splitlines()[-1]
    assert "pip install torch==2.13.0" in main_cmd and "examples/quickstart.py" in main_cmd
    assert "pytest" in test_cmd
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci.splitlines()
    assert (ROOT / "examples" / "quickstart.py").exists()
