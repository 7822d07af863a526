"""What ``verify()`` answers: one :class:`Check` per comparison, gathered in a report."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import VerificationError

__all__ = ["Check", "VerificationReport", "finish"]


@dataclass(frozen=True)
class Check:
    """One comparison: what was compared, whether it held, and a counterexample if not.

    >>> print(Check("value", True, "proved equal"))
    [ok  ] value: proved equal
    """

    name: str
    ok: bool
    how: str
    counterexample: dict[str, float] | None = None

    def __str__(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        extra = f"; counterexample {self.counterexample}" if self.counterexample else ""
        return f"[{mark}] {self.name}: {self.how}{extra}"


@dataclass
class VerificationReport:
    """All checks ``Metric.verify()`` ran; ``ok`` when every one held."""

    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def __str__(self) -> str:
        head = "verification passed" if self.ok else f"verification FAILED ({len(self.failures)})"
        return "\n".join([head, *("  " + str(c) for c in self.checks)])


def finish(report: VerificationReport, raise_on_failure: bool) -> VerificationReport:
    """``report``, or a :class:`VerificationError` carrying it where a check failed."""
    if raise_on_failure and not report.ok:
        err = VerificationError(str(report))
        err.report = report  # type: ignore[attr-defined]
        raise err
    return report
