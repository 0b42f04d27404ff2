"""Check loss, its subgradient, prox and the smoothed (Moreau) check loss — kernels.quantile."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm.kernels.quantile import (
    check_loss, check_prox, check_subgradient, pinball_score, smoothed_check_curvature, smoothed_check_grad,
    smoothed_check_loss,
)

TAUS = (0.1, 0.25, 0.5, 0.9)


@pytest.mark.parametrize("tau", TAUS)
def test_check_loss_values(tau):
    u = np.array([-2.0, -0.5, 0.0, 0.5, 3.0])
    expected = np.array([2.0 * (1 - tau), 0.5 * (1 - tau), 0.0, 0.5 * tau, 3.0 * tau])
    np.testing.assert_allclose(check_loss(u, tau), expected, atol=1e-15)
    assert np.all(check_loss(np.linspace(-5, 5, 101), tau) >= 0)


@pytest.mark.parametrize("tau", TAUS)
def test_subgradient_matches_finite_differences_and_is_a_subgradient(tau):
    rng = np.random.default_rng(0)
    u = rng.normal(size=1000)
    u = u[np.abs(u) > 1e-3]
    h = 1e-7
    fd = (check_loss(u + h, tau) - check_loss(u - h, tau)) / (2 * h)
    np.testing.assert_allclose(check_subgradient(u, tau), fd, atol=1e-6)
    # at the kink the paper's element τ − 1 lies in [τ − 1, τ]; subgradient inequality everywhere
    g0 = check_subgradient(0.0, tau)
    assert g0 == pytest.approx(tau - 1.0)
    v = rng.normal(size=1000)
    for u0 in (0.0, 0.7, -1.3):
        g = check_subgradient(u0, tau)
        assert np.all(check_loss(v, tau) >= check_loss(u0, tau) + g * (v - u0) - 1e-12)


@pytest.mark.parametrize("tau", TAUS)
@pytest.mark.parametrize("t", (0.3, 2.0))
def test_prox_minimises_by_brute_force(tau, t):
    z = np.linspace(-6, 6, 240_001)
    for v in (-3.0, -0.1, 0.0, 0.05, 2.5):
        obj = t * check_loss(z, tau) + 0.5 * (z - v) ** 2
        assert float(check_prox(v, tau, t)) == pytest.approx(z[np.argmin(obj)], abs=1e-4)


@pytest.mark.parametrize("tau", TAUS)
def test_smoothed_loss_bounds_gradient_and_curvature(tau):
    h = 0.2
    u = np.linspace(-3, 3, 2001)
    gap = check_loss(u, tau) - smoothed_check_loss(u, tau, h)
    assert np.all(gap >= -1e-12) and np.all(gap <= h * max(tau, 1 - tau) ** 2 / 2 + 1e-12)
    e = 1e-6
    fd = (smoothed_check_loss(u + e, tau, h) - smoothed_check_loss(u - e, tau, h)) / (2 * e)
    np.testing.assert_allclose(smoothed_check_grad(u, tau, h), fd, atol=1e-5)
    inner = (u > (tau - 1) * h + 1e-3) & (u < tau * h - 1e-3)
    assert np.all(smoothed_check_curvature(u[inner], tau, h) == pytest.approx(1 / h))
    assert np.all(smoothed_check_curvature(u[np.abs(u) > h], tau, h) == 0)


@pytest.mark.parametrize("tau", TAUS)
def test_pinball_minimised_at_the_empirical_quantile(tau):
    y = np.random.default_rng(1).standard_t(3, size=5001)
    q = np.quantile(y, tau, method="inverted_cdf")
    best = pinball_score(y, np.full_like(y, q), tau)
    for d in (-0.05, 0.05):
        assert pinball_score(y, np.full_like(y, q + d), tau) > best
