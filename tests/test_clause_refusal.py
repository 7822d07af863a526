"""The 'subject to' clause of a curve or K x K formula is refused in one place, at the clause."""

from __future__ import annotations

import pytest

from metricc.errors import MetricSyntaxError
from metricc.language.parse import parse

CURVE = "a curve formula takes no 'subject to' clause (for now); write the bound into best()"
MATRIX = "constraints apply to 2 x 2 metrics for now; a K x K formula cannot take a 'subject to' clause"


@pytest.mark.parametrize(("text", "reason"), [
    ("area(recall, fpr) subject to recall >= 0.5", CURVE),
    ("a = best(f1)\n2 * a subject to precision >= 0.9", CURVE),
    ("auroc subject to recall >= 0.5", CURVE),
    ("sum(i, C[i,i])/n subject to recall >= 0.9", MATRIX),
    ("acc = sum(i, C[i,i])\nacc / n subject to recall >= 0.9", MATRIX),
    ("multiclass_accuracy subject to recall >= 0.9", MATRIX),
])
def test_clause_is_refused_at_subject(text: str, reason: str) -> None:
    with pytest.raises(MetricSyntaxError) as info:
        parse(text)
    at = text.index("subject")
    line_start = text.rfind("\n", 0, at) + 1
    assert info.value.reason.startswith(reason)
    assert (info.value.line, info.value.column) == (text.count("\n", 0, at) + 1, at - line_start + 1)
    assert str(info.value).splitlines()[1].strip() == text.splitlines()[-1].strip()
