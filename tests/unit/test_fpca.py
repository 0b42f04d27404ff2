"""Distributed FPCA (summed per-worker moments = pooled), private moments, fixed bases — kernels.fpca."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm.data.functional import simulate_zhou, zhou_basis
from dpadmm.kernels import fpca as F


@pytest.fixture(scope="module")
def sim():
    return simulate_zhou(3000, tau=0.5, grid_size=60, random_state=3)


@pytest.mark.parametrize("workers", (2, 7))
def test_summed_covariance_fpca_equals_pooled(sim, workers):
    q = F.trapezoid_weights(sim.grid)
    parts = np.array_split(np.random.default_rng(0).permutation(sim.n), workers)
    S = sum(F.moment_sum(sim.curves[p], q) for p in parts)
    dist = F.fpca_from_moments(S, sim.grid, 5)
    pooled = F.fpca(sim.curves, sim.grid, 5)
    np.testing.assert_allclose(dist.eigenvalues, pooled.eigenvalues, rtol=1e-10)
    np.testing.assert_allclose(dist.phi, pooled.phi, atol=1e-8)
    np.testing.assert_allclose(dist.mean, pooled.mean, atol=1e-10)
    np.testing.assert_allclose(dist.scores(sim.curves), pooled.scores(sim.curves), atol=1e-8)


def test_fpca_matches_numpy_covariance_and_is_orthonormal(sim):
    b = F.fpca(sim.curves, sim.grid, 4)
    q = b.q
    Xc = sim.curves - sim.curves.mean(0)
    C = Xc.T @ Xc / sim.n
    sq = np.sqrt(q)
    vals = np.sort(np.linalg.eigvalsh(sq[:, None] * C * sq[None, :]))[::-1][:4]
    np.testing.assert_allclose(b.eigenvalues, vals, rtol=1e-9)
    np.testing.assert_allclose(b.phi.T @ (b.phi * q[:, None]), np.eye(4), atol=1e-10)


def test_fpca_recovers_the_simulation_eigenfunctions():
    # eigenvalues k^-2 are well separated: with n = 20000 the top 3 eigenfunctions are within
    # O(n^-1/2 / gap) of the cosines (|<phi_hat, phi>| > 0.99 fails with negligible probability)
    d = simulate_zhou(20000, tau=0.5, random_state=0)
    b = F.fpca(d.curves, d.grid, 3)
    true = zhou_basis(d.grid)[:, :3]
    inner = np.abs(np.sum(b.phi * true * b.q[:, None], axis=0))
    assert np.all(inner > 0.99), inner


@pytest.mark.parametrize("make", (F.fourier_basis, F.bspline_basis))
def test_fixed_bases_are_orthonormal(make):
    g = np.linspace(0, 2, 50)
    b = make(g, 7)
    assert b.phi.shape == (50, 7)
    np.testing.assert_allclose(b.phi.T @ (b.phi * b.q[:, None]), np.eye(7), atol=1e-10)


def test_clip_rows_enforces_the_radius():
    Z = np.random.default_rng(2).normal(scale=3, size=(500, 6))
    C = F.clip_rows(Z, 2.0)
    n0, n1 = np.linalg.norm(Z, axis=1), np.linalg.norm(C, axis=1)
    assert np.all(n1 <= 2.0 + 1e-12)
    np.testing.assert_array_equal(C[n0 <= 2.0], Z[n0 <= 2.0])
    np.testing.assert_allclose(C[n0 > 2.0] / n1[n0 > 2.0, None], Z[n0 > 2.0] / n0[n0 > 2.0, None])


def test_moment_sensitivity_bound_holds_for_replaced_curves():
    rng = np.random.default_rng(4)
    g = np.linspace(0, 1, 30)
    q = F.trapezoid_weights(g)
    c = 1.5
    worst = 0.0
    for _ in range(200):
        X = rng.normal(scale=rng.uniform(0.1, 5), size=(10, 30))
        Xp = X.copy()
        Xp[3] = rng.normal(scale=rng.uniform(0.1, 10), size=30)
        d = F.moment_sum(X, q, c) - F.moment_sum(Xp, q, c)
        worst = max(worst, np.linalg.norm(d[np.triu_indices(31)]))
    assert worst <= F.moment_sensitivity(c)


def test_noisy_moments_are_symmetric_with_the_stated_scale():
    S = np.zeros((40, 40))
    E = F.noisy_moment_sum(S, 2.0, np.random.default_rng(5))
    np.testing.assert_array_equal(E, E.T)
    iu = np.triu_indices(40)
    # 820 i.i.d. N(0, 4) entries: sample sd within 4 standard errors of 2 (false failure < 1e-4)
    assert abs(E[iu].std() - 2.0) < 4 * 2.0 / np.sqrt(2 * 820)
