"""An opt-in disk cache of derived results (check reports, simplified partials).

Off unless ``METRICC_CACHE_DIR`` names a folder or :func:`enable_cache` is called
(``docs/performance.md``, section 4). An entry is JSON, keyed by what the result depends
on (the kind of result, the formula text, its parameters, the substituted expression,
the options that matter, and the metricc and SymPy versions). Nothing read back is
pickled, evaluated or executed: SymPy expressions are stored as trees whose node names
come from the fixed table :data:`NODES` and are rebuilt only through it, and report
objects only as the dataclasses of :data:`REPORTS` (built on first use), numbers only of
bounded size. An entry is read only as :mod:`metricc.analysis.cache_entry`
allows (a bounded regular file, its digest matching its content, its value of the type the
caller expects); one that cannot be read, does not decode, fails a check or was written for
another key is ignored, and the result is computed again and the entry rewritten (a
temporary file, then a rename).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import keyword
import os
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import mpmath
import sympy

from .cache_entry import conforms, digest, integer, number, parse, read_entry, real

__all__ = [
    "NODES",
    "Undecodable",
    "cache_dir",
    "cached",
    "clear_cache",
    "code_version",
    "decode",
    "disable_cache",
    "dummies",
    "enable_cache",
    "encode",
    "entry_key",
    "expression_key",
]

#: Bumped when the encoding changes: old entries then miss (2: a digest of the content).
FORMAT = 2
#: The largest numerator or denominator of a power's exponent an entry may hold: a stored
#: ``2**(10**3999)`` is one expression node, and a hang for whatever evaluates it.
MAX_EXPONENT = 10**4
ENV = "METRICC_CACHE_DIR"

_state: dict[str, Any] = {"dir": None, "off": False}


class Undecodable(ValueError):
    """A value the encoding does not cover (it is then not cached), or a corrupt entry."""


def enable_cache(path: str | os.PathLike[str] | None = None) -> Path:
    """Cache derived results in ``path`` (default: ``$XDG_CACHE_HOME/metricc`` or
    ``~/.cache/metricc``) for this process; returns the folder. ``METRICC_CACHE_DIR``
    does the same for every process."""
    if path is None:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        path = Path(base) / "metricc"
    folder = Path(path).expanduser()  # "~/x" is the home's x, not a folder named "~"
    _state["dir"], _state["off"] = folder, False
    return folder


def disable_cache() -> None:
    """Stop caching in this process (even if ``METRICC_CACHE_DIR`` is set)."""
    _state["dir"], _state["off"] = None, True


def cache_dir() -> Path | None:
    """The folder in use, or ``None`` when the cache is off (the default)."""
    if _state["off"]:
        return None
    if _state["dir"] is not None:
        return Path(_state["dir"])
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else None


def clear_cache() -> int:
    """Delete this cache's entries (``metricc-*.json`` in :func:`cache_dir`); returns how many."""
    folder = cache_dir()
    removed = 0
    if folder is not None and folder.is_dir():
        for f in folder.glob("metricc-*.json"):
            f.unlink(missing_ok=True)
            removed += 1
    return removed


# --- SymPy trees ---------------------------------------------------------------------------

def _nodes() -> dict[str, type[Any]]:
    from ..language.symbols import Present

    classes: list[type[Any]] = [
        sympy.Add, sympy.Mul, sympy.Pow, sympy.log, sympy.exp, sympy.Abs, sympy.Min, sympy.Max,
        sympy.KroneckerDelta, sympy.Sum, sympy.Indexed, sympy.IndexedBase, sympy.Idx,
        sympy.Tuple, sympy.sign, Present]
    return {c.__name__: c for c in classes}


#: Node name -> SymPy class: the only classes an entry can build (with their arguments).
NODES: dict[str, type[Any]] = _nodes()
_EVALUATE = {"Add", "Mul", "Pow", "log", "exp", "Abs", "Min", "Max", "KroneckerDelta", "sign"}
_CONSTANTS = {"pi": sympy.pi, "E": sympy.E, "oo": sympy.oo, "-oo": -sympy.oo, "zoo": sympy.zoo,
              "nan": sympy.nan, "I": sympy.I}
_ASSUMPTIONS = {"positive", "nonnegative", "negative", "nonpositive", "real", "integer", "finite",
                "zero", "nonzero", "commutative", "extended_real", "extended_positive",
                "extended_nonnegative", "extended_negative", "extended_nonpositive",
                "extended_nonzero", "infinite", "complex", "hermitian", "imaginary", "rational",
                "irrational", "algebraic", "transcendental", "noninteger", "odd", "even",
                "prime", "composite", "antihermitian"}


def dummies(own: Any) -> dict[Any, int]:
    """The bound indices (``Dummy``) of ``own``, numbered in order of appearance."""
    return dict(_numbered(own)) if isinstance(own, sympy.Basic) else {}


