"""Issue 24: one facade and one seam for every statistic (2x2 counts, K x K matrix).

Every statistic has an entry in each stage's registry; K x K metrics get what 2x2
metrics have through the shared seam (a ``Metric``, pickling, ``metric()``, one
class-name rule, one standalone writer); the hardening of issue 26 in these files.
"""

from __future__ import annotations

import copy
import enum
import importlib.util
import inspect
import io
import pickle
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from ddp_launch import rank_logs, run_ranks
from script_loader import load_script

import metricc
from metricc.analysis.statistics import STATISTICS, resolve, statistic_of
from metricc.emit.loss_class import loss_class_name
from metricc.language.parse import parse
from metricc.metric import FACADES
from metricc.standalone_file import standalone_source

QWK = "quadratic_kappa"


def _relaxation(loss: torch.nn.Module) -> str:
    """The loss's relaxation by name (a string today; an option object once relaxations are)."""
    r = loss.relaxation
    return r if isinstance(r, str) else r.name


# --- the registry -------------------------------------------------------------------------

def test_every_statistic_declares_every_part_once_and_each_resolves() -> None:
    from metricc.emit.counts import KERNEL_NAMES
    from metricc.emit.matrix import MATRIX_KERNEL_NAMES

    assert set(FACADES) == set(STATISTICS)
    for stat in STATISTICS.values():
        for part in (stat.facade, stat.emitter, stat.grad_printer, stat.standalone_doc, stat.loss_class):
            assert callable(resolve(part)), part
        assert resolve(stat.facade).statistic is stat
    assert STATISTICS["counts"].kernel_names == KERNEL_NAMES
    assert STATISTICS["matrix"].kernel_names == MATRIX_KERNEL_NAMES
    for name, stat in STATISTICS.items():
        assert stat.name == name
        runtime = importlib.import_module(stat.loss_class.rpartition(".")[0])
        assert all(callable(getattr(runtime, h)) for h in stat.kernel_helpers)
        assert issubclass(resolve(stat.loss_class), torch.nn.Module)


def test_the_parsed_record_names_its_statistic_and_compile_dispatches_on_it() -> None:
    assert statistic_of(parse("f1")).name == "counts"
    assert statistic_of(parse(QWK)).name == "matrix"
    for text, cls in (("f1", FACADES["counts"]), (QWK, FACADES["matrix"]), ("auroc", FACADES["curve"])):
        m = metricc.compile(text)
        assert type(m) is cls and isinstance(m, metricc.Metric)
        assert m.statistic is STATISTICS[statistic_of(m.formula).name]
        assert issubclass(m.loss_class, resolve(m.statistic.loss_class))
    with pytest.raises(metricc.MetricError, match="names no registered statistic"):
        statistic_of(object())


def test_compile_is_annotated_to_return_a_metric_and_losses_share_a_protocol() -> None:
    from metricc.facade import Loss

    assert inspect.signature(metricc.compile).return_annotation == "Metric"
    losses = [metricc.compile("f1").loss(), metricc.compile(QWK).loss(),
              metricc.compile("precision subject to recall >= 0.9").loss(
                  warn_monotonicity=False)]
    for loss in losses:
        assert isinstance(loss, torch.nn.Module) and callable(loss.reset_memory)
        params = list(inspect.signature(type(loss).forward).parameters)
        assert params[:3] == ["self", "input", "target"], (type(loss), params)
    assert {"__call__", "reset_memory"} <= set(vars(Loss))


# --- K x K through the shared seam ---------------------------------------------------------

