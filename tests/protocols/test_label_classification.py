"""Labels-only vertical classification over several classes (``estimators/label_classification.py``,
``algorithms/vertical/label_multiclass.py``): one k-ary randomized-response release, one-vs-rest ADMM sharing on
it (post-processing), the label party's multinomial recalibration on its exact labels.

Tolerances: seeded, so deterministic; the stated false-failure rate is for a fresh seed — a z-score of 5 (5.7e-7)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from dpadmm import LabelPrivateVerticalClassifier, VerticalLogisticRegression
from dpadmm.algorithms.vertical.label_multiclass import refit_multiclass_label_block, release_class_labels
from dpadmm.exceptions import InvalidDataError, InvalidParameterError
from dpadmm.experiments.audit_games_label_rr import _change_at_double_epsilon
from dpadmm.privacy import label_mechanisms as lm
from dpadmm.privacy.events import LABEL_CHANGE, PureDPRelease

Z = 5.0
ABC = ["ant", "bee", "cat"]  # the classes, declared (a private fit's K is not read off the labels)


def _data(n=2000, seed=0, signal2=2.0):
    """Three classes; party 2's columns carry most of the signal (weight ``signal2``), the label party's a little."""
    rng = np.random.default_rng(seed)
    X1, X2 = rng.normal(size=(n, 2)), rng.normal(size=(n, 3))
    S = np.column_stack([0.5 * X1[:, 0] + signal2 * X2[:, 0], -0.5 * X1[:, 1] + signal2 * X2[:, 1],
                         signal2 * X2[:, 2]])
    y = np.array(["ant", "bee", "cat"])[np.argmax(S + rng.gumbel(size=S.shape), axis=1)]
    return X1, X2, y


def _fit(est, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(*args)


def test_the_release_epsilon_recomputes_from_the_draws():
    """ε̂ = ln(p̂(K − 1)/(1 − p̂)) from the keep rate p̂ of the label party's release, within 5 delta-method SEs."""
    k, eps, n = 4, 1.0, 200_000
    y = np.random.default_rng(5).integers(0, k, size=n)
    out, events = release_class_labels(y, k, eps, random_state=11)
    assert events == [PureDPRelease("party1", 0, eps, LABEL_CHANGE)]
    p = float(np.mean(out == y))
    se = 1.0 / math.sqrt(n * p * (1.0 - p))
    assert abs(math.log(p * (k - 1) / (1.0 - p)) - eps) < Z * se


def test_label_epsilon_is_the_release_and_the_one_vs_rest_fits_are_post_processing():
    X1, X2, y = _data(1500)
    est = _fit(LabelPrivateVerticalClassifier(label_epsilon=0.7, random_state=3, classes=ABC), [X1, X2], y)
    assert est.privacy_["label"] == {"epsilon": 0.7, "delta": 0.0, "relation": LABEL_CHANGE.key,
                                     "mechanism": "k-ary randomized response (one release)", "events": 1}
    assert list(est.classes_) == ["ant", "bee", "cat"] and len(est.joint_) == 3 and est.n_iter_.shape == (3,)
    released, _ = release_class_labels(np.unique(y, return_inverse=True)[1], 3, 0.7, random_state=3)
    for k, fit_k in enumerate(est.joint_):  # what the passive party holds: a function of the release alone
        ref = _fit(VerticalLogisticRegression(random_state=3), [X1, X2], (released == k).astype(int))
        assert np.array_equal(ref.coefs_[1], fit_k.coefs_[1])
    proba = est.predict_proba([X1, X2])
    assert proba.shape == (1500, 3) and np.allclose(proba.sum(axis=1), 1.0)
    assert set(est.predict([X1, X2])) <= set(est.classes_)


def test_zero_noise_equals_the_non_private_pipeline():
    """label ε = ∞ draws no change: the release is y, the one-vs-rest fits are the non-private ones on the exact
    labels and the final model is the label party's refit on them; a huge finite ε draws the same."""
    X1, X2, y = _data(1200, seed=2)
    idx = np.unique(y, return_inverse=True)[1]
    released, events = release_class_labels(idx, 3, math.inf, random_state=0)
    assert np.array_equal(released, idx) and events[0].epsilon == math.inf
    est = _fit(LabelPrivateVerticalClassifier(label_epsilon=math.inf, fallback=False, random_state=0), [X1, X2], y)
    offsets = np.zeros((1200, 3))
    for k in range(3):
        ref = _fit(VerticalLogisticRegression(random_state=0), [X1, X2], (idx == k).astype(int))
        assert np.array_equal(ref.coefs_[1], est.joint_[k].coefs_[1])
        offsets[:, k] = X2 @ ref.coefs_[1]
    out = refit_multiclass_label_block(X1, idx, offsets, 3, 1e-3, choose=False)
    M = X1 @ out["coef"] + out["intercept"] + offsets * out["passive_weight"]
    assert np.allclose(est._margins([X1, X2]), M, atol=1e-9)
    huge = _fit(LabelPrivateVerticalClassifier(label_epsilon=1e4, fallback=False, random_state=0, classes=ABC), [X1, X2], y)
    assert np.allclose(huge.predict_proba([X1, X2]), est.predict_proba([X1, X2]), atol=1e-12)


