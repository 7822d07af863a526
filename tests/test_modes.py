"""Multiclass, multilabel and segmentation losses: modes, averages, absent classes.

Every loss is checked against a straightforward float64 implementation
(``tests/oracles.py``: four products per count, Python loops over samples and
classes, autograd for the gradient); every hard score against scikit-learn.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from oracles import EPS, F64, reference_loss
from oracles import MODE_METRICS as METRICS
from sklearn import metrics as skm

import metricc
from metricc import MetricError


def make_batch(mode, spatial, rng, *, from_logits, ignore_index, c=4, n=3):
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    if mode == "binary":
        logits = torch.randn((n, *spatial), generator=gen, dtype=F64) * 2
        x = logits if from_logits else torch.sigmoid(logits)
        target = (torch.rand((n, *spatial), generator=gen) < 0.35).to(F64)
    elif mode == "multilabel":
        logits = torch.randn((n, c, *spatial), generator=gen, dtype=F64) * 2
        x = logits if from_logits else torch.sigmoid(logits)
        target = (torch.rand((n, c, *spatial), generator=gen) < 0.3).to(F64)
        target[:, -1] = 0  # one label never present in the target
    else:
        logits = torch.randn((n, c, *spatial), generator=gen, dtype=F64) * 2
        x = logits if from_logits else torch.softmax(logits, 1)
        # class c-1 never appears in the target, though it may be predicted
        target = torch.randint(0, c - 1, (n, *spatial), generator=gen)
    if ignore_index is not None:
        drop = torch.rand(target.shape, generator=gen) < 0.2
        target = torch.where(drop, torch.full_like(target, ignore_index), target)
    return x.requires_grad_(True), target


def graph_node_types(t):
    seen, stack, names = set(), [t.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node))
        stack.extend(fn for fn, _ in node.next_functions)
    return names


SPATIAL = {0: (), 1: (5,), 2: (3, 4), 3: (2, 3, 2)}


@pytest.mark.parametrize("ndim", sorted(SPATIAL))
@pytest.mark.parametrize("multidim_average", ["global", "samplewise"])
@pytest.mark.parametrize(
    "mode,average",
    [("binary", "macro")]
    + [(m, a) for m in ("multiclass", "multilabel")
       for a in ("micro", "macro", "weighted", "none")],
)
def test_loss_matches_reference(mode, average, multidim_average, ndim):
    """Value and input gradient of every mode x average x counting agree in float64."""
    rng = random.Random(f"{mode}{average}{multidim_average}{ndim}")
    for name in METRICS:
        if mode == "multiclass" and average == "micro" and name in ("accuracy", "fpr"):
            # TN-dependent metrics: refused, pointing to the K x K metric (test_matrix.py)
            with pytest.raises(MetricError, match="average='micro' in multiclass mode"):
                metricc.compile(name, **METRICS[name][0]).loss(mode=mode, average=average)
            continue
        for reduction in ("mean", "sum", "none"):
            opts = {
                "relaxation": rng.choice(["linear", "anyloss"]),
                "from_logits": rng.random() < 0.5,
                "ignore_index": rng.choice([None, -1 if mode != "multiclass" else 0]),
            }
            if mode != "binary":
                if rng.random() < 0.5:
                    opts["classes"] = [3, 0, 2] if rng.random() < 0.5 else [1]
                if average != "none" and rng.random() < 0.5:
                    opts["class_weights"] = [0.5, 2.0, 1.0, 3.0]
            x, target = make_batch(mode, SPATIAL[ndim], rng, from_logits=opts["from_logits"],
                                   ignore_index=opts["ignore_index"])
            common = {"mode": mode, "average": average, "multidim_average": multidim_average,
                      "reduction": reduction, **opts}
            expected = reference_loss(name, x, target, **common)
            (g_ref,) = torch.autograd.grad(expected.sum(), x)
            relaxation = common.pop("relaxation")
            metric = metricc.compile(name, **METRICS[name][0])
            got = {}
            for backward in ("symbolic", "autograd"):
                loss = metric.loss(relaxation, backward=backward, **common)
                out = loss(x, target)
                assert out.shape == expected.shape, (name, common)
                torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
                # the symbolic backward is one of the metric's own autograd.Functions (the
                # multiclass softmax one on class indices: logit_grad)
                nodes = {type(loss)._function._backward_cls,
                         type(loss)._softmax_eager._backward_cls}
                assert bool(nodes & graph_node_types(out)) == (backward == "symbolic")
                (got[backward],) = torch.autograd.grad(out.sum(), x)
                torch.testing.assert_close(got[backward], g_ref, rtol=1e-9, atol=1e-12)
            assert torch.isfinite(got["symbolic"]).all()


# --------------------------------------------------------------------------------------------
# Dice equals the usual soft Dice loss (MONAI DiceLoss, smp DiceLoss)
# --------------------------------------------------------------------------------------------
def monai_soft_dice(logits, target, *, batch, smooth_nr=0.0, smooth_dr=EPS):
    """MONAI ``DiceLoss(softmax=True, to_onehot_y=True, batch=batch)``, written out."""
    prob = torch.softmax(logits, 1)
    onehot = F.one_hot(target, logits.shape[1]).permute(0, 3, 1, 2).to(prob.dtype)
    dims = [0, 2, 3] if batch else [2, 3]
    intersection = (prob * onehot).sum(dims)
    denominator = onehot.sum(dims) + prob.sum(dims)
    return (1.0 - (2.0 * intersection + smooth_nr) / (denominator + smooth_dr)).mean()


def smp_soft_dice(logits, target, eps=EPS):
    """segmentation_models_pytorch ``DiceLoss("multiclass", smooth=0)``, written out."""
    n, c = logits.shape[:2]
    prob = torch.softmax(logits, 1).view(n, c, -1)
    onehot = F.one_hot(target.view(n, -1), c).permute(0, 2, 1).to(prob.dtype)
    intersection = (prob * onehot).sum((0, 2))
    cardinality = (prob + onehot).sum((0, 2))
    score = (2.0 * intersection) / cardinality.clamp_min(eps)
    mask = (onehot.sum((0, 2)) > 0).to(score.dtype)
    return ((1.0 - score) * mask).mean()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dice_linear_is_soft_dice(dtype):
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(2, 4, 16, 16, generator=gen, dtype=dtype) * 3
    target = torch.randint(0, 4, (2, 16, 16), generator=gen)
    assert all(len(target[i].unique()) == 4 for i in range(2))  # every class in every image
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == F64 else {"rtol": 1e-6, "atol": 1e-6}
    dice = metricc.compile("dice")
    for per_image, monai_batch in ((True, False), (False, True)):
        loss = dice.loss("linear", mode="multiclass", from_logits=True,
                         multidim_average="samplewise" if per_image else "global")
        x1 = logits.clone().requires_grad_(True)
        x2 = logits.clone().requires_grad_(True)
        out = loss(x1, target)
        ref = monai_soft_dice(x2, target, batch=monai_batch)
        torch.testing.assert_close(out, ref, **tol)
        out.backward()
        ref.backward()
        torch.testing.assert_close(x1.grad, x2.grad, **tol)
        if not per_image:
            # smp clamps the denominator at eps instead of adding it: O(eps / 512) apart
            torch.testing.assert_close(out, smp_soft_dice(logits, target),
                                       rtol=max(tol["rtol"], 1e-9), atol=max(tol["atol"], 1e-9))


# --------------------------------------------------------------------------------------------
# Scores agree with scikit-learn
# --------------------------------------------------------------------------------------------
SK = {
    "f1": ({}, skm.f1_score, {}),
    "jaccard": ({}, skm.jaccard_score, {}),
    "precision": ({}, skm.precision_score, {}),
    "recall": ({}, skm.recall_score, {}),
    "fbeta": ({"beta": 2.0}, skm.fbeta_score, {"beta": 2.0}),
    "fbeta_half": ({"beta": 0.5}, skm.fbeta_score, {"beta": 0.5}),
}


def _metric(key):
    kwargs = SK[key][0]
    return metricc.compile("fbeta" if key.startswith("fbeta") else key, **kwargs)


def _sk(key, y_true, y_pred, **kw):
    _, fn, extra = SK[key]
    return fn(y_true, y_pred, **extra, **kw)


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float),
                               rtol=0, atol=1e-9)


@pytest.mark.parametrize("spatial", [(), (3, 2)])
def test_multiclass_score_matches_sklearn(spatial):
    rng = np.random.default_rng(0)
    for trial in range(9):  # every combination of ignore_index and classes below
        c = 5
        n = 40
        scores = rng.normal(size=(n, c, *spatial))
        # a skewed target with some class absent; some trials ignore label 1 or 255
        top = 4 if trial % 3 else 5
        target = rng.integers(0, top, size=(n, *spatial))
        if top == 4 and trial % 2 == 0:
            scores[:, 4] -= 10  # class 4: no target and no prediction
        ignore = [None, 255, 1][trial % 3]
        if ignore == 255:
            target[rng.random(target.shape) < 0.25] = 255
        classes = [None, [0, 2, 4], [4, 1]][trial // 3]
        pred = scores.argmax(1)
        keep = np.ones(target.shape, bool) if ignore is None else target != ignore
        yt, yp = target[keep].ravel(), pred[keep].ravel()
        for key in SK:
            m = _metric(key)
            for average in ("micro", "macro", "weighted", "none"):
                for zd in (0.0, 1.0):
                    got = m.score(torch.from_numpy(scores), torch.from_numpy(target),
                                  mode="multiclass", average=average, ignore_index=ignore,
                                  classes=classes, zero_division=zd)
                    labels = list(range(c)) if classes is None else classes
                    if average in ("macro", "weighted"):
                        # the policy: classes with neither target nor prediction sit out,
                        # which is scikit-learn's default label set
                        present = set(yt) | set(yp)
                        labels = [k for k in labels if k in present]
                    avg = None if average == "none" else average
                    want = _sk(key, yt, yp, average=avg, labels=labels, zero_division=zd)
                    _close(got, want)


@pytest.mark.parametrize("spatial", [(), (2, 3)])
def test_multilabel_score_matches_sklearn(spatial):
    rng = np.random.default_rng(1)
    for trial in range(12):
        n, c = 30, 4
        probs = rng.random((n, c, *spatial))
        target = (rng.random((n, c, *spatial)) < 0.3).astype(np.int64)
        target[:, 3] = 0  # label 3 never true
        if trial % 2:
            probs[:, 3] = 0.1  # ... and never predicted: absent
        # whole samples ignored, so scikit-learn can drop them
        ignore = -1 if trial % 3 == 0 else None
        dropped = np.zeros(n, bool)
        if ignore is not None:
            dropped = rng.random(n) < 0.3
            target[dropped] = ignore
        classes = None if trial < 6 else [3, 0, 1]

        def flat(a, rows=~dropped, c=c):
            return np.moveaxis(a[rows], 1, -1).reshape(-1, c)

        yt, yp = flat(target), flat((probs >= 0.5).astype(np.int64))
        for key in SK:
            m = _metric(key)
            for average in ("micro", "macro", "weighted", "none"):
                got = m.score(probs, target, mode="multilabel", average=average,
                              ignore_index=ignore, classes=classes, zero_division=0.0)
                labels = list(range(c)) if classes is None else classes
                if average in ("macro", "weighted"):
                    labels = [k for k in labels if yt[:, k].any() or yp[:, k].any()]
                avg = None if average == "none" else average
                _close(got, _sk(key, yt, yp, average=avg, labels=labels, zero_division=0.0))


def test_multilabel_score_elementwise_ignore_matches_sklearn():
    """Ignoring single (element, label) entries: each label scored on its kept entries."""
    rng = np.random.default_rng(2)
    n, c = 50, 3
    probs = rng.random((n, c))
    target = (rng.random((n, c)) < 0.4).astype(np.int64)
    target[rng.random((n, c)) < 0.2] = -1
    pred = (probs >= 0.5).astype(np.int64)
    keep = target != -1
    for key in SK:
        m = _metric(key)
        per = [_sk(key, target[keep[:, k], k], pred[keep[:, k], k], zero_division=0.0)
               for k in range(c)]
        support = np.array([(target[:, k] == 1).sum() for k in range(c)])
        got = m.score(probs, target, mode="multilabel", average="none", ignore_index=-1,
                      zero_division=0.0)
        _close(got, per)
        _close(m.score(probs, target, mode="multilabel", average="macro", ignore_index=-1,
                       zero_division=0.0), np.mean(per))
        _close(m.score(probs, target, mode="multilabel", average="weighted", ignore_index=-1,
                       zero_division=0.0), np.average(per, weights=support))
        # micro: every kept entry of every label in one binary problem
        _close(m.score(probs, target, mode="multilabel", average="micro", ignore_index=-1,
                       zero_division=0.0), _sk(key, target[keep], pred[keep], zero_division=0.0))


def test_score_with_integer_preds_and_one_hot_target():
    rng = np.random.default_rng(3)
    pred = rng.integers(0, 3, 25)
    target = rng.integers(0, 3, 25)
    f1 = metricc.compile("f1")
    onehot = np.eye(3, dtype=np.int64)[target]
    for average in ("micro", "macro", "weighted"):
        want = skm.f1_score(target, pred, average=average)
        _close(f1.score(pred, target, mode="multiclass", num_classes=3, average=average), want)
        scores = np.eye(3)[pred]
        _close(f1.score(scores, onehot, mode="multiclass", average=average), want)


def test_class_weights_in_score():
    rng = np.random.default_rng(4)
    scores = rng.normal(size=(60, 3))
    target = rng.integers(0, 3, 60)
    m = metricc.compile("jaccard")
    per = skm.jaccard_score(target, scores.argmax(1), average=None)
    w = [1.0, 0.0, 3.0]
    _close(m.score(scores, target, mode="multiclass", class_weights=w), np.average(per, weights=w))
    cm = skm.multilabel_confusion_matrix(target, scores.argmax(1))  # (C, 2, 2): tn fp / fn tp
    tp, fp, fn = (np.dot(w, cm[:, i, j]) for i, j in ((1, 1), (0, 1), (1, 0)))
    _close(m.score(scores, target, mode="multiclass", average="micro", class_weights=w),
           tp / (tp + fp + fn))


def test_binary_score_with_ignore_index():
    rng = np.random.default_rng(5)
    probs = rng.random(40)
    target = (rng.random(40) < 0.4).astype(np.int64)
    target[:7] = 255
    keep = target != 255
    f1 = metricc.compile("f1")
    want = skm.f1_score(target[keep], probs[keep] >= 0.5)
    _close(f1.score(probs, target, ignore_index=255), want)
    _close(f1.score(probs[keep], target[keep]), want)  # the binary path is unchanged


# --------------------------------------------------------------------------------------------
# The absent-class policy
# --------------------------------------------------------------------------------------------
def test_absent_class_sits_out_of_macro_average():
    """A class with no target and no prediction leaves the mean; it does not pin it at 1."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 8, 8, generator=gen, dtype=F64)
    logits[:, 2] -= 10  # class 2 never predicted ...
    target = torch.randint(0, 2, (2, 8, 8), generator=gen)  # ... nor present
    dice = metricc.compile("dice")
    for md in ("global", "samplewise"):
        full = dice.loss("linear", mode="multiclass", from_logits=True, multidim_average=md)
        only = dice.loss("linear", mode="multiclass", from_logits=True, multidim_average=md,
                         classes=[0, 1])
        torch.testing.assert_close(full(logits, target), only(logits, target))
    # predicted (argmax) somewhere without target: it takes part, with its loss of ~1
    logits[0, 2, 0, 0] = 20
    full = dice.loss("linear", mode="multiclass", from_logits=True)
    per = dice.loss("linear", mode="multiclass", from_logits=True, average="none")(logits, target)
    torch.testing.assert_close(full(logits, target), per.mean())
    assert per[2] > 0.99


