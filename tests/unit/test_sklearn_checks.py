"""Every public estimator passes scikit-learn's estimator checks (``sklearn.utils.estimator_checks``).

Each check is one test (``parametrize_with_checks``), so a check that starts failing fails here by name; no check is
expected to fail. Two instances are not the defaults, for reasons of the checks' data, not of the estimators:

- ``FunctionalQuantileRegressor(n_components=2)``: the default 6 B-spline components need curves on at least 6 grid
  points, and the checks' data has 1 to 5 columns (with 6 the fit refuses, naming ``n_components``).
- ``ConsensusLogisticRegression(max_iter=10)`` and ``FunctionalQuantileRegressor(…, max_iter=10)``: with their
  default rounds the checks take about 40 s and 15 s on a loaded 2-core machine; they are about the interface
  (tags, validation, messages, fitted state), which the round count does not change.
- ``LabelPrivateVerticalClassifier(label_epsilon=inf)``: with a finite ε its classes must be declared (they decide
  what the other parties take part in), and the checks' label sets vary (strings, 2 or 3 classes); at ε = ∞ they
  are read off y as scikit-learn does. The private path is tested in tests/protocols/test_label_classification.py.
  ``VerticalExpertsMulticlassClassifier()`` is checked at its defaults for the same reason (non-private: the classes
  read off y); its private path is tested in tests/protocols/test_experts_multiclass.py.
"""

from __future__ import annotations

import warnings

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from dpadmm import (ConsensusLinearRegression, ConsensusLogisticRegression, ConsensusMultinomialClassifier,
                    FunctionalQuantileRegressor, LabelPrivateVerticalClassifier, LabelPrivateVerticalRegression,
                    VerticalExpertsClassifier, VerticalExpertsMulticlassClassifier, VerticalExpertsRegressor,
                    VerticalLinearRegression,
                    VerticalLogisticRegression, VerticalPoissonRegression, VerticalSGDClassifier)

ESTIMATORS = [VerticalLogisticRegression(), VerticalLinearRegression(), VerticalSGDClassifier(),
              VerticalExpertsClassifier(), VerticalExpertsRegressor(), VerticalExpertsMulticlassClassifier(),
              ConsensusLogisticRegression(max_iter=10),
              ConsensusLinearRegression(),
              ConsensusMultinomialClassifier(), LabelPrivateVerticalRegression(),
              LabelPrivateVerticalClassifier(label_epsilon=float("inf")),
              VerticalPoissonRegression(),
              FunctionalQuantileRegressor(n_components=2, max_iter=10)]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_check(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checks' tiny data sets: convergence and rank warnings are expected
        check(estimator)


def test_every_public_estimator_is_checked():
    import dpadmm

    public = {n for n in dir(dpadmm) if n[0].isupper() and hasattr(getattr(dpadmm, n), "fit")}
    assert public == {type(e).__name__ for e in ESTIMATORS}, public


@pytest.mark.parametrize("make", [lambda: VerticalExpertsClassifier(party_sizes=[3, 3], random_state=0),
                                  lambda: VerticalLogisticRegression(party_sizes=[3, 3], random_state=0),
                                  lambda: VerticalSGDClassifier(party_sizes=[3, 3], random_state=0)])
def test_one_matrix_with_party_sizes_in_grid_search(make):
    """A vertical estimator on one matrix with a column → party map goes through Pipeline and GridSearchCV."""
    import numpy as np
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6))
    y = np.where(X @ np.array([1.0, -1.0, 0.5, 2.0, 0.0, -0.5]) + 0.3 * rng.normal(size=400) > 0, "yes", "no")
    search = GridSearchCV(make_pipeline(StandardScaler(), make()), {f"{type(make()).__name__.lower()}__lam":
                                                                      [1e-3, 1e-1]}, cv=3).fit(X, y)
    assert search.best_score_ > 0.8 and set(search.predict(X)) <= {"yes", "no"}
