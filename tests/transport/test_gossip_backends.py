"""Noisy-gradient gossip gives the same numbers in-process and one process per node at the same seed."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm import ConsensusLogisticRegression


def test_process_backend_equals_in_process():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(1990, 2011, 600), rng.gamma(2.0, 20.0, 600)]).astype(float)
    y = (X[:, 0] - 2000 + 3.0 * rng.normal(size=600) > 0).astype(int)
    kw = dict(epsilon=2.0, n_nodes=3, rounds=5, random_state=1)
    a = ConsensusLogisticRegression(backend="process", **kw).fit(X, y)
    b = ConsensusLogisticRegression(**kw).fit(X, y)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-12, atol=1e-14)
    assert a.intercept_ == pytest.approx(b.intercept_, rel=1e-12)
    assert a.privacy_.per_party == pytest.approx(b.privacy_.per_party, rel=1e-12)
