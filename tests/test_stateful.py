"""``Metric.metric()``: a torchmetrics metric from the formula, against torchmetrics and sklearn.

Every comparison runs over several batches (the metric accumulates counts) on
data where some classes are absent from the target, some from the predictions,
and some from both, so the averaging rules are exercised, not just the formula.
"""

from __future__ import annotations

import copy
import importlib
import pickle
import sys

import numpy as np
import pytest
import sklearn.metrics as skm
import torch
import torchmetrics.classification as tmc
from hypothesis import given
from hypothesis import strategies as st

import metricc
from metricc import MetricError

C = 5  # classes; class C-1 never occurs, class C-2 only in predictions (see _batches)
BATCHES = 3

# metricc name -> torchmetrics class stem, sklearn function
TM = {"f1": "F1Score", "precision": "Precision", "recall": "Recall", "jaccard": "JaccardIndex",
      "mcc": "MatthewsCorrCoef", "cohen_kappa": "CohenKappa"}
SAMPLEWISE = ("f1", "precision", "recall")  # torchmetrics has samplewise only for these
SK = {"f1": skm.f1_score, "precision": skm.precision_score, "recall": skm.recall_score,
      "jaccard": skm.jaccard_score}


def _batches(mode: str, seed: int = 0, ignore: int | None = None, n_classes: int = C
             ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A few batches of (N, [C,] 6) probabilities and targets of uneven sizes."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in (4, 7, 3)[:BATCHES]:
        if mode == "binary":
            p = torch.rand(n, 6, generator=g)
            t = (torch.rand(n, 6, generator=g) < 0.4).long()
        elif mode == "multiclass":
            logits = torch.randn(n, n_classes, 6, generator=g) * 2
            if n_classes > 2:
                logits[:, -1] = -50  # never predicted; never a target either (below)
            p = logits.softmax(1)
            hi = n_classes - 2 if n_classes > 2 else n_classes  # class C-2: predictions only
            t = torch.randint(0, hi, (n, 6), generator=g)
        else:
            p = torch.rand(n, n_classes, 6, generator=g)
            t = (torch.rand(n, n_classes, 6, generator=g) < 0.4).long()
            p[:, -1] *= 0.4  # label C-1: no target, no prediction
            t[:, -2:] = 0  # label C-2: predictions only
        if ignore is not None:
            drop = torch.rand(t.shape, generator=g) < 0.15
            t = torch.where(drop, torch.full_like(t, ignore), t)
        out.append((p, t))
    return out


def _run(metric, batches):
    for p, t in batches:
        metric.update(p, t)
    return metric.compute()


def _torchmetrics(name: str, mode: str, **kw):
    cls = getattr(tmc, mode.capitalize() + TM[name])
    if mode == "multiclass":
        kw["num_classes"] = kw.pop("n")
    elif mode == "multilabel":
        kw["num_labels"] = kw.pop("n")
    return cls(**kw)


def _close(ours: torch.Tensor, ref: torch.Tensor) -> None:
    assert ours.dtype == torch.float64
    np.testing.assert_allclose(ours.numpy(), ref.double().numpy(), rtol=1e-6, atol=1e-7)


# --- torchmetrics ---------------------------------------------------------------------------
@pytest.mark.parametrize("ignore", [None, -1])
@pytest.mark.parametrize(("name", "multidim"), [(n, "global") for n in TM]
                         + [(n, "samplewise") for n in SAMPLEWISE])  # torchmetrics' samplewise
def test_binary_equals_torchmetrics(name: str, multidim: str, ignore: int | None) -> None:
    batches = _batches("binary", seed=1, ignore=ignore)
    kw = {"ignore_index": ignore}
    if name in SAMPLEWISE:
        kw["multidim_average"] = multidim
    ref = _run(getattr(tmc, "Binary" + TM[name])(**kw), batches)
    ours = _run(metricc.compile(name).metric(multidim_average=multidim, ignore_index=ignore),
                batches)
    assert ours.shape == ref.shape
    _close(ours, ref)


@pytest.mark.parametrize("ignore", [None, 255])
@pytest.mark.parametrize("average", ["micro", "macro", "weighted", "none"])
@pytest.mark.parametrize("name", ["f1", "precision", "recall", "jaccard"])
@pytest.mark.parametrize("mode", ["multiclass", "multilabel"])
def test_classes_global_equal_torchmetrics(mode: str, name: str, average: str,
                                           ignore: int | None) -> None:
    if mode == "multilabel" and ignore is not None:
        ignore = -1
    batches = _batches(mode, seed=2, ignore=ignore)
    ref = _run(_torchmetrics(name, mode, n=C, average=average, ignore_index=ignore), batches)
    ours = _run(metricc.compile(name).metric(mode=mode, num_classes=C, average=average,
                                             ignore_index=ignore), batches)
    assert ours.shape == ref.shape
    _close(ours, ref)


@pytest.mark.parametrize("average", ["micro", "macro", "weighted", "none"])
@pytest.mark.parametrize("name", SAMPLEWISE)
@pytest.mark.parametrize("mode", ["multiclass", "multilabel"])
def test_classes_samplewise_equal_torchmetrics(mode: str, name: str, average: str) -> None:
    batches = _batches(mode, seed=3)
    ref = _run(_torchmetrics(name, mode, n=C, average=average, multidim_average="samplewise"),
               batches)
    ours = _run(metricc.compile(name).metric(mode=mode, num_classes=C, average=average,
                                             multidim_average="samplewise"), batches)
    assert ours.shape == ref.shape == ((14,) if average != "none" else (14, C))
    _close(ours, ref)


@pytest.mark.parametrize("name", ["mcc", "cohen_kappa"])
def test_mcc_and_kappa_multiclass_where_the_definitions_meet(name: str) -> None:
    """torchmetrics' multiclass MCC and kappa are K x K statistics, metricc's are per class.

    They meet at two classes: both one-vs-rest matrices are the binary matrix
    with positive and negative swapped, and MCC and kappa are symmetric under
    that swap, so every average equals the K x K value.
    """
    batches = _batches("multiclass", seed=4, n_classes=2)
    ref = _run(_torchmetrics(name, "multiclass", n=2), batches)
    for average in ("macro", "weighted"):
        ours = _run(metricc.compile(name).metric(mode="multiclass", num_classes=2,
                                                 average=average), batches)
        _close(ours, ref)


def test_multilabel_mcc_is_the_micro_average() -> None:
    """torchmetrics' multilabel MCC adds the labels' 2x2 matrices: metricc's ``micro``."""
    batches = _batches("multilabel", seed=5)
    ref = _run(tmc.MultilabelMatthewsCorrCoef(num_labels=C), batches)
    ours = _run(metricc.compile("mcc").metric(mode="multilabel", num_classes=C,
                                              average="micro"), batches)
    _close(ours, ref)


# --- scikit-learn ---------------------------------------------------------------------------
def _flat(batches, mode: str, ignore: int | None = None):
    """All batches as sklearn arrays: (elements,) labels, or (elements, L) indicators."""
    ps, ts = [], []
    for p, t in batches:
        if mode == "binary":
            ps.append((p >= 0.5).long().reshape(-1))
            ts.append(t.reshape(-1))
        elif mode == "multiclass":
            ps.append(p.argmax(1).reshape(-1))
            ts.append(t.reshape(-1))
        else:
            ps.append((p >= 0.5).long().transpose(1, 2).reshape(-1, p.shape[1]))
            ts.append(t.transpose(1, 2).reshape(-1, t.shape[1]))
    yp, yt = torch.cat(ps).numpy(), torch.cat(ts).numpy()
    if ignore is not None:
        keep = yt != ignore
        yp, yt = yp[keep], yt[keep]
    return yt, yp


@pytest.mark.parametrize("name", ["f1", "precision", "recall", "jaccard", "mcc", "cohen_kappa"])
def test_binary_equals_sklearn(name: str) -> None:
    batches = _batches("binary", seed=6, ignore=-1)
    yt, yp = _flat(batches, "binary", ignore=-1)
    if name == "mcc":
        ref = skm.matthews_corrcoef(yt, yp)
    elif name == "cohen_kappa":
        ref = skm.cohen_kappa_score(yt, yp)
    else:
        ref = SK[name](yt, yp, zero_division=0)
    ours = _run(metricc.compile(name).metric(ignore_index=-1), batches)
    assert float(ours) == pytest.approx(ref, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("average", ["micro", "macro", "weighted", "none"])
@pytest.mark.parametrize("name", ["f1", "precision", "recall", "jaccard"])
@pytest.mark.parametrize("mode", ["multiclass", "multilabel"])
def test_classes_equal_sklearn(mode: str, name: str, average: str) -> None:
    batches = _batches(mode, seed=7)
    yt, yp = _flat(batches, mode)
    kw = {"average": None if average == "none" else average, "zero_division": 0}
    if mode == "multiclass" and average == "none":
        kw["labels"] = list(range(C))  # sklearn otherwise lists only the classes that occur
    ref = SK[name](yt, yp, **kw)
    ours = _run(metricc.compile(name).metric(mode=mode, num_classes=C, average=average),
                batches)
    np.testing.assert_allclose(ours.numpy(), ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("mode", ["binary", "multiclass", "multilabel"])
def test_samplewise_equals_sklearn_per_sample(mode: str) -> None:
    batches = _batches(mode, seed=8)
    ours = _run(metricc.compile("f1").metric(mode=mode, num_classes=None if mode == "binary"
                                             else C, multidim_average="samplewise",
                                             average="macro"), batches)
    refs = []
    for p, t in batches:
        for i in range(p.shape[0]):
            yt, yp = _flat([(p[i:i + 1], t[i:i + 1])], mode)
            avg = "binary" if mode == "binary" else "macro"
            refs.append(skm.f1_score(yt, yp, average=avg, zero_division=0))
    np.testing.assert_allclose(ours.numpy(), refs, rtol=1e-12, atol=1e-15)


@pytest.mark.filterwarnings("ignore:A single label was found")  # sklearn on one-class batches
@given(st.lists(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=12),
                min_size=1, max_size=4),
       st.sampled_from(["f1", "mcc", "cohen_kappa", "jaccard"]))
def test_binary_any_batches_equal_sklearn(batches: list, name: str) -> None:
    """Any split into batches, including degenerate matrices (sklearn's 0 where undefined)."""
    m = metricc.compile(name).metric(zero_division=0)
    for b in batches:
        yt, yp = zip(*b, strict=True)
        m.update(torch.tensor(yp, dtype=torch.float32), torch.tensor(yt, dtype=torch.long))
    yt = [int(a) for b in batches for a, _ in b]
    yp = [int(p) for b in batches for _, p in b]
    if name == "mcc":
        ref = skm.matthews_corrcoef(yt, yp)
    elif name == "cohen_kappa":
        ref = skm.cohen_kappa_score(yt, yp, replace_undefined_by=0.0)
    else:
        ref = SK[name](yt, yp, zero_division=0)
    assert float(m.compute()) == pytest.approx(ref, rel=1e-12, abs=1e-12)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=30),
       st.integers(1, 4), st.sampled_from(["micro", "macro", "weighted"]))
