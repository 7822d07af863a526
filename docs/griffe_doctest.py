"""Griffe extension for the API reference: docstrings are reST-flavoured, the site is Markdown.

Fences doctest blocks (``>>>`` lines and their output, up to a blank line) as
``pycon`` code, so that Markdown does not read ``>>>`` as nested quotes and
``2*TP`` as emphasis, and turns Sphinx roles (``:class:`X```) into code spans.
Loaded by mkdocstrings from ``mkdocs.yml``; the docstrings themselves stay
plain doctests, run by ``pytest --doctest-modules``.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`~?([^`]+)`")


def fence_doctests(text: str) -> str:
    """``text`` with each run of doctest lines wrapped in a ```` ```pycon ```` fence."""
    out: list[str] = []
    in_block = False
    for line in text.splitlines():
        if not in_block and line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            in_block = True
        elif in_block and not line.strip():
            out.append(f"{indent}```")
            in_block = False
        out.append(line)
    if in_block:
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Rewrites every docstring once the object tree is built."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(_ROLE.sub(r"`\1`", obj.docstring.value))