@lru_cache(maxsize=16)
def _numbered(own: sympy.Basic) -> tuple[tuple[Any, int], ...]:
    out: dict[Any, int] = {}
    for node in sympy.preorder_traversal(own):
        if isinstance(node, sympy.Dummy) and node not in out:
            out[node] = len(out)
    return tuple(out.items())


def _tree(e: Any, numbered: dict[Any, int]) -> list[Any]:
    if isinstance(e, sympy.Dummy):  # only the metric's own, which decoding maps back
        if e not in numbered:
            raise Undecodable("a bound index of its own")
        return ["Dummy", str(numbered[e])]
    if type(e) is sympy.Symbol:
        # the assumptions as given (what srepr shows); all derived ones follow from them
        given = getattr(e, "_assumptions_orig", e.assumptions0)
        return ["Symbol", e.name, dict(sorted(given.items()))]
    if isinstance(e, sympy.Integer):
        return ["Integer", str(e.p)]
    if isinstance(e, sympy.Rational):
        return ["Rational", str(e.p), str(e.q)]
    if isinstance(e, sympy.Float):  # enough digits for its precision; checked on store
        digits = int(e._prec * 0.30103) + 3
        return ["Float", mpmath.libmp.to_str(e._mpf_, digits), str(e._prec)]
    for name, c in _CONSTANTS.items():
        if e is c:
            return ["Const", name]
    name = type(e).__name__
    if NODES.get(name) is not type(e):
        raise Undecodable(f"no encoding for {name}")
    return [name, *(_tree(a, numbered) for a in e.args)]


def _build(t: Any, bound: list[Any]) -> Any:
    if not isinstance(t, list) or not t or not isinstance(t[0], str):
        raise Undecodable("not a tree")
    name, args = t[0], t[1:]
    if name == "Symbol":
        label, assumptions = args
        # a plain identifier: the sampling in check() prints names into Python source
        if not isinstance(label, str) or not label.isidentifier() or keyword.iskeyword(label) \
                or not isinstance(assumptions, dict) or not all(
                k in _ASSUMPTIONS and isinstance(v, bool) for k, v in assumptions.items()):
            raise Undecodable("bad symbol")
        return sympy.Symbol(label, **assumptions)
    if name in ("Integer", "Rational", "Float"):
        try:
            return number(name, args)
        except (TypeError, ValueError, ZeroDivisionError) as e:
            raise Undecodable(f"bad number: {e}") from None
    if name == "Dummy":
        if len(args) != 1 or not isinstance(args[0], str) or not args[0].isdigit() \
                or int(args[0]) >= len(bound):
            raise Undecodable("bad bound index")
        return bound[int(args[0])]
    if name == "Const":
        if len(args) != 1 or args[0] not in _CONSTANTS:
            raise Undecodable("bad constant")
        return _CONSTANTS[args[0]]
    cls = NODES.get(name)
    if cls is None:
        raise Undecodable(f"unknown node {name!r}")
    built = [_build(a, bound) for a in args]
    if name == "Pow" and len(built) == 2 and isinstance(built[1], sympy.Rational) \
            and max(abs(built[1].p), built[1].q) > MAX_EXPONENT:
        raise Undecodable("an exponent past the bound")
    try:
        return cls(*built, evaluate=False) if name in _EVALUATE else cls(*built)
    except (TypeError, ValueError, AttributeError) as e:
        raise Undecodable(f"bad {name}: {e}") from None


# --- values: reports, containers, numbers -----------------------------------------------------

@lru_cache(maxsize=1)
def _report_classes() -> dict[str, type[Any]]:
    # imported on first use: the check modules import this stage's others
    from .counts import Singularity
    from .counts_check import CheckReport, Monotonicity
    from .counts_moves import MovesReport
    from .curve_check import CurveCheckReport
    from .matrix_check import MatrixCheckReport, MatrixSingularity

    return {c.__name__: c for c in (Singularity, CheckReport, Monotonicity, MatrixCheckReport,
                                    MatrixSingularity, CurveCheckReport, MovesReport)}


def encode(value: Any, own: Any = None) -> Any:
    """``value`` as JSON data; raises :class:`Undecodable` for what the encoding does not cover.

    ``own`` (the metric's expression, which the caller has) is stored as a reference to it.
    """
    if own is not None and value is own:
        return {"own": True}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return {"i": str(value)}
    if isinstance(value, float):
        return {"f": repr(value)}
    if isinstance(value, sympy.Basic):
        return {"x": _tree(value, dummies(own))}
    if isinstance(value, tuple):
        return {"t": [encode(v, own) for v in value]}
    if isinstance(value, list):
        return {"l": [encode(v, own) for v in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k, own), encode(v, own)] for k, v in value.items()]}
    name = type(value).__name__
    if dataclasses.is_dataclass(value) and _report_classes().get(name) is type(value):
        return {"c": name, "a": {f.name: encode(getattr(value, f.name), own)
                                 for f in dataclasses.fields(value) if f.init}}
    raise Undecodable(f"no encoding for {name}")