def test_matrix_losses_pickle_deepcopy_and_torch_save() -> None:
    m = metricc.compile("expected_cost", M=[[0, 1, 2], [1, 0, 1], [2, 1, 0]])
    x = torch.randn(10, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (10,))
    for loss in (metricc.compile(QWK).loss(from_logits=True, temperature=0.7),
                 m.loss(from_logits=True)):
        want = loss(x, y)
        for back in (pickle.loads(pickle.dumps(loss)), copy.deepcopy(loss)):
            assert type(back) is type(loss)
            assert back.temperature == loss.temperature and back.from_logits
            torch.testing.assert_close(back(x, y), want, rtol=0, atol=0)
        model = torch.nn.Sequential(torch.nn.Identity(), loss)
        buf = io.BytesIO()
        torch.save(model, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
        torch.testing.assert_close(loaded[1](x, y), want, rtol=0, atol=0)


def test_old_pickle_paths_still_load() -> None:
    import metricc.metric as mm

    cls = mm._rebuild_loss_class((mm._rebuild_metric, ("f1", (), None, ())))
    assert cls is metricc.compile("f1").loss_class
    # before recipes, pickles held compile's arguments
    assert type(mm._rebuild_loss(("f1", (), None, ()))) is cls
    assert mm._recompile(QWK, (), True).loss_class is metricc.compile(QWK, higher_is_better=True).loss_class
    assert mm._rebuild_constraint_metric(("precision subject to recall >= 0.9", (), None, ()),
                                         0).expr == metricc.compile("recall").expr
    assert callable(mm._reduce_loss)


def test_one_class_name_rule_in_process_and_standalone(tmp_path: Path) -> None:
    for text, want in ((QWK, "QuadraticKappaLoss"), ("sum(i, C[i,i]) / n", "CustomMatrixMetricLoss"),
                       ("f1", "F1Loss"), ("TP/(TP+FP)", "CustomMetricLoss")):
        m = metricc.compile(text)
        assert m.loss_class.__name__ == want == loss_class_name(m.name, m.statistic)
        assert f"class {want}(" in standalone_source(m, warn_monotonicity=False)


@pytest.mark.parametrize("name", ["eps", "K", "C", "torch", "float", "super", "MatrixLoss",
                                  "matrix_value", "mx_sum", "lambda"])
def test_matrix_class_names_cannot_shadow_what_the_file_uses(name: str) -> None:
    with pytest.raises(metricc.MetricError, match=r"choose another|not a plain Python identifier"):
        standalone_source(metricc.compile(QWK), name)


def _torchmetrics_references(k: int) -> dict[str, object]:
    from torchmetrics.classification import (
        MulticlassAccuracy,
        MulticlassCohenKappa,
        MulticlassMatthewsCorrCoef,
    )

    return {"quadratic_kappa": MulticlassCohenKappa(k, weights="quadratic"),
            "linear_kappa": MulticlassCohenKappa(k, weights="linear"),
            "multiclass_mcc": MulticlassMatthewsCorrCoef(k),
            "multiclass_accuracy": MulticlassAccuracy(k, average="micro")}


def test_matrix_metric_equals_torchmetrics_over_several_batches() -> None:
    k = 5
    g = torch.Generator().manual_seed(3)
    for name, ref in _torchmetrics_references(k).items():
        ours = metricc.compile(name).metric(num_classes=k)
        for step in range(4):
            p = torch.randn(16 + step, k, generator=g)
            t = torch.randint(0, k, (16 + step,), generator=g)
            ours.update(p, t)
            ref.update(p, t)
        got, want = ours.compute(), ref.compute()
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want.to(torch.float64), rtol=1e-6, atol=1e-6,
                                   msg=name)
        empty = metricc.compile(name).metric(num_classes=k, zero_division=None)
        with warnings.catch_warnings(), pytest.raises(metricc.MetricError, match="undefined"):
            warnings.simplefilter("ignore", UserWarning)  # torchmetrics: compute before update
            empty.compute()


def test_matrix_metric_pickles_and_checks_its_options() -> None:
    m = metricc.compile(QWK).metric(num_classes=3)
    m.update(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 2, 2, 1]))
    back = pickle.loads(pickle.dumps(m))
    assert float(back.compute()) == float(m.compute()) == pytest.approx(7 / 11)
    with pytest.raises(metricc.MetricError, match="needs num_classes"):
        metricc.compile(QWK).metric()
    with pytest.raises(metricc.MetricError, match="2 x 2"):
        metricc.compile("expected_cost", M=[[0, 1], [1, 0]]).metric(num_classes=3)


def test_matrix_metric_is_exact_over_two_gloo_ranks(tmp_path: Path) -> None:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch built without the gloo backend")
    path = Path(__file__).with_name("matrix_ddp_worker.py")
    worker = load_script(path, "metricc_matrix_ddp_worker")
    runs, folder = run_ranks(path, 2, lambda: tmp_path)
    assert all(r.returncode == 0 for r in runs), rank_logs(runs)
    reference = worker.run(1, [0])
    refs = _torchmetrics_references(worker.K)
    for step in range(worker.STEPS):
        p, t = worker.make_data(step)
        for ref in refs.values():
            ref.update(p, t)
    for rank in range(2):
        got = torch.load(folder / f"rank{rank}.pt")
        for name, value in reference.items():
            assert torch.equal(got[name], value), (rank, name)
            torch.testing.assert_close(value, refs[name].compute().to(torch.float64),
                                       rtol=1e-6, atol=1e-6)


def test_matrix_loss_hints_when_logits_are_probabilities() -> None:
    loss = metricc.compile(QWK).loss(from_logits=True)
    p = torch.randn(64, 4).softmax(1)
    with pytest.warns(metricc.MetricWarning, match="probabilit"):
        loss(p, torch.randint(0, 4, (64,)))


def test_matrix_expr_reads_in_the_formula_language() -> None:
    m = metricc.compile(QWK)
    assert m.expr_text in repr(m) and "Sum(" not in repr(m) and "sum(i, j," in m.expr_text


# --- defaults: one rule for the API, the CLI and standalone files ------------------------

_MODES = {
    "binary": ({}, lambda g: (torch.rand(12, generator=g, dtype=torch.float64),
                              (torch.rand(12, generator=g) < 0.4).to(torch.float64))),
    "multiclass": ({"mode": "multiclass"},
                   lambda g: (torch.randn(12, 3, generator=g, dtype=torch.float64).softmax(1),
                              torch.randint(0, 3, (12,), generator=g))),
    "multilabel": ({"mode": "multilabel"},
                   lambda g: (torch.rand(12, 3, generator=g, dtype=torch.float64),
                              (torch.rand(12, 3, generator=g) < 0.4).to(torch.float64))),
}