def test_empty_images_sit_out_of_samplewise_mean():
    """smp per_image / MONAI batch=False with an empty mask that is predicted empty."""
    x = torch.full((3, 6, 6), 0.1, dtype=F64)
    target = torch.zeros(3, 6, 6, dtype=F64)
    target[0, :3] = 1
    x[0, :3] = 0.8
    target[1, 2:] = 1
    x[1, 1:] = 0.7
    # image 2: empty target, nothing predicted (soft scores 0.1)
    loss = metricc.compile("dice").loss("linear", multidim_average="samplewise",
                                        reduction="none")
    per = loss(x, target)
    assert per[2] > 0.99  # the metric itself is 0 there ...
    mean = metricc.compile("dice").loss("linear", multidim_average="samplewise")(x, target)
    torch.testing.assert_close(mean, per[:2].mean())  # ... but it does not enter the mean
    summed = metricc.compile("dice").loss("linear", multidim_average="samplewise",
                                          reduction="sum")(x, target)
    torch.testing.assert_close(summed, per[:2].sum())


@pytest.mark.parametrize("mode", ["binary", "multiclass", "multilabel"])
@pytest.mark.parametrize("md", ["global", "samplewise"])
def test_everything_ignored_is_finite(mode, md):
    shape = (2, 3, 4, 4) if mode != "binary" else (2, 4, 4)
    x = torch.rand(shape, dtype=F64, requires_grad=True)
    target = torch.full(shape if mode != "multiclass" else (2, 4, 4), -1, dtype=torch.long)
    for name in ("dice", "mcc", "accuracy"):
        for average in ("micro", "macro", "weighted", "none"):
            if mode == "multiclass" and average == "micro" and name != "dice":
                continue  # refused: TN-dependent (test_micro_tn_metrics_are_refused)
            loss = metricc.compile(name).loss("linear", mode=mode, average=average,
                                              ignore_index=-1, multidim_average=md)
            out = loss(x, target)
            (g,) = torch.autograd.grad(out.sum(), x)
            assert torch.isfinite(out).all() and torch.isfinite(g).all()
            assert (g == 0).all()  # nothing counted, nothing learnt