def test_multiclass_any_batches_equal_sklearn(pairs: list, n_batches: int, average: str) -> None:
    yt = torch.tensor([a for a, _ in pairs])
    yp = torch.tensor([b for _, b in pairs])
    m = metricc.compile("f1").metric(mode="multiclass", num_classes=4, average=average)
    for idx in torch.arange(len(pairs)).tensor_split(n_batches):
        if len(idx):
            m.update(yp[idx], yt[idx])
    ref = skm.f1_score(yt.numpy(), yp.numpy(), average=average, zero_division=0)
    assert float(m.compute()) == pytest.approx(ref, rel=1e-12, abs=1e-12)


# --- policies -------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:A single label was found")
def test_mcc_degenerate_matrices_follow_sklearn_not_torchmetrics() -> None:
    """All elements positive and all predicted positive: MCC is 0/0.

    scikit-learn returns 0 (metricc's default ``zero_division``); torchmetrics
    special-cases it to 1. ``zero_division=1`` gives torchmetrics' value here.
    """
    p, t = torch.ones(6), torch.ones(6, dtype=torch.long)
    ref = skm.matthews_corrcoef(t.numpy(), p.long().numpy())
    assert float(_run(metricc.compile("mcc").metric(), [(p, t)])) == ref == 0.0
    assert float(_run(tmc.BinaryMatthewsCorrCoef(), [(p, t)])) == 1.0
    assert float(_run(metricc.compile("mcc").metric(zero_division=1), [(p, t)])) == 1.0


