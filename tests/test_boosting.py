"""metricc.boosting: compiled metrics as XGBoost / LightGBM objectives and evaluation metrics.

References are independent of the package: soft F1 and soft QWK written out in torch
(differentiated by autograd in float64), scikit-learn's f1_score / matthews_corrcoef /
cohen_kappa_score with sample weights, and the libraries themselves for their calling
conventions (raw margins, base_margin / init_score, (N, K) multiclass shapes).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import metricc
from metricc import MetricError
from metricc.boosting import objective

F1 = metricc.compile("f1")
MCC = metricc.compile("mcc")
QWK = metricc.compile("quadratic_kappa")


def _soft_f1_loss(z: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    p = torch.sigmoid(z)
    tp, fp, fn = (w * y * p).sum(), (w * (1 - y) * p).sum(), (w * y * (1 - p)).sum()
    return w.sum() * (1 - 2 * tp / (2 * tp + fp + fn))


def _soft_qwk_loss(z: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    k = z.shape[1]
    P = torch.softmax(z, 1)
    C = (torch.nn.functional.one_hot(y, k).double() * w[:, None]).T @ P
    i = torch.arange(k, dtype=torch.float64)
    W = (i[:, None] - i[None, :]) ** 2
    n = C.sum()
    expected = C.sum(1)[:, None] * C.sum(0)[None, :] / n
    return w.sum() * (W * C).sum() / (W * expected).sum()  # 1 - kappa


def _autograd(loss, z, y, w):  # type: ignore[no-untyped-def]
    zt = torch.tensor(z, dtype=torch.float64)
    args = (torch.as_tensor(y), torch.as_tensor(w, dtype=torch.float64))
    grad = torch.autograd.functional.jacobian(lambda x: loss(x, *args), zt).numpy()
    hess = torch.autograd.functional.hessian(lambda x: loss(x, *args), zt)
    return grad, torch.diagonal(hess.reshape(z.size, z.size)).reshape(z.shape).numpy()


@settings(max_examples=25, deadline=None)
@given(st.integers(4, 30), st.integers(0, 2**31 - 1), st.booleans())
def test_binary_f1_gradient_and_exact_hessian_equal_autograd_of_soft_f1(n, seed, weighted):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2, n)
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    w = rng.uniform(0.1, 3, n) if weighted else np.ones(n)
    obj = objective(F1, hessian="exact", eps=1e-12)
    grad, hess = obj.grad_hess(z, y, w if weighted else None)
    want_grad, want_hess = _autograd(_soft_f1_loss, z, y.astype(np.float64), w)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(hess, want_hess, rtol=1e-6, atol=1e-9)
    # the default Hessian is the positive surrogate max(exact, |grad|)
    _, positive = objective(F1, eps=1e-12).grad_hess(z, y, w if weighted else None)
    np.testing.assert_array_equal(positive, np.maximum(hess, np.abs(grad)))
    assert (positive > 0).all()


def test_qwk_softprob_gradient_and_exact_hessian_equal_autograd_and_finite_differences():
    rng = np.random.default_rng(3)
    z = rng.normal(0, 1.5, (20, 4))
    y = np.r_[np.arange(4), rng.integers(0, 4, 16)]
    w = rng.uniform(0.2, 2, 20)
    obj = objective(QWK, hessian="exact", eps=1e-12)
    grad, hess = obj.grad_hess(z, y, w)
    want_grad, want_hess = _autograd(_soft_qwk_loss, z, y, w)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(hess, want_hess, rtol=1e-6, atol=1e-9)
    h, i = 1e-5, (7, 2)
    up, down = z.copy(), z.copy()
    up[i] += h
    down[i] -= h
    fd = (obj.loss(up, y, w) - obj.loss(down, y, w)) / (2 * h)
    assert fd == pytest.approx(grad[i], rel=1e-5)


@pytest.mark.parametrize(("metric", "kwargs"), [
    (F1, {}), (MCC, {}), (F1, {"num_classes": 3}), (QWK, {}),
])
def test_verify_checks_gradient_and_hessian(metric, kwargs):
    report = objective(metric, **kwargs).verify(rows=12)
    names = " ".join(c.name for c in report.checks)
    assert report.ok and "Hessian diagonal (weighted) = autograd" in names
    assert "finite differences" in names


def test_kinks_of_abs_and_min_have_a_zero_second_derivative_there_and_verify_elsewhere():
    # d/dx sign(x) is DiracDelta: 0 off the kink, which random margins never hit
    for text in ("1 - abs(FP - FN)/(TP + FP + FN)", "min(TP/(TP + FP), TP/(TP + FN))"):
        assert objective(metricc.compile(text)).verify(rows=10).ok


def test_verify_catches_a_wrong_hessian():
    obj = objective(F1)
    right = obj._run

    def wrong(z, y, w, exact):  # type: ignore[no-untyped-def]
        g, h, v = right(z, y, w, exact)
        return g, h * 1.01, v

    obj._run = wrong  # type: ignore[method-assign]
    with pytest.raises(metricc.VerificationError, match="Hessian"):
        obj.verify(rows=8)


@pytest.mark.parametrize("weighted", [False, True])
def test_eval_metric_equals_score_and_sklearn(weighted):
    from sklearn.metrics import cohen_kappa_score, f1_score, matthews_corrcoef

    rng = np.random.default_rng(1)
    z = rng.normal(0, 1, 200)
    y = (rng.random(200) < 0.3).astype(int)
    w = rng.uniform(0.5, 2, 200) if weighted else None
    pred = (z >= 0).astype(int)
    for metric, ref in ((F1, f1_score), (MCC, matthews_corrcoef)):
        got = objective(metric).score(z, y, w)
        assert got == pytest.approx(ref(y, pred, sample_weight=w), abs=1e-12)
        if not weighted:
            assert got == pytest.approx(metric.score(1 / (1 + np.exp(-z)), y), abs=1e-12)
    Z = rng.normal(0, 1, (200, 5))
    k = rng.integers(0, 5, 200)
    got = objective(QWK).score(Z, k, w)
    assert got == pytest.approx(cohen_kappa_score(k, Z.argmax(1), weights="quadratic",
                                                  sample_weight=w), abs=1e-12)
    ovr = objective(F1, num_classes=5).score(Z, k, w)
    assert ovr == pytest.approx(f1_score(k, Z.argmax(1), average="macro", sample_weight=w),
                                abs=1e-12)
    if not weighted:
        assert got == pytest.approx(QWK.score(Z, k))
        assert ovr == pytest.approx(F1.score(Z, k, mode="multiclass", num_classes=5))


def test_a_class_missing_from_the_round_keeps_everything_finite():
    rng = np.random.default_rng(2)
    Z = rng.normal(0, 1, (30, 4))
    y = rng.integers(0, 3, 30)  # class 3 has no row
    for obj in (objective(QWK), objective(F1, num_classes=4), objective(metricc.compile(
            "multiclass_mcc"))):
        grad, hess = obj.grad_hess(Z, y)
        assert np.isfinite(grad).all() and np.isfinite(hess).all() and (hess >= 0).all()
        assert np.isfinite(obj.score(Z, y))
    grad, _ = objective(F1).grad_hess(rng.normal(0, 1, 10), np.zeros(10))  # no positive
    assert np.isfinite(grad).all()


@pytest.mark.parametrize(("make", "args", "match"), [
    (lambda: objective(F1), (np.array([np.nan, 0.0]), [0, 1]), "NaN"),
    (lambda: objective(F1), (np.zeros(3), [0, 2, 1]), "0/1 labels"),
    (lambda: objective(F1), (np.zeros((3, 3)), [0, 2, 1]), "num_classes"),
    (lambda: objective(F1), (np.zeros(3), [0, 1]), "labels"),
    (lambda: objective(F1), (np.zeros(3), [0, 1, 1], [1, -1, 1]), "weights"),
    (lambda: objective(F1), (np.zeros(3), [0, 1, 1], [1, 1]), "sample weights"),
    (lambda: objective(QWK), (np.zeros(3), [0, 1, 1]), r"\(N, K\)"),
    (lambda: objective(QWK), (np.zeros((3, 3)), [0, 1, 3]), "class indices"),
    (lambda: objective(F1, num_classes=4), (np.zeros((3, 3)), [0, 1, 2]), "num_class"),
])
def test_bad_input_is_a_metric_error(make, args, match):
    with pytest.raises(MetricError, match=match):
        make().grad_hess(*args)


def test_objective_pickles_with_the_estimators_that_hold_it():
    import pickle

    obj = objective(QWK)
    Z = np.random.default_rng(4).normal(0, 1, (12, 3))
    y = np.arange(12) % 3
    want = obj.grad_hess(Z, y)  # kernels built
    again = pickle.loads(pickle.dumps(obj.sklearn))  # a bound method, as estimators hold it
    for a, b in zip(again(y, Z), want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert "quadratic_kappa" in repr(again.__self__)


def test_bad_options_are_metric_errors():
    with pytest.raises(MetricError, match="hessian"):
        objective(F1, hessian="newton")
    with pytest.raises(MetricError, match="num_classes"):
        objective(F1, num_classes=1)
    with pytest.raises(MetricError, match="curve"):
        objective(metricc.compile("auroc"))
    with pytest.raises(MetricError, match="constraints"):
        objective(metricc.compile("precision subject to recall >= 0.8"))
    assert metricc.BoostObjective is metricc.boosting.BoostObjective


def _imbalanced(n=400, seed=0):  # type: ignore[no-untyped-def]
    from sklearn.datasets import make_classification

    return make_classification(n, 6, weights=[0.85], random_state=seed)


def test_xgboost_native_margins_weights_base_margin_and_early_stopping():
    xgb = pytest.importorskip("xgboost")
    X, y = _imbalanced()
    w = np.random.default_rng(0).uniform(0.5, 2, len(y))
    obj = objective(F1)
    seen = []

    def spy(predt, dtrain):  # type: ignore[no-untyped-def]
        seen.append(np.array(predt))
        return obj.xgboost(predt, dtrain)

    base = np.full(len(y), -0.4)
    d = xgb.DMatrix(X, y, weight=w, base_margin=base)
    log: dict = {}
    booster = xgb.train({"max_depth": 2, "eta": 0.3, "nthread": 1}, d, 30, obj=spy,
                        custom_metric=obj.xgboost_metric, maximize=obj.maximize,
                        evals=[(d, "train")], evals_result=log, early_stopping_rounds=5,
                        verbose_eval=False)
    np.testing.assert_allclose(seen[0], base, rtol=1e-6)  # raw margins (float32), base_margin included
    margin = booster.predict(d, output_margin=True)
    from sklearn.metrics import f1_score

    assert log["train"]["f1"][-1] == pytest.approx(
        f1_score(y, margin >= 0, sample_weight=w), abs=1e-6)  # the library logs float32
    assert max(log["train"]["f1"]) == log["train"]["f1"][booster.best_iteration]
    assert log["train"]["f1"][-1] > log["train"]["f1"][0]


def test_xgboost_sklearn_api_binary_and_multiclass_shapes():
    xgb = pytest.importorskip("xgboost")
    X, y = _imbalanced()
    obj = objective(MCC)
    clf = xgb.XGBClassifier(n_estimators=5, max_depth=2, objective=obj.sklearn,
                            eval_metric=obj.xgboost_sklearn_metric, n_jobs=1)
    clf.fit(X, y, sample_weight=np.ones(len(y)), eval_set=[(X, y)], verbose=False)
    margin = clf.predict(X, output_margin=True)
    assert clf.evals_result()["validation_0"]["mcc"][-1] == pytest.approx(obj.score(margin, y), abs=1e-6)
    k = np.random.default_rng(0).integers(0, 4, len(y))
    shapes = []
    qwk = objective(QWK)
    clf = xgb.XGBClassifier(n_estimators=3, max_depth=2, n_jobs=1, objective=lambda t, p: (
        shapes.append(p.shape), qwk.sklearn(t, p))[1])
    clf.fit(X, k)
    assert shapes[0] == (len(y), 4)


def test_lightgbm_native_and_sklearn_init_score_and_multiclass():
    lgb = pytest.importorskip("lightgbm")
    X, y = _imbalanced()
    obj = objective(F1)
    seen = []

    def spy(preds, data):  # type: ignore[no-untyped-def]
        seen.append(np.array(preds))
        return obj.lightgbm(preds, data)

    init = np.full(len(y), 0.25)
    ds = lgb.Dataset(X, y, init_score=init)
    log: dict = {}
    booster = lgb.train({"objective": spy, "verbose": -1, "num_threads": 1, "num_leaves": 4}, ds,
                        5, valid_sets=[ds], feval=obj.lightgbm_metric,
                        callbacks=[lgb.record_evaluation(log)])
    np.testing.assert_allclose(seen[0], init, rtol=1e-6)  # raw scores, init_score included
    margin = booster.predict(X, raw_score=True) + init
    assert log["training"]["f1"][-1] == pytest.approx(obj.score(margin, y))
    k = np.random.default_rng(0).integers(0, 3, len(y))
    qwk = objective(QWK)
    shapes = []
    c = lgb.LGBMClassifier(n_estimators=3, num_leaves=4, verbose=-1, n_jobs=1, objective=lambda t, p: (
        shapes.append(p.shape), qwk.sklearn(t, p))[1])
    c.fit(X, k, eval_set=[(X, k)], eval_metric=qwk.lightgbm_sklearn_metric)
    assert shapes[0] == (len(y), 3)
    raw = c.predict(X, raw_score=True)
    assert c.evals_result_["training"]["quadratic_kappa"][-1] == pytest.approx(qwk.score(raw, k))
