"""Reading a disk-cache entry without trusting it (:mod:`metricc.analysis.cache`).

An entry is served only if every step below holds; on any doubt the result is computed
again, as on a miss:

* the file is a regular file of at most :data:`MAX_ENTRY_BYTES`, opened without following
  a symbolic link and without blocking (``O_NOFOLLOW | O_NONBLOCK``, then ``fstat``): a FIFO
  or a link to ``/dev/zero`` is refused at once, never read;
* its JSON has no bare numbers (the encoding writes every number as a string, whose
  length :mod:`metricc.analysis.cache` bounds before converting it);
* its ``sha256`` is the digest of its key and value (:func:`digest`): an entry edited by
  hand, or cut short, does not match;
* the decoded value conforms to the schema the caller expects (:func:`conforms`: the
  report class, its fields' annotated types, down to the leaves).

>>> conforms({"TP": 1.5}, dict[str, float]), conforms({"TP": "1.5"}, dict[str, float])
(True, False)
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import stat
import types
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any

import sympy

__all__ = ["MAX_DIGITS", "MAX_ENTRY_BYTES", "MAX_PRECISION", "conforms", "digest", "integer",
           "number", "parse", "read_entry", "real"]

#: Entries larger than this are not read (the largest check report or partials of the
#: library's metrics is a few kilobytes).
MAX_ENTRY_BYTES = 4 << 20
#: The most digits a number in an entry may have (an integer, each side of a fraction, a
#: float's text): a million-digit literal would take the reader minutes to convert.
MAX_DIGITS = 4000
#: The largest binary precision of a stored float (4000 digits).
MAX_PRECISION = 13_300
_INTEGER = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[-+]?[0-9]{1,9})?|[-+]?inf|nan")


def read_entry(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of at most :data:`MAX_ENTRY_BYTES`
    (not a link, a FIFO or a device), else ``None``; never blocks."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # missing, a symbolic link (ELOOP), unreadable
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
            return None
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ENTRY_BYTES:  # grew while read
                return None
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def integer(text: Any) -> int:
    """``text`` as an int if it is a string of at most :data:`MAX_DIGITS` digits (ValueError)."""
    if not isinstance(text, str) or len(text) > MAX_DIGITS + 1 or not _INTEGER.fullmatch(text):
        raise ValueError("not an integer of bounded size")
    return int(text)


def _float_text(text: Any) -> str:
    if not isinstance(text, str) or len(text) > MAX_DIGITS + 20 or not _FLOAT.fullmatch(text):
        raise ValueError("not a float of bounded size")
    return text


def real(text: Any) -> float:
    """``text`` as a float if it is a decimal of bounded length (ValueError)."""
    return float(_float_text(text))


def number(name: str, args: list[Any]) -> sympy.Number:
    """The SymPy ``Integer``, ``Rational`` or ``Float`` an entry writes as ``[name, *args]``,
    of bounded size (ValueError otherwise)."""
    if name == "Integer" and len(args) == 1:
        return sympy.Integer(integer(args[0]))
    if name == "Rational" and len(args) == 2:
        return sympy.Rational(integer(args[0]), integer(args[1]))
    if name == "Float" and len(args) == 2 and 0 < (bits := integer(args[1])) <= MAX_PRECISION:
        return sympy.Float(_float_text(args[0]), precision=bits)
    raise ValueError(f"not a {name} of bounded size")


def _no_bare_number(text: str) -> Any:
    raise ValueError(f"a bare number in an entry: {text[:20]}")


def parse(data: bytes) -> Any:
    """The JSON of an entry; raises ``ValueError`` on bare numbers (the encoding writes none)."""
    return json.loads(data.decode("utf-8"), parse_int=_no_bare_number,
                      parse_float=_no_bare_number, parse_constant=_no_bare_number)


def digest(key: list[str], value: Any) -> str:
    """The SHA-256 of an entry's key and encoded value, as stored beside them."""
    text = json.dumps([key, value], sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


@lru_cache(maxsize=32)
def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def conforms(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the type ``hint`` all the way down: classes (dataclasses field by
    field, through their annotations), ``X | None``, ``tuple[X, ...]``, ``tuple[X, Y]``,
    ``list[X]``, ``dict[K, V]``; ``float`` takes an int, ``int`` and ``float`` not a bool."""
    if hint is Any or hint is object:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, a) for a in args)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(conforms(v, args[0]) for v in value)
        return len(value) == len(args) and all(conforms(v, a) for v, a in zip(value, args, strict=True))
    if origin is list:
        return isinstance(value, list) and all(conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(conforms(k, args[0]) and conforms(v, args[1])
                                               for k, v in value.items())
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if not isinstance(hint, type) or not isinstance(value, hint):
        return False
    cls: type[Any] = type(value)
    if isinstance(value, sympy.Basic) or not dataclasses.is_dataclass(cls):
        return True
    fields = {f.name for f in dataclasses.fields(cls)}
    return all(conforms(getattr(value, name), h) for name, h in _hints(cls).items() if name in fields)
