"""What 0.1 users wrote keeps working: the documented import paths and pickles written by 0.1.

``tests/data/pickles_0_1.pt`` was written by metricc 0.1.0 (the release before the stage
folders) with ``torch.save`` of a dict of metrics, losses (one with its memory buffers
filled) and a stateful metric; it must load and behave as freshly built objects do.
"""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import pytest
import torch

import metricc

DATA = Path(__file__).resolve().parent / "data" / "pickles_0_1.pt"

# Every ``::: path`` of docs/api.md in 0.1, and whether importing it now warns.
DOCUMENTED_0_1 = {
    "metricc.compile": False,
    "metricc.Metric": False,
    "metricc.constraints.Constraint": False,
    "metricc.runtime.constrained.ConstrainedLoss": False,
    "metricc.matrix_metric.MatrixMetric": False,
    "metricc.runtime.matrix.MatrixLoss": False,
    "metricc.matrix_metric.MatrixCheckReport": False,
    "metricc.threshold.best_threshold": True,
    "metricc.threshold.ThresholdChoice": True,
    "metricc.runtime.loss.MetricLoss": False,
    "metricc.stateful.StatefulMetric": True,
    "metricc.library.NamedMetric": False,
    "metricc.library.lookup": False,
    "metricc.verify.VerificationReport": False,
    "metricc.errors": False,
}


def _resolve(path: str) -> object:
    module, _, name = path.rpartition(".")
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("path", list(DOCUMENTED_0_1))
def test_documented_import_paths_still_work(path: str) -> None:
    import sys

    module = path.rpartition(".")[0]
    for name in [m for m in sys.modules if m in ("metricc.threshold", "metricc.stateful")]:
        del sys.modules[name]  # a fresh import, so that the deprecation warning is seen
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obj = _resolve(path)
    deprecated = [w for w in caught if issubclass(w.category, DeprecationWarning)
                  and "metricc" in str(w.message)]
    assert obj is not None
    if DOCUMENTED_0_1[path]:
        assert deprecated, f"{module} should warn that it moved"
        assert "0.3" in str(deprecated[0].message)  # says when it goes
    else:
        assert not deprecated, [str(w.message) for w in deprecated]


def test_deprecated_paths_give_the_same_objects() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from metricc.stateful import StatefulMetric
        from metricc.threshold import ThresholdChoice, best_threshold
    from metricc.evaluate.stateful import StatefulMetric as new_stateful
    from metricc.evaluate.threshold import ThresholdChoice as new_choice

    assert StatefulMetric is new_stateful and ThresholdChoice is new_choice
    assert best_threshold is metricc.best_threshold


def test_0_1_verify_function_warns_and_verifies() -> None:
    """0.1's ``metricc.verify.verify(metric)`` (in its ``__all__``) still runs, and warns."""
    from metricc.verify import verify

    with pytest.warns(DeprecationWarning, match="0.3"):
        report = verify(metricc.compile("precision"), numeric=False)
    assert report.ok and report.checks
    assert [c.name for c in report.checks] == [
        c.name for c in metricc.compile("precision").verify(numeric=False).checks]


def test_pickles_written_by_0_1_still_load() -> None:
    objs = torch.load(DATA, weights_only=False)
    f1 = objs["metric_f1"]
    assert isinstance(f1, metricc.Metric) and f1.value(tp=30, fp=5, fn=10, tn=955) == 0.8
    x = torch.randn(32, generator=torch.Generator().manual_seed(0))
    y = (torch.rand(32, generator=torch.Generator().manual_seed(1)) < 0.3).float()
    fresh = metricc.compile("f1").loss(from_logits=True, memory_decay=0.9)
    old = objs["loss_f1"]
    # the old loss kept its memory of one batch; a fresh one starts empty
    assert old.state_dict().keys() == fresh.state_dict().keys()
    old.reset_memory()
    assert torch.equal(old(x, y), fresh(x, y))
    dice = metricc.compile("dice").loss("linear", mode="multiclass", from_logits=True)
    logits, labels = torch.randn(4, 3, 5, 5), torch.randint(0, 3, (4, 5, 5))
    assert torch.equal(objs["loss_dice_multiclass"](logits, labels), dice(logits, labels))
    constrained = objs["loss_constrained"]
    # the pickle keeps the options it was built with: 0.1's defaults (amplifier 73, step 0.05)
    ref = metricc.compile("precision subject to recall >= 0.8").loss(
        from_logits=True, amplifier=73.0, multiplier_lr=0.05)
    assert (constrained.objective.relax.amplifier, constrained.multiplier_lr) == (73.0, 0.05)
    assert torch.allclose(constrained(x, y), ref(x, y), rtol=0, atol=0)
    stateful = objs["stateful_f1"]
    stateful.update(torch.sigmoid(x), y.long())
    assert float(stateful.compute()) == pytest.approx(metricc.compile("f1").score(torch.sigmoid(x), y))
    qwk = objs["metric_qwk"]
    assert qwk.value([[5, 1], [2, 4]]) == 0.5


def test_the_version_follows_the_changelog() -> None:
    import re

    root = Path(__file__).resolve().parents[1]
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (root / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    project = re.search(r'^version = "([^"]+)"', (root / "pyproject.toml").read_text(encoding="utf-8"), re.M)[1]
    assert released and released[0] == project == metricc.__version__
