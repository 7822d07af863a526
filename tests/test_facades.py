"""One facade per statistic on a neutral base: every public method works for the statistic
or raises a MetricError that says why (never another statistic's answer)."""

from __future__ import annotations

import pickle

import pytest

import metricc
from metricc.analysis.statistics import STATISTICS, resolve
from metricc.facade import Metric

EXAMPLES = {"counts": "f1", "matrix": "quadratic_kappa", "curve": "auroc", "groups": "equal_opportunity_difference"}


def test_each_declaration_names_a_facade_that_declares_it_back() -> None:
    for name, statistic in STATISTICS.items():
        cls = resolve(statistic.facade)
        assert issubclass(cls, Metric) and cls is not Metric
        assert cls.statistic is statistic
        assert type(metricc.compile(EXAMPLES[name])) is cls


@pytest.mark.parametrize(("name", "method", "args"), [
    ("quadratic_kappa", "parse_constraints", (["recall >= 0.9"],)),
    ("quadratic_kappa", "verify_subject", ()),
    ("quadratic_kappa", "best_threshold", ([0.2, 0.8], [0, 1])),
    ("quadratic_kappa", "feasible", ([0.2, 0.8], [0, 1])),
    ("auroc", "parse_constraints", (["recall >= 0.9"],)),
    ("auroc", "verify_subject", ()),
    ("auroc", "decision_objective", ()),
    ("auroc", "constraint_scores", ([0.2, 0.8], [0, 1])),
    ("equal_opportunity_difference", "parse_constraints", (["recall >= 0.9"],)),
    ("equal_opportunity_difference", "verify_subject", ()),
    ("equal_opportunity_difference", "decision_objective", ()),
    ("equal_opportunity_difference", "feasible", ([0.2, 0.8], [0, 1])),
])
def test_a_method_of_another_statistic_is_refused_with_the_reason(name: str, method: str,
                                                                   args: tuple) -> None:
    m = metricc.compile(name)
    with pytest.raises(metricc.MetricError, match=rf"{method}\(\) does not apply to the .* metric "
                                                  rf"'{name}': "):
        getattr(m, method)(*args)


def test_the_base_class_still_builds_the_formulas_facade() -> None:
    # 0.2 built 2x2 metrics as metricc.Metric(formula, params, name, higher_is_better)
    f1 = metricc.compile("f1")
    m = metricc.Metric(f1.formula, {}, None, True)
    assert type(m) is type(f1) and m.value(tp=30, fp=5, fn=10, tn=955) == 0.8
    assert pickle.loads(pickle.dumps(m)).expr == f1.expr


def test_constraints_and_2x2_scoring_attach_to_the_2x2_facade_only() -> None:
    mro = {n: [c.__name__ for c in type(metricc.compile(e)).__mro__] for n, e in EXAMPLES.items()}
    assert {"CountsScoring", "ConstraintMethods"} <= set(mro["counts"])
    for other in ("matrix", "curve", "groups"):
        assert not {"CountsScoring", "ConstraintMethods"} & set(mro[other])