@pytest.mark.parametrize("mode", sorted(_MODES))
def test_standalone_default_options_equal_in_process_defaults(mode: str, tmp_path: Path) -> None:
    options, data = _MODES[mode]
    m = metricc.compile("f1")
    path = tmp_path / f"f1_{mode}.py"
    path.write_text(standalone_source(m, **options), encoding="utf-8")
    module = load_script(path, f"f1_defaults_{mode}")
    x, y = data(torch.Generator().manual_seed(1))
    theirs, ours = module.F1Loss(), m.loss(**options)
    assert _relaxation(theirs) == _relaxation(ours)  # softmax in multiclass mode
    torch.testing.assert_close(theirs(x, y), ours(x, y), rtol=0, atol=0)


def test_standalone_matrix_file_equals_in_process_loss(tmp_path: Path) -> None:
    m = metricc.compile(QWK)
    path = tmp_path / "qwk.py"
    path.write_text(standalone_source(m), encoding="utf-8")
    module = load_script(path, "qwk_defaults")
    x = torch.randn(12, 4, dtype=torch.float64).softmax(1).requires_grad_()
    y = torch.randint(0, 4, (12,))
    a, b = module.QuadraticKappaLoss()(x, y), m.loss()(x, y)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_cli_compile_multiclass_defaults_to_the_loss_default(tmp_path: Path) -> None:
    from metricc.cli import main

    out = tmp_path / "f1_mc.py"
    assert main(["compile", "f1", "--option", "mode=multiclass", "-o", str(out)]) == 0
    loss = load_script(out, "f1_cli_multiclass").F1Loss()
    assert _relaxation(loss) == _relaxation(metricc.compile("f1").loss(mode="multiclass")) == "softmax"


# --- hardening (issue 26) ------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["False", 0, 1.0])
def test_higher_is_better_must_be_a_flag(flag: object) -> None:
    with pytest.raises(metricc.MetricError, match="higher_is_better must be True or False"):
        metricc.compile("error_rate", higher_is_better=flag)
    assert metricc.compile("error_rate", higher_is_better=np.bool_(False)).higher_is_better is False


class _Sneaky(float):
    def __repr__(self) -> str:
        return "__import__('os').system('echo pwned')"


class _Reduction(enum.IntEnum):
    SMALL = 2


def test_standalone_options_are_written_as_plain_values() -> None:
    src = standalone_source(metricc.compile("f1"), amplifier=_Sneaky(50.0),
                            eps=np.float64(1e-6), warn_monotonicity=False)
    assert "amplifier: float = 50.0," in src and "eps: float = 1e-06," in src
    assert "pwned" not in src and "np.float64" not in src
    src = standalone_source(metricc.compile("f1"), mode="multiclass",
                            ignore_index=_Reduction.SMALL, warn_monotonicity=False)
    assert "ignore_index: int | None = 2," in src and "_Reduction" not in src
    with pytest.raises(metricc.MetricError, match="cannot be written"):
        standalone_source(metricc.compile(QWK), temperature=object())


def test_compiling_in_eight_threads_keeps_linecache_consistent() -> None:
    errors: list[BaseException] = []
    formulas = [f"TP / (TP + {i + 2}*FP + FN)" for i in range(288)]

    def work(part: list[str]) -> None:
        try:
            for f in part:
                assert metricc.compile(f).loss_class.source
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(formulas[i::8],)) for i in range(8)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    from metricc.emit import loss_class

    assert len(loss_class._LINECACHE_KEYS) <= loss_class.LINECACHE_SIZE


def test_the_stateful_metric_receives_data_not_the_facade() -> None:
    """Lower stages get the formula's functions and values: the 2x2 metric holds the bound
    value function and text, never the compiled Metric (issue 24, one facade)."""
    import pickle

    import torch

    from metricc.evaluate.stateful import StatefulMetric

    m = metricc.compile("fbeta", beta=2.0)
    sm = m.metric()
    assert isinstance(sm, StatefulMetric)
    assert not any(isinstance(v, metricc.Metric) for v in vars(sm).values())
    sm.update(torch.tensor([1, 1, 0, 0]), torch.tensor([1, 0, 1, 0]))
    # F2 of TP=1, FP=1, FN=1: 5*1 / (5*1 + 4*1 + 1) = 0.5
    assert float(sm.compute()) == pytest.approx(0.5, abs=1e-12)
    again = pickle.loads(pickle.dumps(sm))
    assert float(again.compute()) == pytest.approx(0.5, abs=1e-12)
    raising = m.metric(zero_division=None)
    raising.update(torch.tensor([0, 0]), torch.tensor([0, 0]))
    with pytest.raises(metricc.MetricError, match=r"= 0"):
        raising.compute()
    with pytest.warns(DeprecationWarning, match="0.3"):
        assert sm.compiled is m