def test_no_class_anywhere_falls_back_to_all_classes():
    """All-negative multilabel batch predicted negative: every class is absent."""
    x = torch.full((2, 3, 5), 0.2, dtype=F64, requires_grad=True)
    target = torch.zeros(2, 3, 5, dtype=F64)
    acc = metricc.compile("accuracy").loss("linear", mode="multilabel")
    per = metricc.compile("accuracy").loss("linear", mode="multilabel", average="none")
    out = acc(x, target)
    torch.testing.assert_close(out, per(x, target).mean())
    torch.testing.assert_close(out, torch.tensor(0.2, dtype=F64))
    (g,) = torch.autograd.grad(out, x)
    assert (g > 0).all()  # accuracy still pushes the false-positive mass down
    dice = metricc.compile("dice").loss("linear", mode="multilabel")(x, target)
    assert torch.isfinite(dice) and dice.item() == pytest.approx(1.0)
    # the score has the same fallback: every class evaluated, zero_division decides
    f1 = metricc.compile("f1")
    with pytest.raises(MetricError, match="zero_division"):
        f1.score(x.detach(), target, mode="multilabel")
    assert f1.score(x.detach(), target, mode="multilabel", zero_division=1.0) == 1.0
    assert skm.f1_score(np.zeros((10, 3)), np.zeros((10, 3)), average="macro",
                        zero_division=1.0) == 1.0