def test_zero_division_options() -> None:
    batches = [(torch.tensor([0.1, 0.2]), torch.tensor([0, 0]))]  # precision is 0/0
    prec = metricc.compile("precision")
    assert float(_run(prec.metric(), batches)) == 0.0
    assert float(_run(prec.metric(zero_division=1), batches)) == 1.0
    assert torch.isnan(_run(prec.metric(zero_division=float("nan")), batches))
    with pytest.raises(MetricError, match=r"undefined.*zero_division"):
        _run(prec.metric(zero_division=None), batches)
    # sklearn's and torchmetrics' zero_division=1 agree with metricc's
    ref = _run(tmc.BinaryPrecision(zero_division=1), batches)
    assert float(ref) == skm.precision_score([0, 0], [0, 0], zero_division=1) == 1.0


def test_absent_classes_policies() -> None:
    """``include`` scores an absent class zero_division; ``skip`` leaves it out, as score()."""
    batches = _batches("multiclass", seed=9)
    yt, yp = _flat(batches, "multiclass")
    f1 = metricc.compile("f1")
    per_class = _run(f1.metric(mode="multiclass", num_classes=C, average="none"), batches)
    present = torch.tensor([(yt == c).any() or (yp == c).any() for c in range(C)])
    assert present.tolist() == [True] * (C - 1) + [False]
    included = _run(f1.metric(mode="multiclass", num_classes=C, absent_classes="include"),
                    batches)
    skipped = _run(f1.metric(mode="multiclass", num_classes=C, absent_classes="skip"), batches)
    assert float(included) == pytest.approx(float(per_class.mean()))
    assert float(skipped) == pytest.approx(float(per_class[present].mean()))
    p = torch.cat([b[0] for b in batches])
    t = torch.cat([b[1] for b in batches])
    assert float(skipped) == pytest.approx(f1.score(p, t, mode="multiclass", zero_division=0))


