"""One signature for users: score() and metric() of every statistic take the same names for
the same things (mode, num_classes with torchmetrics' num_labels, average, ignore_index,
from_logits, threshold where it means something); an option that does not apply is a
MetricError saying why."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

import metricc

RNG = np.random.default_rng(0)


def _multilabel(n: int = 60, c: int = 3) -> tuple[np.ndarray, np.ndarray]:
    y = (RNG.random((n, c)) < 0.4).astype(int)
    return y * 0.5 + RNG.random((n, c)), y


def test_curve_score_takes_mode_and_checks_it_against_the_shapes() -> None:
    m = metricc.compile("auroc")
    s, y = RNG.random(40), (RNG.random(40) < 0.5).astype(int)
    assert m.score(s, y, mode="binary") == m.score(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    with pytest.raises(metricc.MetricError, match=r"mode='multiclass' takes \(N, C\) scores"):
        m.score(s, y, mode="multiclass")
    with pytest.raises(metricc.MetricError, match="did you mean 'multilabel'"):
        m.score(s, y, mode="multilable")


def test_curve_score_ranks_multiclass_logits_by_their_softmax() -> None:
    logits = RNG.normal(size=(80, 4)) * 3
    y = np.arange(80) % 4
    prob = torch.softmax(torch.from_numpy(logits), 1).numpy()
    ours = metricc.compile("auroc").score(logits, y, from_logits=True, num_classes=4)
    assert ours == pytest.approx(roc_auc_score(y, prob, multi_class="ovr"), abs=1e-12)
    # binary logits rank as their sigmoids: nothing changes
    s, yb = RNG.normal(size=30), np.arange(30) % 2
    assert metricc.compile("average_precision").score(s, yb, from_logits=True) == pytest.approx(
        average_precision_score(yb, s), abs=1e-12)


def test_curve_score_ignore_index_leaves_elements_out() -> None:
    m = metricc.compile("average_precision")
    s, y = RNG.random(50), (RNG.random(50) < 0.4).astype(int)
    y[::7] = -1
    keep = y != -1
    assert m.score(s, y, ignore_index=-1) == pytest.approx(average_precision_score(y[keep], s[keep]), abs=1e-12)
    sm, ym = _multilabel()
    ym[::5, 1] = 255
    want = [average_precision_score(ym[ym[:, c] != 255, c], sm[ym[:, c] != 255, c]) for c in range(3)]
    got = m.score(sm, ym, ignore_index=255, average=None, num_labels=3)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert m.score(sm, ym, ignore_index=255) == pytest.approx(np.mean(want), abs=1e-12)
    pos = [(ym[:, c] == 1).sum() for c in range(3)]
    assert m.score(sm, ym, ignore_index=255, average="weighted") == pytest.approx(
        np.average(want, weights=pos), abs=1e-12)


@pytest.mark.parametrize("name", ["auroc", "best_f1"])
def test_curve_score_refuses_a_threshold_and_a_wrong_size(name: str) -> None:
    m = metricc.compile(name, **({"min_precision": 0.5} if name == "recall_at_precision" else {}))
    s, y = _multilabel()
    with pytest.raises(metricc.MetricError, match=r"threshold=0\.5 does not apply to a curve metric"):
        m.score(s[:, 0], y[:, 0], threshold=0.5)
    with pytest.raises(metricc.MetricError, match="num_classes=4 but preds have 3 columns"):
        m.score(s, y, num_classes=4)


def test_num_labels_is_num_classes_in_every_statistic() -> None:
    s, y = _multilabel()
    f1 = metricc.compile("f1")
    assert f1.score(s > 0.7, y, mode="multilabel", num_labels=3) == f1.score(s > 0.7, y, mode="multilabel",
                                                                             num_classes=3)
    a = f1.metric(mode="multilabel", num_labels=3)
    b = f1.metric(mode="multilabel", num_classes=3)
    for mm in (a, b):
        mm.update(torch.from_numpy(s).float().clamp(0, 1), torch.from_numpy(y))
    assert float(a.compute()) == float(b.compute())
    auroc = metricc.compile("auroc")
    a, b = auroc.metric(mode="multilabel", num_labels=3), auroc.metric(mode="multilabel", num_classes=3)
    for mm in (a, b):
        mm.update(torch.from_numpy(s), torch.from_numpy(y))
    assert float(a.compute()) == float(b.compute())
    qwk = metricc.compile("quadratic_kappa")
    labels = np.arange(40) % 4
    assert qwk.score(labels, labels[::-1], num_labels=4) == qwk.score(labels, labels[::-1], num_classes=4)
    for m, kw in ((f1, {"mode": "multilabel"}), (auroc, {}), (qwk, {})):
        with pytest.raises(metricc.MetricError, match="name the same thing"):
            m.score(s if m is not qwk else labels, y if m is not qwk else labels, num_classes=3,
                    num_labels=4, **kw)


def test_a_kxk_score_refuses_what_does_not_apply_and_accepts_logits() -> None:
    qwk = metricc.compile("quadratic_kappa")
    logits = torch.randn(30, 4)
    y = torch.arange(30) % 4
    assert qwk.score(logits, y, from_logits=True) == qwk.score(logits.softmax(1), y)
    with pytest.raises(metricc.MetricError, match=r"threshold=0\.5 does not apply to a K x K metric"):
        qwk.score(logits, y, threshold=0.5)
    with pytest.raises(metricc.MetricError, match="average='macro' does not apply to a K x K metric"):
        qwk.metric(num_classes=4, average="macro")
    with pytest.raises(metricc.MetricError, match="mode='binary' does not apply"):
        qwk.metric(num_classes=4, mode="binary")
