"""ConsensusLogisticRegression(normalize=True) predicts on rows prepared as in its fit (issue 27)."""

from __future__ import annotations

import numpy as np

from dpadmm import ConsensusLogisticRegression


def test_normalize_true_rescales_rows_at_predict_time_too():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4)) * np.array([1.0, 5.0, 50.0, 2000.0])
    y = np.where(X[:, 0] + 0.01 * X[:, 2] > 0, 1, 0)
    m = ConsensusLogisticRegression(normalize=True, n_nodes=3, max_iter=20, random_state=0).fit(X, y)
    Xn = X / np.maximum(np.linalg.norm(X, axis=1), 1.0)[:, None]
    np.testing.assert_allclose(m.decision_function(X), Xn @ m.coef_ + m.intercept_)
    np.testing.assert_allclose(m.decision_function(Xn), m.decision_function(X))  # idempotent on prepared rows
