"""Every noisy stage of a functional worker's pooled statistics adds the noise its event states.

The audit games cover the ``mean`` and ``moments`` stages (``worst-case functional-statistics[...]``); the DP
τ-quantile's bisection counts (``quantile``), the DP ranges' histograms (``ranges``) and the model-vs-constant
comparison (``compare``) had no check of their noise: a hand plant halving the noise of one of them (events unchanged)
passed every default test of the plant, audit and functional suites. Here the worker's own step is run on independent
generators and each released coordinate's noise, over the σ its event states, must be N(0, 1): two-sided χ² (false
failure ≤ 10⁻⁶ per stage, the test seeded)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2

from dpadmm.algorithms.functional import statistics as fs
from dpadmm.estimators.functional import FunctionalQuantileRegressor

RELEASES, FALSE_FAILURE = 1500, 1e-6


def _data():
    rng = np.random.default_rng(2)
    T = 12
    X = rng.normal(size=(50, T)).cumsum(axis=1) / 3.0
    y = X[:, -1] + rng.normal(size=50)
    return X, y, np.full(T, 1.0 / T), np.linspace(0.0, 1.0, T)


def _compare_model():
    X, y, _, grid = _data()
    est = FunctionalQuantileRegressor(tau=0.5, workers=1, n_components=3, random_state=0, max_iter=5).fit(X, y, grid=grid)
    w = np.r_[est.coef_, est.intercept_]
    return est._released_model(w, 0.0, 1.0) | {"constant": float(np.quantile(y, 0.5)), "band": (-5.0, 5.0)}


def _request(stage: str):
    if stage == "quantile":
        return fs.StatsRequest("quantile", threshold=0.3)
    if stage == "ranges":
        return fs.StatsRequest("ranges", y_hist=True, x_hist=True)
    return fs.StatsRequest("compare", model=_compare_model())


def _values(msg) -> np.ndarray:
    return np.concatenate([np.ravel(v) for _, v in sorted(msg.values.items())])


@pytest.mark.parametrize("stage", ["quantile", "ranges", "compare"])
def test_each_stage_releases_its_stated_noise(stage):
    X, y, q, _ = _data()
    req = _request(stage)
    exact_cfg, _ = fs.setup_stats("w", X, y, q, 0.0)
    private, _ = fs.setup_stats("w", X, y, q, 2.0, quantile_multiplier=3.0, compare_multiplier=4.0)
    exact = _values(fs.stats_step(exact_cfg, None, req, rng=np.random.default_rng(0))[1])  # un-noised (z = 0)
    U = []
    for s in range(RELEASES):
        _, msg, (event,) = fs.stats_step(private, None, req, rng=np.random.default_rng([11, s]))
        U.append((_values(msg) - exact) / event.sigma)
    u = np.ravel(U)
    lo, hi = chi2.ppf(FALSE_FAILURE / 2, u.size), chi2.ppf(1 - FALSE_FAILURE / 2, u.size)
    assert lo <= float(u @ u) <= hi, (stage, float(u @ u) / u.size)