@pytest.mark.parametrize("average", ["micro", "macro", "weighted"])
def test_loss_on_hard_predictions_is_one_minus_score(average):
    """Loss and score follow one policy: at 0/1 predictions they agree exactly (up to eps)."""
    rng = np.random.default_rng(6)
    for trial in range(5):
        pred = rng.integers(0, 3, (4, 5, 5))  # class 3 and 4 never predicted
        target = rng.integers(0, 4, (4, 5, 5))  # class 4 absent everywhere
        target[rng.random(target.shape) < 0.2] = 255
        probs = torch.from_numpy(np.eye(5)[pred]).permute(0, 3, 1, 2).contiguous()
        t = torch.from_numpy(target)
        for name in ("f1", "jaccard", "accuracy"):
            if name == "accuracy" and average == "micro":
                continue  # refused: TN-dependent (test_micro_tn_metrics_are_refused)
            m = metricc.compile(name)
            loss = m.loss("linear", mode="multiclass", average=average, ignore_index=255,
                          eps=0.0 if name == "accuracy" else 1e-12)
            score = m.score(probs, t, mode="multiclass", average=average, ignore_index=255,
                            zero_division=0.0)
            assert loss(probs.to(F64), t).item() == pytest.approx(1 - score, abs=1e-9), trial


