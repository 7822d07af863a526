"""The statistic seam, by behaviour: every named metric of every statistic does everything a
metric promises (issue 34, point 2).

The named metrics are collected by the statistic their parsed formula declares, over
:data:`metricc.analysis.statistics.STATISTICS`, so a new statistic's named metrics are picked
up here without an edit, and a declared statistic without a named metric fails. Each
statistic feeds its metrics through one :class:`Example` in :data:`EXAMPLES` (a batch of the
right shape, what ``score()`` and ``metric()`` take, and an independent reference); a
statistic without one fails every case with a message saying to add it.

For every named metric: it compiles; ``check()`` returns a report; ``verify()`` passes within
the budget tests' 30 s hang catcher (``docs/numerics.md``); its loss trains eagerly (finite
loss, finite nonzero gradients, a few SGD steps lower the loss); under
``torch.compile(fullgraph=True)`` loss and gradient equal eager's; metric and loss survive
pickle; its standalone file, imported where metricc, sympy and lark cannot be, gives the
in-process loss and gradient; ``score()`` equals the reference (``tests/oracles.py``,
``tests/test_matrix.py``); ``metric()`` over two updates equals ``score()`` of both.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from blocked_imports import PRELUDE
from oracles import curve_reference, fairlearn_reference, sklearn_reference
from test_matrix import sklearn_score
from torch import Tensor

import metricc
from metricc.analysis.statistics import STATISTICS
from metricc.library import NamedMetric, lookup, names

F64 = torch.float64
#: ``verify()`` of any formula the budget tests accept ends within this (their hang catcher;
#: the target is 10 s, ``docs/numerics.md``).
VERIFY_SECONDS = 30.0

# Every step below runs with metricc's warnings as errors: a named metric must not warn that
# its loss trains the wrong way, nor hint that its inputs look wrong.
pytestmark = pytest.mark.filterwarnings("error::metricc.errors.MetricWarning")


@dataclass(frozen=True)
class Example:
    """How one statistic's named metrics are fed here.

    ``batch(generator, n)`` gives ``(logits, target)`` for a loss built with
    ``from_logits=True``; ``scores(logits)`` is what ``score()`` and ``metric()`` take, with
    ``options``; ``reference(name, target, scores)`` is an independent value of the named
    metric on those hard labels. ``lr`` is an SGD step on the logits under which a few steps
    lower every named metric's loss on this statistic's batch of ``n``.
    """

    n: int
    lr: float
    batch: Callable[[torch.Generator, int], tuple[Tensor, Tensor]]
    scores: Callable[[Tensor], Tensor]
    reference: Callable[[str, np.ndarray, np.ndarray], float]
    options: Mapping[str, Any] = field(default_factory=dict)
    #: What the loss (and ``metric().update``) take after the target, for a batch of ``n``
    #: (the group statistic: each sample's group), and ``score()`` by keyword.
    extra: Callable[[int], tuple[Tensor, ...]] = lambda n: ()
    score_extra: Callable[[int], Mapping[str, Any]] = lambda n: {}
    #: Loss options besides ``from_logits=True`` (the group loss's ``num_groups``, which
    #: ``torch.compile`` needs: group ids are data).
    loss_options: Mapping[str, Any] = field(default_factory=dict)


def _binary(g: torch.Generator, n: int) -> tuple[Tensor, Tensor]:
    target = (torch.rand(n, generator=g) < 0.4).to(F64)
    target[:2] = torch.tensor([0.0, 1.0])  # both classes, whatever the seed
    return torch.randn(n, generator=g, dtype=F64) + target, target


K = 4


def _classes(g: torch.Generator, n: int) -> tuple[Tensor, Tensor]:
    target = torch.arange(n) % K  # every class present
    target = target[torch.randperm(n, generator=g)]
    logits = torch.randn(n, K, generator=g, dtype=F64) + torch.nn.functional.one_hot(target, K)
    return logits, target


def _counts_reference(name: str, y: np.ndarray, s: np.ndarray) -> float:
    return sklearn_reference(name)(y.astype(int), (s >= 0.5).astype(int))


def _matrix_reference(name: str, y: np.ndarray, s: np.ndarray) -> float:
    return sklearn_score(name, y, s.argmax(1), K)


def _curve_reference(name: str, y: np.ndarray, s: np.ndarray) -> float:
    return curve_reference(name)(y.astype(int), s)


GROUPS = 3


def _group_ids(n: int) -> Tensor:
    return torch.arange(n) % GROUPS  # every group, with both classes (the batch's 0/1 pattern)


def _groups_reference(name: str, y: np.ndarray, s: np.ndarray) -> float:
    return fairlearn_reference(name, y.astype(int), (s >= 0.5).astype(int), _group_ids(len(y)).numpy(), None)


#: One example per statistic, by :attr:`Statistic.name`: a new statistic adds its own.
EXAMPLES: dict[str, Example] = {
    "counts": Example(n=64, lr=1.0, batch=_binary, scores=torch.sigmoid, reference=_counts_reference),
    "matrix": Example(n=48, lr=1.0, batch=_classes, scores=lambda x: x.softmax(1),
                      reference=_matrix_reference, options={"num_classes": K}),
    # the soft curve's gradient reaches the scores near a bin edge of another score: a batch of
    # 256 gives most of them one (32 leaves partial_auroc's gradient zero). best()'s gate is
    # sharp (tau_gate=0.001): recall_at_precision's loss rises again past steps of lr ~ 3.
    "curve": Example(n=256, lr=1.0, batch=_binary, scores=torch.sigmoid, reference=_curve_reference),
    # each sample's group travels with it; score() takes fairlearn's answer where a group's rate
    # has nothing to count (zero_division=0), as the reference does
    "groups": Example(n=96, lr=1.0, batch=_binary, scores=torch.sigmoid, reference=_groups_reference,
                      options={"zero_division": 0}, extra=lambda n: (_group_ids(n),),
                      score_extra=lambda n: {"groups": _group_ids(n)}, loss_options={"num_groups": GROUPS}),
}


def example_for(statistic: str) -> Example:
    """The statistic's example, or a failure saying what to add."""
    if statistic not in EXAMPLES:
        pytest.fail(f"statistic {statistic!r} (declared in metricc.analysis.statistics.STATISTICS) has no "
                    f"example batch maker: add EXAMPLES[{statistic!r}] = Example(...) to "
                    "tests/test_seam_behaviour.py (a batch of its input shape, what score()/metric() take, "
                    "and an independent reference), so that its named metrics are tested here too")
    return EXAMPLES[statistic]


