"""Statistical tests of the noise samplers, with a seed sweep (slow; run in CI).

False-failure rates: each test rejects at level 1e-4 per seed (KS and χ² p-values, or
Bonferroni-corrected normal bounds), so a sweep of 10 seeds fails by chance with probability
below 1e-3. Power: every test below also checks that the same statistic rejects samples whose
scale is off by 20%, so none can pass vacuously.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpadmm.privacy import mechanisms

SEEDS = range(10)
ALPHA = 1e-4


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("seed", SEEDS)
def test_gaussian_sampler_ks_and_power(seed):
    rng = np.random.default_rng(seed)
    sigma = 2.5
    x = mechanisms.gaussian(rng, sigma, 50_000)
    assert stats.kstest(x, "norm", args=(0, sigma)).pvalue > ALPHA
    # power: the same KS test rejects a 20% wrong scale
    assert stats.kstest(x, "norm", args=(0, 1.2 * sigma)).pvalue < ALPHA
    assert stats.kstest(x, "norm", args=(0, sigma / 1.2)).pvalue < ALPHA
    # independence across coordinates of a matrix draw: sample correlation ~ N(0, 1/n)
    m = mechanisms.gaussian(rng, sigma, (20_000, 2))
    r = np.corrcoef(m.T)[0, 1]
    assert abs(r) * np.sqrt(20_000) < stats.norm.ppf(1 - ALPHA / 2)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("seed", SEEDS)
def test_range_gaussian_norm_distribution(seed):
    """‖σ U g‖² / σ² ~ χ²(r) for an orthonormal U with r columns."""
    rng = np.random.default_rng(100 + seed)
    U, _ = np.linalg.qr(rng.normal(size=(30, 7)))
    sigma = 0.7
    draws = mechanisms.range_gaussian(rng, sigma, U, size=40_000)
    q = np.sum(draws**2, axis=1) / sigma**2
    assert stats.kstest(q, "chi2", args=(7,)).pvalue > ALPHA
    assert stats.kstest(q / 1.44, "chi2", args=(7,)).pvalue < ALPHA  # σ off by 20%
    # batched and single draws come from the same distribution
    single = np.array([mechanisms.range_gaussian(rng, sigma, U) for _ in range(5_000)])
    q1 = np.sum(single**2, axis=1) / sigma**2
    assert stats.ks_2samp(q[:5_000], q1).pvalue > ALPHA
