"""The PP noise of [Zhang, eq. 24]: density ∝ exp(−α‖ε‖) ⇔ ‖ε‖ ~ Gamma(d, 1/α), direction uniform.

Statistical tests with a fixed seed; each uses significance level 1e-3, so with a fresh seed the
false-failure rate of the whole module is at most 4 × 1e-3 (union bound).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpadmm.algorithms.consensus.node import _noise
from dpadmm.privacy.mechanisms import gamma_norm

LEVEL = 1e-3
pytestmark = [pytest.mark.slow, pytest.mark.statistical]


@pytest.mark.parametrize("d,alpha", [(1, 0.7), (5, 3.0), (105, 3.0)])
def test_norm_is_gamma(d, alpha):
    eps = gamma_norm(np.random.default_rng(11 + d), alpha, d, size=20000)
    r = np.linalg.norm(eps, axis=1)
    assert stats.kstest(r, stats.gamma(a=d, scale=1.0 / alpha).cdf).pvalue > LEVEL
    # the same test must reject a wrong scale (a test of the test): 1/α → 1.1/α
    assert stats.kstest(r, stats.gamma(a=d, scale=1.1 / alpha).cdf).pvalue < LEVEL


def test_direction_is_uniform_on_the_sphere():
    d, n = 105, 20000
    eps = gamma_norm(np.random.default_rng(5), 2.0, d, size=n)
    u = eps / np.linalg.norm(eps, axis=1, keepdims=True)
    # (1) projection on a fixed axis: (1 + <u, e>)/2 ~ Beta((d−1)/2, (d−1)/2) for the uniform law
    e = np.ones(d) / np.sqrt(d)
    beta = stats.beta((d - 1) / 2, (d - 1) / 2)
    assert stats.kstest((1 + u @ e) / 2, beta.cdf).pvalue > LEVEL
    # (2) the mean direction: n·d·‖ū‖² ~ χ²_d asymptotically (E[u uᵀ] = I/d)
    stat = n * d * float(np.sum(u.mean(axis=0) ** 2))
    assert stats.chi2(d).sf(stat) > LEVEL
    # a biased direction law is rejected by (1): shift every direction slightly towards e
    v = u + 0.02 * e
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    assert stats.kstest((1 + v @ e) / 2, beta.cdf).pvalue < LEVEL


def test_per_node_alphas_in_the_step_noise():
    # the step's per-node draw uses α_k of each node: norms scale like d/α_k
    alpha = np.array([1.0, 4.0, np.inf])
    eps = np.stack([_noise(np.random.default_rng(s), alpha, 8) for s in range(4000)])
    r = np.linalg.norm(eps, axis=2)
    assert np.all(r[:, 2] == 0.0)
    for k in (0, 1):
        assert stats.kstest(r[:, k], stats.gamma(a=8, scale=1.0 / alpha[k]).cdf).pvalue > LEVEL
