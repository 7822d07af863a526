"""The documentation site: every page in the nav, the code blocks run, ``mkdocs build --strict``.

Conventions (also in docs/index.md): the ```` ```python ```` blocks of a page run
top to bottom in one namespace, in a temporary working directory; a block of
``>>>`` lines runs as a doctest; a block preceded by ``<!-- not run: reason -->``
is only shown.
"""

from __future__ import annotations

import doctest
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
NOT_RUN = re.compile(r"<!--\s*not run:(.*?)-->\s*$")
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def _blocks(page: str) -> list[tuple[int, str, str | None]]:
    """``(line, code, reason)`` of each python block; ``reason`` is set for not-run blocks."""
    text = (DOCS / page).read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").splitlines()
        marker = NOT_RUN.search(before[-1]) if before else None
        out.append((text.count("\n", 0, m.start()) + 2, m.group(1),
                    marker.group(1).strip() if marker else None))
    return out


def _nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:"):]
    return re.findall(r"[\w./-]+\.md\b", nav)


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    nav = _nav_pages()
    missing = [p for p in PAGES if p not in nav]
    assert not missing, f"add these pages to the nav in mkdocs.yml: {missing}"
    assert not [p for p in nav if p not in PAGES], "the nav names pages that do not exist"
    assert len(nav) == len(set(nav))


def test_not_run_markers_give_a_reason() -> None:
    marked = [(page, line) for page in PAGES for line, _, reason in _blocks(page)
              if reason is not None and not reason]
    assert not marked, f"<!-- not run: ... --> needs a reason: {marked}"


RUNNABLE = [p for p in PAGES if any(reason is None for _, _, reason in _blocks(p))]


def test_most_pages_with_code_run_it() -> None:
    assert {"index.md", "modes.md", "stateful.md", "numerics.md", "distributed.md"} <= set(RUNNABLE)


@pytest.mark.parametrize("page", RUNNABLE)
def test_code_blocks_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # files a block writes land here
    namespace: dict = {"__name__": f"docs.{page}"}
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    for line, code, reason in _blocks(page):
        if reason is not None:
            continue
        where = f"docs/{page}, block at line {line}"
        if code.lstrip().startswith(">>>"):
            test = doctest.DocTestParser().get_doctest(code, namespace, where, str(DOCS / page),
                                                       line)
            runner = doctest.DocTestRunner(optionflags=flags)
            runner.run(test, out=sys.stdout.write)
            assert runner.failures == 0, f"{where}:\n{capsys.readouterr().out}"
            namespace.update(test.globs)
        else:
            exec(compile(code, where, "exec"), namespace)


_DOCS_EXTRA = all(importlib.util.find_spec(m) for m in ("mkdocs", "material", "mkdocstrings"))


@pytest.mark.skipif(not _DOCS_EXTRA, reason="needs the docs extra: pip install -e '.[docs]'")
def test_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")])), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in PAGES:
        html = site / page.removesuffix(".md") / "index.html"
        assert (site / "index.html" if page == "index.md" else html).exists(), page
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    # the reference is generated from the docstrings, doctests fenced as code
    assert "StatefulMetric" in api and "MetricLoss" in api
    assert "The exact metric at the given counts" in api
    assert '<span class="gp">&gt;&gt;&gt; </span>' in api  # a console prompt, highlighted
    assert "<blockquote>" not in api
