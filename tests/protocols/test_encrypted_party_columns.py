"""The encrypted estimator on one matrix with a column → party map (``party_sizes``): the same fit as on the party
blocks, and it goes into ``Pipeline``, ``GridSearchCV`` and ``cross_val_score`` (issue 40, item 4).

Fast: the plaintext HE layer (the same integers as sf-heu, no ciphertexts), 400 rows, 10 rounds."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier
from dpadmm.exceptions import InvalidDataError, InvalidParameterError
from dpadmm.experiments.audit_games_encrypted import plaintext_he


@pytest.fixture
def plain():
    with plaintext_he():
        yield


def _data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    y = np.where(X @ np.array([1.0, -1.0, 0.5, 2.0, 0.0, -0.5]) + 0.3 * rng.normal(size=n) > 0, "yes", "no")
    return X, y


def test_one_matrix_is_the_same_fit_as_its_party_blocks(plain):
    X, y = _data()
    one = VerticalEncryptedClassifier(party_sizes=[2, 3, 1], rounds=10, random_state=0).fit(X, y)
    blocks = VerticalEncryptedClassifier(rounds=10, random_state=0).fit([X[:, :2], X[:, 2:5], X[:, 5:]], y)
    assert [c.shape for c in one.coefs_] == [c.shape for c in blocks.coefs_] and len(one.coefs_) == 3
    for a, b in zip(one.coefs_, blocks.coefs_):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(one.decision_function(X), blocks.decision_function([X[:, :2], X[:, 2:5], X[:, 5:]]))
    assert one.n_features_in_ == 6 and set(one.predict(X)) <= {"yes", "no"}


def test_in_grid_search_and_cross_val_score_on_one_matrix(plain):
    X, y = _data()
    base_rate = max(np.mean(y == "yes"), np.mean(y == "no"))
    search = GridSearchCV(make_pipeline(StandardScaler(), VerticalEncryptedClassifier(party_sizes=[3, 3], rounds=10,
                                                                                      random_state=0)),
                          {"verticalencryptedclassifier__step": [0.5, 2.0]}, cv=3).fit(X, y)
    # the labels are a noisy linear rule of the columns: a fitted joint model is far above the base rate (0.5 here)
    assert search.best_score_ > base_rate + 0.2 and set(search.predict(X)) <= {"yes", "no"}
    assert search.best_estimator_[-1].n_features_in_ == 6 and len(search.best_estimator_[-1].coefs_) == 2
    scores = cross_val_score(VerticalEncryptedClassifier(party_sizes=[2, 2, 2], rounds=10, random_state=0), X, y, cv=3)
    assert scores.shape == (3,) and scores.min() > base_rate + 0.2


def test_a_bad_column_map_and_an_unfitted_model_are_refused_for_their_reason(plain):
    X, y = _data(n=100)
    with pytest.raises(InvalidParameterError, match=r"party_sizes=\[3, 2\] must be two or more positive column counts "
                                                    r"summing to X's 6 columns"):
        VerticalEncryptedClassifier(party_sizes=[3, 2], rounds=2).fit(X, y)
    with pytest.raises(InvalidParameterError, match="two or more"):
        VerticalEncryptedClassifier(party_sizes=[6], rounds=2).fit(X, y)
    with pytest.raises(InvalidDataError, match="at least 2 columns"):
        VerticalEncryptedClassifier(rounds=2).fit(X[:, :1], y)
    with pytest.raises(NotFittedError, match="not fitted yet"):
        VerticalEncryptedClassifier().predict(X)
    model = VerticalEncryptedClassifier(party_sizes=[3, 3], rounds=2, random_state=0).fit(X, y)
    with pytest.raises(InvalidDataError, match="expecting 6 features"):
        model.predict(X[:, :5])


@parametrize_with_checks([VerticalEncryptedClassifier(rounds=10, random_state=0)])
def test_sklearn_check(estimator, check, plain):
    """scikit-learn's estimator checks, as for the public estimators (tests/unit/test_sklearn_checks.py): the
    encrypted estimator on one matrix (two parties, the label party holding the first ⌈d/2⌉ columns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checks' tiny data sets: convergence and rank warnings are expected
        check(estimator)