def _named_metrics() -> dict[str, list[str]]:
    """Every named metric (aliases left out), by the statistic its parsed formula declares."""
    found: dict[str, list[str]] = {name: [] for name in STATISTICS}
    canonical: set[str] = set()
    for alias in names():
        named = lookup(alias)
        assert named is not None, alias
        canonical.add(named.name)
    for name in sorted(canonical):
        found.setdefault(metricc.compile(name).formula.statistic, []).append(name)
    return found


NAMED = _named_metrics()
CASES = [pytest.param(statistic, name, id=f"{statistic}-{name}")
         for statistic, found in NAMED.items() for name in found]


def _data(statistic: str, seed: int = 0) -> tuple[Example, Tensor, Tensor]:
    ex = example_for(statistic)
    x, y = ex.batch(torch.Generator().manual_seed(seed), ex.n)
    return ex, x, y


def _loss_and_grad(loss: Any, x: Tensor, y: Tensor, extra: tuple[Tensor, ...] = ()) -> tuple[Tensor, Tensor]:
    leaf = x.clone().requires_grad_(True)
    value = loss(leaf, y, *extra)
    (grad,) = torch.autograd.grad(value, leaf)
    return value.detach(), grad


# --- the registries ------------------------------------------------------------------------------

def test_every_statistic_has_named_metrics_and_an_example() -> None:
    assert set(NAMED) == set(STATISTICS), f"a named metric declares an unregistered statistic: {NAMED}"
    for statistic, found in NAMED.items():
        assert found, f"statistic {statistic!r} has no named metric in metricc.library"
        example_for(statistic)
    assert set(EXAMPLES) <= set(STATISTICS), f"examples of no statistic: {set(EXAMPLES) - set(STATISTICS)}"
    # A NamedMetric flag named after a statistic (matrix=True, curve=True) says which one it is
    # over; a metric with no flag set is over the statistic that has none (the 2 x 2 counts).
    flags = {f.name for f in dataclasses.fields(NamedMetric)} & set(STATISTICS)
    unflagged = set(STATISTICS) - flags
    assert len(unflagged) == 1, unflagged
    for statistic, found in NAMED.items():
        for name in found:
            named = lookup(name)
            assert named is not None
            on = {flag for flag in flags if getattr(named, flag)}
            assert on == ({statistic} & flags), (name, statistic, on)


