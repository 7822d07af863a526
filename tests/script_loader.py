"""Import a script of the repository (a benchmark, an example, a DDP worker) by its path.

Scripts are not a package, so tests load them from their files; the module is registered in
``sys.modules`` under ``name`` first, as dataclasses look their module up while being built.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path, name: str | None = None) -> ModuleType:
    """The module of ``path`` (relative paths from the repository root), imported as ``name``
    (default: the file's stem)."""
    path = path if path.is_absolute() else ROOT / path
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
