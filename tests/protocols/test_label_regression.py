"""Labels-only vertical regression (``estimators/label_regression.py``): the labels are released once by
randomized response on bins, the run on them is post-processing, the label party refits on its exact labels."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dpadmm.estimators.label_regression import LabelPrivateVerticalRegression, release_regression_labels
from dpadmm.estimators.vertical import VerticalLinearRegression
from dpadmm.exceptions import InvalidParameterError


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X1, X2 = rng.normal(size=(n, 2)), rng.normal(size=(n, 3))
    y = 100.0 + 5.0 * X1[:, 0] + 20.0 * X2[:, 0] - 10.0 * X2[:, 1] + 5.0 * rng.normal(size=n)
    return X1, X2, y


def _fit(est, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(*args)


def test_a_huge_epsilon_gives_the_non_private_model_within_the_label_quantisation():
    """At ε = 1000 no label changes bin output, so ỹ − y is at most the bin half-width plus the grid step, h. The
    joint fit is a ridge smoother of ỹ (operator norm ≤ 1) and the refit fits the exact labels over columns that hold
    the non-private model up to that perturbation of the offset: the predictions differ by at most h in RMS."""
    X1, X2, y = _data()
    lo, hi = float(y.min()), float(y.max())
    est = _fit(LabelPrivateVerticalRegression(label_epsilon=1000.0, label_range=(lo, hi), n_bins=64, random_state=0,
                                              max_iter=300, tol=1e-6), [X1, X2], y)
    ref = _fit(VerticalLinearRegression(max_iter=300, tol=1e-6), [X1, X2], y)
    h = (hi - lo) / 64 / 2 + (hi - lo) / (4 * 64)
    diff = est.predict([X1, X2]) - ref.predict([X1, X2])
    assert np.sqrt(np.mean(diff ** 2)) <= h, (np.sqrt(np.mean(diff ** 2)), h)
    assert est.label_party_choice_ == "joint" and est.passive_weight_ == pytest.approx(1.0, abs=0.05)


def test_label_epsilon_is_the_sum_of_the_release_events_and_the_run_is_post_processing():
    X1, X2, y = _data(1500)
    est = _fit(LabelPrivateVerticalRegression(label_epsilon=1.0, random_state=3), [X1, X2], y)
    assert est.privacy_["label"]["epsilon"] == pytest.approx(1.0) and est.privacy_["label"]["delta"] == 0.0
    assert est.privacy_["label"]["events"] == 3  # DP range, prior, randomized response
    release = release_regression_labels(y, 1.0, random_state=3)  # the same release the fit made
    assert set(np.unique(release.labels)) <= set(release.outputs)
    assert np.array_equal(release.outputs, est.release_["outputs"])
    # the joint model the passive party holds is a function of the released labels: a fit on them alone reproduces it
    joint = _fit(VerticalLinearRegression(random_state=3), [X1, X2], release.labels)
    assert np.allclose(joint.coefs_[1], est.joint_.coefs_[1])
    est2 = _fit(LabelPrivateVerticalRegression(label_epsilon=1.0, label_range=(0.0, 200.0), random_state=3),
                [X1, X2], y)
    assert est2.privacy_["label"]["events"] == 2  # a declared range costs nothing


def test_labels_only_beats_the_label_party_alone_at_epsilon_one():
    """6,000 rows, party 2 holding most of the signal (R² of the label party alone ≈ 0.05): at ε = 1 the labels-only
    model's test RMSE is below the label party's own (theirs differ by ~20 in sd-5 noise units; the release's
    correlation with y is ~0.3 at 2 bins, enough for the direction at this n)."""
    X1, X2, y = _data(7500, seed=1)
    tr, te = slice(0, 6000), slice(6000, None)
    est = _fit(LabelPrivateVerticalRegression(label_epsilon=1.0, random_state=0), [X1[tr], X2[tr]], y[tr])
    alone = _fit(VerticalLinearRegression(), [X1[tr]], y[tr])
    r_joint = np.sqrt(np.mean((est.predict([X1[te], X2[te]]) - y[te]) ** 2))
    r_alone = np.sqrt(np.mean((alone.predict([X1[te]]) - y[te]) ** 2))
    assert r_joint < 0.5 * r_alone, (r_joint, r_alone)


@pytest.mark.parametrize("kwargs, match", [
    ({"label_epsilon": 0.0}, "label_epsilon must be > 0"),
    ({"label_epsilon": None}, "label_epsilon must be > 0"),
    ({"label_range": (5.0, 1.0)}, "lo < hi"),
    ({"loss": "logistic"}, "loss"),
    ({"bins_loss": "hinge"}, "loss must be one of"),
])
def test_bad_parameters_are_refused_with_the_reason(kwargs, match):
    X1, X2, y = _data(200)
    with pytest.raises(InvalidParameterError, match=match):
        LabelPrivateVerticalRegression(**kwargs).fit([X1, X2], y)