@pytest.mark.parametrize("mode", ["binary", "multiclass", "multilabel"])
def test_skip_policy_equals_score_with_class_options(mode: str) -> None:
    """With metricc's own rule the metric is ``score()`` on the concatenated batches."""
    ignore = None if mode == "multilabel" else (255 if mode == "multiclass" else -1)
    batches = _batches(mode, seed=10, ignore=ignore)
    p = torch.cat([b[0] for b in batches])
    t = torch.cat([b[1] for b in batches])
    kw = {} if mode == "binary" else {"classes": [0, 1, 3], "class_weights": [1, 2, 0, 3, 1]}
    for average in ("micro", "macro", "weighted"):
        m = metricc.compile("jaccard").metric(
            mode=mode, num_classes=None if mode == "binary" else C, average=average,
            ignore_index=ignore, absent_classes="skip", **kw)
        ref = metricc.compile("jaccard").score(p, t, mode=mode, average=average,
                                               ignore_index=ignore, zero_division=0, **kw)
        assert float(_run(m, batches)) == pytest.approx(ref, rel=1e-12)


def test_any_formula_and_direction() -> None:
    """A custom formula and a lower-is-better metric, against their values on the counts."""
    batches = _batches("binary", seed=11)
    yt, yp = _flat(batches, "binary")
    tn, fp, fn, tp = skm.confusion_matrix(yt, yp).ravel()
    m = metricc.compile("(f1 + mcc) / 2")
    assert float(_run(m.metric(), batches)) == pytest.approx(
        m.value(tp=tp, fp=fp, fn=fn, tn=tn), rel=1e-12)
    err = metricc.compile("error_rate").metric()
    assert err.higher_is_better is False and metricc.compile("f1").metric().higher_is_better
    assert float(_run(err, batches)) == pytest.approx((fp + fn) / (tp + fp + fn + tn))


def test_forward_returns_the_batch_value_and_accumulates() -> None:
    batches = _batches("binary", seed=12)
    m = metricc.compile("f1").metric()
    for p, t in batches:
        batch_value = m(p, t)  # torchmetrics' forward: this batch alone
        assert float(batch_value) == pytest.approx(float(_run(metricc.compile("f1").metric(),
                                                              [(p, t)])))
    total = m.compute()
    _close(total, _run(tmc.BinaryF1Score(), batches))
    m.reset()
    assert int(m.tp.sum()) == 0


def test_logits_and_integer_labels() -> None:
    g = torch.Generator().manual_seed(13)
    logits = torch.randn(20, 3, generator=g) * 3
    target = (torch.rand(20, 3, generator=g) < 0.5).long()
    ref = _run(tmc.MultilabelF1Score(num_labels=3), [(logits, target)])  # detects logits
    ours = _run(metricc.compile("f1").metric(mode="multilabel", num_classes=3, from_logits=True),
                [(logits, target)])
    _close(ours, ref)
    labels = torch.tensor([0, 2, 1, 1])
    ours = _run(metricc.compile("f1").metric(mode="multiclass", num_classes=3),
                [(labels, torch.tensor([0, 1, 1, 2]))])
    assert float(ours) == pytest.approx(skm.f1_score([0, 1, 1, 2], [0, 2, 1, 1],
                                                     average="macro"))