def test_score_none_reports_every_class():
    f1 = metricc.compile("f1")
    scores = torch.eye(4)[torch.tensor([0, 1, 1, 0])]
    target = torch.tensor([0, 1, 0, 0])
    with pytest.raises(MetricError, match="zero_division"):
        f1.score(scores, target, mode="multiclass", average="none")  # classes 2, 3: 0/0
    got = f1.score(scores, target, mode="multiclass", average="none", zero_division=1.0)
    want = skm.f1_score(target, scores.argmax(1), average=None, labels=[0, 1, 2, 3],
                        zero_division=1.0)
    _close(got, want)
    # in an average the absent classes 2 and 3 sit out, so no zero_division is needed
    _close(f1.score(scores, target, mode="multiclass"), skm.f1_score(target, scores.argmax(1),
                                                                     average="macro"))


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------
def _dice(**kw):
    return metricc.compile("dice").loss("linear", **kw)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"mode": "multi-class"}, "mode="),
        ({"mode": "multiclass", "average": "samples"}, "average="),
        ({"mode": "binary", "classes": [0]}, "mode='binary' has a single class"),
        ({"mode": "multiclass", "classes": [0, 0]}, "twice"),
        ({"mode": "multiclass", "classes": [-1]}, ">= 0"),
        ({"mode": "multiclass", "classes": []}, "empty"),
        ({"mode": "multiclass", "classes": "01"}, "list"),
        ({"mode": "multiclass", "class_weights": [1, -1]}, ">= 0"),
        ({"mode": "multiclass", "class_weights": [1, float("nan")]}, "finite"),
        ({"mode": "multiclass", "average": "none", "class_weights": [1, 1]}, "average='none'"),
        ({"mode": "multiclass", "ignore_index": 1.5}, "ignore_index"),
        ({"mode": "multiclass", "relaxation_": None}, "unknown loss option"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(MetricError, match=match):
        if "relaxation_" in kwargs:
            metricc.compile("dice").loss(**kwargs)
        else:
            _dice(**kwargs)


def test_sigmoid_relaxation_needs_independent_logits():
    with pytest.raises(MetricError, match="multilabel"):
        metricc.compile("dice").loss("sigmoid", from_logits=True, mode="multiclass")
    x = torch.randn(2, 3, 4)
    loss = metricc.compile("dice").loss("sigmoid", from_logits=True, mode="multilabel")
    assert torch.isfinite(loss(x, (x > 0).double()))


@pytest.mark.parametrize(
    "kwargs,x_shape,t_shape,t_dtype,match",
    [
        ({"mode": "multiclass"}, (2, 3, 4), (2, 4), torch.float32, "integer"),
        ({"mode": "multiclass"}, (2, 3, 4), (2, 3), torch.long, r"\(2, 4\).*\(2, 3, 4\)"),
        ({"mode": "multiclass"}, (2,), (2,), torch.long, r"\(N, C, \*\)"),
        ({"mode": "multiclass"}, (2, 1, 4), (2, 4), torch.long, "at least 2 classes"),
        ({"mode": "multiclass", "ignore_index": 0}, (2, 3, 4), (2, 3, 4), torch.float32,
         "one-hot"),
        ({"mode": "multilabel"}, (2, 3, 4), (2, 4), torch.float32, "input's shape"),
        ({"mode": "binary"}, (2, 3, 4), (2, 4), torch.float32, "same shape"),
        ({"mode": "multiclass", "classes": [3]}, (2, 3, 4), (2, 4), torch.long,
         "class 3, but the input has 3 classes"),
        ({"mode": "multiclass", "class_weights": [1, 2]}, (2, 3, 4), (2, 4), torch.long,
         "2 weights but the input has 3 classes"),
        ({"mode": "multiclass", "class_weights": [0, 0, 1], "classes": [0, 1]}, (2, 3, 4),
         (2, 4), torch.long, "all 0"),
    ],
)
def test_bad_shapes(kwargs, x_shape, t_shape, t_dtype, match):
    loss = _dice(**kwargs)
    with pytest.raises(MetricError, match=match):
        loss(torch.rand(x_shape), torch.zeros(t_shape, dtype=t_dtype))


def test_bad_score_inputs():
    f1 = metricc.compile("f1")
    with pytest.raises(MetricError, match="num_classes"):
        f1.score([0, 1], [0, 1], mode="multiclass")
    with pytest.raises(MetricError, match=r"class indices in 0\.\.2"):
        f1.score(torch.rand(3, 3), [0, 5, 1], mode="multiclass")
    with pytest.raises(MetricError, match="only 0 and 1"):
        f1.score(torch.rand(3, 2), [[0, 2], [1, 0], [0, 0]], mode="multilabel")
    with pytest.raises(MetricError, match="mode="):
        f1.score([0, 1], [0, 1], mode="multi")
    with pytest.raises(MetricError, match="single 1"):
        f1.score(torch.rand(2, 3), [[1, 1, 0], [0, 0, 1]], mode="multiclass")


# --------------------------------------------------------------------------------------------
# torch.compile
# --------------------------------------------------------------------------------------------
def test_compiled_multiclass_loss_fullgraph():
    torch._dynamo.reset()
    loss = metricc.compile("tversky", alpha=0.3, beta=0.7).loss(
        "anyloss", mode="multiclass", from_logits=True, ignore_index=255,
        multidim_average="samplewise", average="macro", class_weights=[0.5, 1, 1, 2])
    compiled = torch.compile(loss, fullgraph=True)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 8, 8, generator=gen, requires_grad=True)
    target = torch.randint(0, 3, (2, 8, 8), generator=gen)  # class 3 absent
    target[:, :2] = 255
    eager = loss(x, target)
    (g_eager,) = torch.autograd.grad(eager, x)
    out = compiled(x, target)
    (g_out,) = torch.autograd.grad(out, x)
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g_out, g_eager, rtol=1e-5, atol=1e-6)
    assert math.isfinite(out.item())