def test_a_statistic_without_an_example_fails_saying_what_to_add() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"EXAMPLES\['ranking'\] = Example"):
        example_for("ranking")


# --- every named metric ------------------------------------------------------------------------

@pytest.mark.parametrize(("statistic", "name"), CASES)
def test_compiles_and_checks(statistic: str, name: str) -> None:
    m = metricc.compile(name)
    assert isinstance(m, metricc.Metric) and m.statistic is STATISTICS[statistic]
    assert m.name == name
    report = m.check()
    assert isinstance(report, type(m).check_report)
    assert report.depends_on_predictions and not report.wrong_way(), str(report)
    assert str(report)


@pytest.mark.parametrize(("statistic", "name"), CASES)
def test_verify_passes_in_time(statistic: str, name: str) -> None:
    m = metricc.compile(name)
    start = time.perf_counter()
    report = m.verify()
    took = time.perf_counter() - start
    assert report.ok and report.checks and not report.failures, str(report)
    assert took < VERIFY_SECONDS, f"verify() of {name} took {took:.1f} s"


@pytest.mark.parametrize(("statistic", "name"), CASES)
def test_loss_trains_eagerly(statistic: str, name: str) -> None:
    ex, x, y = _data(statistic)
    extra = ex.extra(ex.n)
    loss = metricc.compile(name).loss(from_logits=True, **ex.loss_options)
    # the gradient is a descent direction: a short step against it lowers the loss
    value, grad = _loss_and_grad(loss, x, y, extra)
    with torch.no_grad():
        assert float(loss(x - 1e-3 * grad / grad.norm(), y, *extra)) < float(value), name
    logits = x.clone().requires_grad_(True)
    opt = torch.optim.SGD([logits], lr=ex.lr)
    values = []
    for _ in range(5):
        opt.zero_grad()
        value = loss(logits, y, *extra)
        value.backward()
        assert logits.grad is not None
        assert torch.isfinite(value) and torch.isfinite(logits.grad).all(), (value, logits.grad)
        assert logits.grad.abs().sum() > 0, f"{name}: zero gradient at step {len(values)}"
        values.append(value.item())
        opt.step()
    values.append(loss(logits, y, *extra).item())
    assert values[-1] < values[0], f"{name}: SGD did not lower the loss: {values}"


@pytest.mark.parametrize(("statistic", "name"), CASES)
def test_compiled_loss_equals_eager(statistic: str, name: str) -> None:
    ex, x, y = _data(statistic)
    extra = ex.extra(ex.n)
    loss = metricc.compile(name).loss(from_logits=True, **ex.loss_options)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    got, got_grad = _loss_and_grad(compiled, x, y, extra)
    want, want_grad = _loss_and_grad(loss, x, y, extra)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("statistic", "name"), CASES)
def test_metric_and_loss_pickle(statistic: str, name: str) -> None:
    ex, x, y = _data(statistic)
    extra = ex.extra(ex.n)
    m = metricc.compile(name)
    loss = m.loss(from_logits=True, **ex.loss_options)
    want = loss(x, y, *extra)
    back_metric = pickle.loads(pickle.dumps(m))
    assert type(back_metric) is type(m) and back_metric.name == name
    assert back_metric.expr == m.expr and back_metric.parameters == m.parameters
    back_loss = pickle.loads(pickle.dumps(loss))
    assert type(back_loss) is type(loss) and back_loss.from_logits
    for other in (back_loss, back_metric.loss(from_logits=True, **ex.loss_options)):
        torch.testing.assert_close(other(x, y, *extra), want, rtol=0, atol=0)