def test_pickle_clone_and_state_dict() -> None:
    batches = _batches("multiclass", seed=14)
    m = metricc.compile("fbeta", beta=2.0).metric(mode="multiclass", num_classes=C)
    m.update(*batches[0])
    restored = pickle.loads(pickle.dumps(m))
    clone = copy.deepcopy(m)
    for other in (m, restored, clone):
        for p, t in batches[1:]:
            other.update(p, t)
    assert torch.equal(m.compute(), restored.compute())
    assert torch.equal(m.compute(), clone.compute())
    ref = _run(tmc.MulticlassFBetaScore(beta=2.0, num_classes=C), batches)
    _close(m.compute(), ref)
    assert "fbeta" in repr(m) and "multiclass" in repr(m)


def test_compute_before_update() -> None:
    m = metricc.compile("f1").metric(multidim_average="samplewise")
    with pytest.warns(UserWarning, match="before the ``update``"), \
            pytest.raises(MetricError, match="update"):
        m.compute()


@pytest.mark.parametrize(("options", "match"), [
    ({"mode": "multiclass"}, "num_classes"),
    ({"mode": "multiclass", "num_classes": 1}, "num_classes"),
    ({"mode": "binary", "num_classes": 3}, "num_classes"),
    ({"average": "samples"}, "average"),
    ({"multidim_average": "batch"}, "multidim_average"),
    ({"absent_classes": "drop"}, "absent_classes"),
    ({"threshold": 2.0}, "threshold"),
    ({"zero_division": "warn"}, "zero_division"),
    ({"from_logits": 1}, "from_logits"),
    ({"mode": "multiclass", "num_classes": 3, "average": "micro"}, "K x K|TN"),
    ({"mode": "multiclass", "num_classes": 3, "classes": [4]}, "classes"),
])
def test_bad_options_raise_metric_errors(options: dict, match: str) -> None:
    name = "mcc" if options.get("average") == "micro" else "f1"  # micro of a TN metric
    with pytest.raises(MetricError, match=match):
        metricc.compile(name).metric(**options)


@pytest.mark.parametrize(("options", "preds", "target", "match"), [
    ({}, torch.tensor([0.2, 1.5]), torch.tensor([0, 1]), "outside"),
    ({}, torch.tensor([0.2, float("nan")]), torch.tensor([0, 1]), "NaN"),
    ({}, torch.tensor([0.2, 0.5]), torch.tensor([0, 2]), "0 and 1"),
    ({}, torch.tensor([0.2, 0.5]), torch.tensor([0, 1, 1]), "same shape"),
    ({}, [0.2], torch.tensor([0]), "tensors"),
    ({"mode": "multiclass", "num_classes": 3}, torch.rand(4, 3), torch.tensor([0, 1, 2, 3]),
     "class indices"),
    ({"mode": "multiclass", "num_classes": 3}, torch.rand(4, 2), torch.tensor([0, 1, 1, 0]),
     "num_classes"),
    ({"mode": "multilabel", "num_classes": 3}, torch.rand(4, 2), torch.zeros(4, 2), r"\(N, 3"),
])
def test_bad_batches_raise_metric_errors(options, preds, target, match) -> None:
    m = metricc.compile("f1").metric(**options)
    with pytest.raises(MetricError, match=match):
        m.update(preds, target)


def test_missing_torchmetrics_is_a_metric_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchmetrics", None)
    monkeypatch.delitem(sys.modules, "metricc.evaluate.stateful", raising=False)
    # an imported submodule is also an attribute of its package, which `from . import` reads
    monkeypatch.delattr(importlib.import_module("metricc.evaluate"), "stateful", raising=False)
    with pytest.raises(MetricError, match=r"pip install 'metricc\[torchmetrics\]'"):
        metricc.compile("f1").metric()


@pytest.mark.parametrize("average", ["micro", "macro", "weighted"])
def test_jaccard_ignore_index_of_a_real_class_is_ignore_plus_classes(average: str) -> None:
    """torchmetrics' JaccardIndex (not its F1Score) also drops an ignored *class* from averages.

    metricc keeps the two apart: ``ignore_index`` drops elements, ``classes`` picks classes.
    """
    batches = _batches("multiclass", seed=15)
    ref = _run(tmc.MulticlassJaccardIndex(num_classes=C, average=average, ignore_index=0),
               batches)
    ours = _run(metricc.compile("jaccard").metric(
        mode="multiclass", num_classes=C, average=average, ignore_index=0,
        classes=list(range(1, C))), batches)
    _close(ours, ref)
