"""Exceptions and warnings raised by metricc.

Every mistake a user can make raises a :class:`MetricError`, which is a
``ValueError``, so ``except ValueError`` in user code keeps working. Standalone
loss files carry this module too (it needs only the standard library), so a
standalone loss raises the same classes.
"""

from __future__ import annotations

import difflib

__all__ = [
    "MetricError",
    "MetricSyntaxError",
    "MetricWarning",
    "MissingParameterError",
    "UnknownNameError",
    "VerificationError",
    "suggest",
    "suggest_all",
    "unknown_loss_option",
]


class MetricError(ValueError):
    """A formula, option or input that metricc cannot accept; the message says how to fix it."""


class MetricSyntaxError(MetricError):
    """A formula that does not parse.

    ``line`` and ``column`` are 1-based; ``str(err)`` shows the offending line
    with a ``^`` under the problem.
    """

    def __init__(self, message: str, text: str, line: int, column: int) -> None:
        self.line = line
        self.column = column
        self.text = text
        self.reason = message
        lines = text.splitlines() or [""]
        src = lines[line - 1] if 0 < line <= len(lines) else ""
        caret = " " * (column - 1) + "^"
        super().__init__(f"{message} (line {line}, column {column})\n    {src}\n    {caret}")


class UnknownNameError(MetricError):
    """A function or name that metricc does not know."""


class MissingParameterError(MetricError):
    """A formula with free parameters that were given no value."""

    def __init__(self, message: str, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(message)


class VerificationError(MetricError):
    """Raised by ``Metric.verify()`` when two ways of computing a gradient disagree."""


class MetricWarning(UserWarning):
    """A metric that is legal but likely a mistake as a training objective."""


def _close_names(name: str, candidates: list[str]) -> list[str]:
    """The candidates ``name`` is a likely typo of: a case slip first, else up to three close ones."""
    lowered = {c.lower(): c for c in candidates}
    if name.lower() in lowered and lowered[name.lower()] != name:
        return [lowered[name.lower()]]
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.75)
    if close or len(name) > 8:
        return close
    # difflib's ratio is too strict for short names: 'qkw' scores 0.67 against 'qwk'. A
    # short name one edit away (two for 5 to 8 letters; a swap of neighbours is one) is
    # a likely typo.
    limit = 1 if len(name) <= 4 else 2
    near = sorted((d, c) for c in candidates
                  if abs(len(c) - len(name)) <= limit and (d := _edits(name.lower(), c.lower())) <= limit)
    return [c for _, c in near[:3]]


def _edits(a: str, b: str) -> int:
    """Damerau distance (optimal string alignment): insertions, deletions, substitutions and
    swaps of neighbouring letters.

    >>> _edits("qkw", "qwk"), _edits("f1", "f2"), _edits("dice", "dcie")
    (1, 1, 1)
    """
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def suggest(name: str, candidates: list[str]) -> str:
    """`` (did you mean 'x'?)`` for a likely typo, else the empty string.

    >>> suggest("anyloos", ["anyloss", "linear"])
    " (did you mean 'anyloss'?)"
    """
    close = _close_names(name, candidates)
    if not close:
        return ""
    return " (did you mean " + " or ".join(f"'{c}'" for c in close) + "?)"


def suggest_all(names: list[str], candidates: list[str]) -> str:
    """One note for several likely typos: `` (did you mean 'FP' for 'fp', 'TP' for 'tp'?)``.

    >>> suggest_all(["fp", "tp"], ["TP", "FP", "FN", "TN"])
    " (did you mean 'FP' for 'fp', 'TP' for 'tp'?)"
    >>> suggest_all(["tp"], ["TP"])
    " (did you mean 'TP'?)"
    """
    found = [(n, close) for n in names if (close := _close_names(n, candidates))]
    if not found:
        return ""
    if len(names) == 1:
        return suggest(names[0], candidates)
    parts = [" or ".join(f"'{c}'" for c in close) + f" for '{n}'" for n, close in found]
    return " (did you mean " + ", ".join(parts) + "?)"


def unknown_loss_option(key: str, options: list[str] | tuple[str, ...], note: str = "") -> MetricError:
    """The error for a loss option ``key`` the loss does not take, with a did-you-mean: one
    message for ``Metric.loss()`` and the constructor of a standalone file's class.

    >>> print(unknown_loss_option("relaxaton", ["relaxation", "eps"]))
    unknown loss option 'relaxaton' (did you mean 'relaxation'?); options are relaxation, eps
    """
    return MetricError(f"unknown loss option {key!r}{suggest(key, list(options))}{note}; "
                       f"options are {', '.join(options)}")
