"""benchmarks/package_size.py on two files: every line is counted once, code lines are a subset."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("package_size", ROOT / "benchmarks" / "package_size.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_code_lines_leave_out_docstrings_comments_and_blanks() -> None:
    src = ('"""Doc."""\n\n# a comment\nx = 1  # why\n\n\n'
           'def f():\n    """Doc\n    more."""\n    return (x +\n            1)\n')
    assert sorted(_module().code_lines(src)) == [4, 7, 10, 11]


def test_every_line_is_counted_once(capsys) -> None:
    mod = _module()
    files = ["metricc/errors.py", "metricc/decisions.py"]
    # base = HEAD: every line at HEAD comes from a commit reachable from it (works on a shallow clone)
    every, code = mod.tally("HEAD", "HEAD", files)
    lines = sum(len(mod.git("show", f"HEAD:{f}").splitlines()) for f in files)
    assert sum(every.values()) == every["0.1"] == lines
    assert 0 < code["0.1"] < lines
    mod.main(["--base", "HEAD", "--files", *files])
    assert f"| total | {lines} | {code['0.1']} |" in capsys.readouterr().out