def decode(data: Any, own: Any = None) -> Any:
    """The value :func:`encode` encoded; raises :class:`Undecodable` for anything else."""
    if data is None or isinstance(data, (bool, str)):
        return data
    if not isinstance(data, dict) or len(data) not in (1, 2):
        raise Undecodable("not an encoded value")
    try:
        if "own" in data:
            if own is None or data["own"] is not True:
                raise Undecodable("no expression to refer to")
            return own
        if "i" in data:
            return integer(data["i"])
        if "f" in data:
            return real(data["f"])
        if "x" in data:
            return _build(data["x"], list(dummies(own)))
        if "t" in data:
            return tuple(decode(v, own) for v in data["t"])
        if "l" in data:
            return [decode(v, own) for v in data["l"]]
        if "d" in data:
            return {decode(k, own): decode(v, own) for k, v in data["d"]}
        cls = _report_classes().get(data.get("c"))  # type: ignore[arg-type]
        names = {f.name for f in dataclasses.fields(cls) if f.init} if cls else set()
        if cls is None or not isinstance(data.get("a"), dict) or set(data["a"]) != names:
            raise Undecodable("unknown or incomplete report")
        return cls(**{k: decode(v, own) for k, v in data["a"].items()})
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as e:
        raise Undecodable(str(e)) from None


# --- entries ------------------------------------------------------------------------------

def expression_key(expr: Any) -> str:
    """``expr`` as key text: its tree (bound indices numbered), else ``srepr``."""
    try:
        return json.dumps(_tree(expr, dummies(expr)))
    except Undecodable:
        return sympy.srepr(expr)


def code_version() -> str:
    """metricc's version as a digest of its own source files (``__init__.py``, which holds
    ``__version__``, among them): a release or any edit of a checkout misses old entries."""
    if not _state.get("code"):
        root = Path(__file__).resolve().parents[1]
        digest = hashlib.sha256()
        for f in sorted(root.rglob("*.py")):
            digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        _state["code"] = digest.hexdigest()[:16]
    return str(_state["code"])


def entry_key(kind: str, *parts: Any) -> list[str]:
    """The full key of an entry: ``kind``, ``parts`` as text, the versions that matter."""
    return [f"format {FORMAT}", kind, *map(str, parts), f"metricc {code_version()}",
            f"sympy {sympy.__version__}"]


def _path(folder: Path, key: list[str]) -> Path:
    name = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:40]
    return folder / f"metricc-{key[1]}-{name}.json"


def _load(path: Path, key: list[str], own: Any, schema: Any) -> tuple[bool, Any]:
    """``(True, value)`` for an entry that passes every check (module docstring), else a miss."""
    raw = read_entry(path)  # a bounded regular file, or None
    if raw is None:
        return False, None
    try:
        data = parse(raw)
        if not isinstance(data, dict) or set(data) != {"key", "value", "sha256"} \
                or data["key"] != key or data["sha256"] != digest(key, data["value"]):
            return False, None  # another key, edited by hand, or cut short
        value = decode(data["value"], own)
    except (ValueError, KeyError, TypeError, RecursionError, UnicodeDecodeError):  # corrupt
        return False, None
    return (True, value) if schema is None or conforms(value, schema) else (False, None)


def _store(path: Path, key: list[str], value: Any, own: Any) -> None:
    try:
        data = encode(value, own)
        if decode(data, own) != value:  # a tree that rebuilds differently is not stored
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"key": key, "value": data, "sha256": digest(key, data)}, f)
            os.replace(tmp, path)  # readers see the old entry or the whole new one
        finally:
            Path(tmp).unlink(missing_ok=True)
    except (OSError, Undecodable, RecursionError):
        pass  # the cache is an optimisation: a failed write leaves the result as computed


def cached(kind: str, parts: Callable[[], tuple[Any, ...]], compute: Callable[[], Any],
           keep: Callable[[Any], bool] = lambda value: True, own: Any = None,
           schema: Any = None) -> Any:
    """``compute()``, or the entry stored for ``(kind, parts())`` when the cache is on.

    ``parts`` is called only then (the key costs a walk of the expression). A fresh result
    is stored only if ``keep(result)`` (e.g. not one cut short by the time budget, which a
    faster run could prove). ``own``: see :func:`encode`. ``schema``: the type an entry's
    value must have (a report class, ``tuple[dict[str, sympy.Expr], bool]``; see
    :func:`metricc.analysis.cache_entry.conforms`), else it is computed again.
    """
    folder = cache_dir()
    if folder is None:
        return compute()
    try:
        key = entry_key(kind, *parts())
    except (RecursionError, ValueError, TypeError):  # no key for it: not cached
        return compute()
    path = _path(folder, key)
    hit, value = _load(path, key, own, schema)
    if hit:
        return value
    value = compute()
    if keep(value):
        _store(path, key, value, own)
    return value