@pytest.mark.parametrize(("statistic", "name"), CASES)
def test_score_equals_the_reference(statistic: str, name: str) -> None:
    ex, x, y = _data(statistic)
    scores = ex.scores(x)
    got = metricc.compile(name).score(scores, y, **ex.options, **ex.score_extra(ex.n))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", UserWarning)  # scikit-learn's, on no metricc value
        want = ex.reference(name, y.numpy(), scores.numpy())
    assert np.isfinite(want), (name, want)
    assert float(got) == pytest.approx(want, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(("statistic", "name"), CASES)
def test_metric_over_two_updates_equals_score(statistic: str, name: str) -> None:
    from torchmetrics import Metric as TorchMetric

    ex, x, y = _data(statistic)
    scores = ex.scores(x)
    m = metricc.compile(name)
    stateful = m.metric(**ex.options)
    assert isinstance(stateful, TorchMetric)
    half = ex.n // 2
    extra = ex.extra(ex.n)
    stateful.update(scores[:half], y[:half], *(e[:half] for e in extra))
    stateful.update(scores[half:], y[half:], *(e[half:] for e in extra))
    got = stateful.compute()
    want = m.score(scores, y, **ex.options, **ex.score_extra(ex.n))
    assert float(got) == pytest.approx(float(want), rel=1e-12, abs=1e-12)


# --- standalone files, in a process that cannot import metricc ----------------------------------

CHILD = PRELUDE + r'''
torch.set_num_threads(1)
results = {"blocked": blocked, "errors": {}}
for job in json.load(open(sys.argv[1])):
    try:
        spec = importlib.util.spec_from_file_location(job["module"], job["path"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        data = torch.load(job["inputs"])
        x = data["x"].clone().requires_grad_(True)
        # from_logits=True, written as the default
        value = getattr(module, job["class"])()(x, data["y"], *data["extra"])
        value.backward()
        results[job["name"]] = {"loss": value.detach(), "grad": x.grad}
    except Exception as e:  # reported per metric by the test
        results["errors"][job["name"]] = f"{type(e).__name__}: {e}"
results["leaked"] = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
torch.save(results, sys.argv[2])
'''


@pytest.fixture(scope="module")
def standalone_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every named metric's standalone file, all run in one isolated (``python -I``) child."""
    tmp = tmp_path_factory.mktemp("seam_standalone")
    jobs, expected = [], {}
    for statistic, found in NAMED.items():
        if statistic not in EXAMPLES:
            continue  # its cases fail on the missing example
        for name in found:
            m = metricc.compile(name)
            path = tmp / f"{name}_loss.py"
            ex, x, y = _data(statistic)
            m.standalone(path, from_logits=True, **ex.loss_options)
            extra = ex.extra(ex.n)
            torch.save({"x": x, "y": y, "extra": list(extra)}, tmp / f"{name}_in.pt")
            expected[name] = _loss_and_grad(m.loss(from_logits=True, **ex.loss_options), x, y, extra)
            jobs.append({"name": name, "module": f"{name}_loss", "path": str(path),
                         "class": m.loss_class.__name__, "inputs": str(tmp / f"{name}_in.pt")})
    (tmp / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    (tmp / "child.py").write_text(CHILD, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-I", str(tmp / "child.py"), str(tmp / "jobs.json"),
                           str(tmp / "out.pt")], cwd=tmp, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"expected": expected, "got": torch.load(tmp / "out.pt")}


@pytest.mark.parametrize(("statistic", "name"), CASES)
def test_standalone_file_without_metricc_equals_the_loss(standalone_runs: dict[str, Any], statistic: str,
                                                         name: str) -> None:
    example_for(statistic)
    got = standalone_runs["got"]
    assert got["blocked"] == ["lark", "metricc", "sympy"] and got["leaked"] == []
    assert name not in got["errors"], got["errors"].get(name)
    want_loss, want_grad = standalone_runs["expected"][name]
    torch.testing.assert_close(got[name]["loss"], want_loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[name]["grad"], want_grad, rtol=1e-12, atol=1e-12)
    assert bool(want_grad.abs().sum() > 0)
