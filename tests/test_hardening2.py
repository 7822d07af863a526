"""Hardening, round two (issue 26, points 5, 7, 8, 9): each test failed on the code before it."""

from __future__ import annotations

import pytest
import torch

import metricc
from metricc.errors import MetricError


@pytest.mark.parametrize("name", ["lambda", "eps", "torch", "K", "mx_size", "x0"])
def test_matrix_parameter_names_the_kernel_uses_are_refused(name: str) -> None:
    # These became arguments of the generated kernel: a SyntaxError, a duplicate argument,
    # or a shadowed torch / helper.
    with pytest.raises(MetricError, match="cannot name a K x K parameter"):
        metricc.compile(f"sum(i, j, {name}[i,j]*C[i,j])/n", **{name: torch.rand(3, 3)})


def test_an_ordinary_matrix_parameter_still_works() -> None:
    m = metricc.compile("sum(i, j, W[i,j]*C[i,j])/n", W=torch.eye(3))
    q = torch.eye(3)[[0, 1, 2, 1]]
    assert float(m.loss()(q, torch.tensor([0, 1, 2, 1]))) == pytest.approx(0.0, abs=1e-6)