def test_labels_only_at_epsilon_one_beats_the_label_party_alone():
    """Party 2 holds most of the signal: the label party alone is near the prior (its weight 0.5 against 2 in
    Gumbel noise); the release keeps e/(e + 2) = 58 % of the labels, enough for party 2's directions at 4,000 rows,
    and the recalibration on the exact labels brings the test log loss well below the label party's own."""
    X1, X2, y = _data(5000, seed=1)
    tr, te = slice(0, 4000), slice(4000, None)
    est = _fit(LabelPrivateVerticalClassifier(label_epsilon=1.0, random_state=0, classes=ABC), [X1[tr], X2[tr]], y[tr])
    alone = LogisticRegression(C=1.0 / (1e-3 * 4000)).fit(X1[tr], y[tr])
    l_joint = log_loss(y[te], est.predict_proba([X1[te], X2[te]]), labels=est.classes_)
    l_alone = log_loss(y[te], alone.predict_proba(X1[te]), labels=alone.classes_)
    assert est.label_party_choice_ == "joint" and l_joint < l_alone - 0.2, (l_joint, l_alone)


def test_the_label_party_keeps_its_own_model_when_the_others_hold_noise():
    X1, X2, y = _data(2000, seed=4, signal2=0.0)  # party 2's columns are independent of the labels
    est = _fit(LabelPrivateVerticalClassifier(label_epsilon=1.0, random_state=1, classes=ABC), [X1, X2], y)
    assert est.label_party_choice_ == "alone" and not np.any(est.passive_weight_)
    assert not np.any(est.coefs_[1]) and est.label_party_cv_["joint"] >= est.label_party_cv_["alone"] - \
        2.0 * est.label_party_cv_["standard_error"]


def test_two_classes_take_one_joint_fit():
    X1, X2, y = _data(1200, seed=3)
    y2 = np.where(y == "ant", "ant", "other")
    est = _fit(LabelPrivateVerticalClassifier(label_epsilon=2.0, random_state=0, classes=["ant", "other"]), [X1, X2], y2)
    assert len(est.joint_) == 1 and est.decision_function([X1, X2]).shape == (1200,)
    assert est.evaluate([X1, X2], y2)["accuracy"] > 0.6


def test_the_audit_games_plant_reaches_the_estimators_release():
    """The k-ary audit game's plant (change probability at 2ε) changes what this release draws: the game audits the
    mechanism the estimator runs. Keep rate e^2/(e^2 + 2) planted against e/(e + 2) honest (5 SEs apart ≪ gap)."""
    y = np.arange(30_000) % 3
    with _change_at_double_epsilon():
        out, events = release_class_labels(y, 3, 1.0, random_state=0)
    kept = float(np.mean(out == y))
    assert events[0].epsilon == 1.0
    assert abs(kept - math.e ** 2 / (math.e ** 2 + 2)) < Z * math.sqrt(0.25 / y.size)
    assert lm.change_probability(1.0, 3) == pytest.approx(2 / (math.e + 2))


@pytest.mark.parametrize("kwargs, match", [({"label_epsilon": 0.0}, "label_epsilon must be > 0"),
                                           ({"label_epsilon": None}, "label_epsilon must be > 0"),
                                           ({"lam": 0.0}, "lam must be > 0")])
def test_bad_parameters_are_refused_with_the_reason(kwargs, match):
    X1, X2, y = _data(100)
    with pytest.raises(InvalidParameterError, match=match):
        LabelPrivateVerticalClassifier(**kwargs).fit([X1, X2], y)


def test_bad_labels_are_refused_with_the_reason():
    X1, X2, y = _data(100)
    with pytest.raises(InvalidParameterError, match="give classes="):  # private: K declared, not read off y
        LabelPrivateVerticalClassifier().fit([X1, X2], y)
    with pytest.raises(InvalidParameterError, match="at least two distinct"):
        LabelPrivateVerticalClassifier(classes=["ant", "ant"]).fit([X1, X2], y)
    free = {"label_epsilon": math.inf}
    with pytest.raises(InvalidDataError, match="1 class"):
        LabelPrivateVerticalClassifier(**free).fit([X1, X2], np.zeros(100))
    with pytest.raises(InvalidDataError, match="outside classes="):
        LabelPrivateVerticalClassifier(**free, classes=["ant", "bee"]).fit([X1, X2], y)
    with pytest.raises(InvalidDataError, match="99 entries"):
        LabelPrivateVerticalClassifier(classes=ABC).fit([X1, X2], y[:99])
    with pytest.raises(InvalidDataError, match="Unknown label type"):
        LabelPrivateVerticalClassifier(**free).fit([X1, X2], np.linspace(0, 1, 100))
    with pytest.raises(InvalidDataError, match="different kinds"):  # numbers against declared text classes
        LabelPrivateVerticalClassifier(classes=ABC).fit([X1, X2], np.linspace(0, 1, 100))
    # private: a label outside the declared classes is counted, not refused (a refusal would depend on it)
    assert LabelPrivateVerticalClassifier(classes=["ant", "bee"], random_state=0).fit([X1, X2], y).classes_.size == 2