def test_micro_tn_metrics_are_refused():
    """One meaning per name: multiclass micro pools one-vs-rest counts whose TN grows with K.

    Micro MCC of the same argmax predictions changes when an unused class channel is
    added; multiclass_mcc (R_K, torchmetrics' multiclass MCC) does not.
    """
    rng = np.random.default_rng(8)
    scores = rng.normal(size=(40, 3))
    target = rng.integers(0, 3, 40)
    wider = np.concatenate([scores, np.full((40, 1), -10.0)], 1)  # an unused class channel
    for name, counterpart in (("mcc", "multiclass_mcc"), ("accuracy", "multiclass_accuracy"),
                              ("cohen_kappa", "multiclass_kappa"), ("specificity", None)):
        m = metricc.compile(name)
        pointer = counterpart or "C\\[i,j\\]"
        with pytest.raises(MetricError, match=pointer):
            m.score(scores, target, mode="multiclass", average="micro")
        with pytest.raises(MetricError, match=pointer):
            m.loss(mode="multiclass", average="micro")
        if counterpart:
            k3 = metricc.compile(counterpart).score(scores, target)
            k4 = metricc.compile(counterpart).score(wider, target)
            assert k3 == pytest.approx(k4, abs=1e-12)
    tm = pytest.importorskip("torchmetrics.functional.classification")
    want = float(tm.multiclass_matthews_corrcoef(torch.from_numpy(scores).argmax(1),
                                                  torch.from_numpy(target), num_classes=3))
    assert metricc.compile("multiclass_mcc").score(scores, target) == pytest.approx(want,
                                                                                    abs=1e-6)
    # TN-free metrics keep their micro meaning (micro F1 is the multiclass accuracy here)
    f1 = metricc.compile("f1").score(scores, target, mode="multiclass", average="micro")
    assert f1 == pytest.approx(metricc.compile("multiclass_accuracy").score(scores, target))


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.8])
@pytest.mark.parametrize("average", ["micro", "macro"])
def test_multilabel_score_threshold_matches_sklearn(threshold: float, average: str) -> None:
    gen = torch.Generator().manual_seed(int(threshold * 10))
    p = torch.rand(40, 3, generator=gen, dtype=F64)
    y = (torch.rand(40, 3, generator=gen) < 0.5).long()
    y[:3] = torch.eye(3, dtype=torch.long)  # every class has a target
    hard = (p >= threshold).long()
    hard[:3] = 1  # and a prediction
    p = torch.where(hard.bool(), torch.clamp(p, min=threshold), torch.clamp(p, max=threshold / 2))
    m = metricc.compile("f1")
    want = skm.f1_score(y.numpy(), hard.numpy(), average=average)
    assert m.score(p, y, threshold, mode="multilabel", average=average) == pytest.approx(want)
    # 0/1 integer predictions: any nonzero label is a positive prediction
    assert m.score(hard, y, mode="multilabel", average=average) == pytest.approx(want)
