"""Losses, regularisers, prox operators and the factor-once solver."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import lambertw

from dpadmm.kernels import (L1, L2, ElasticNet, HuberLoss, LogisticLoss, PoissonLoss, SpectralSolver, SquaredLoss,
                            get_loss)
from dpadmm.kernels.linalg import EIGH_MAX_DIM, EIGH_MAX_DIM_SPARSE, CGSolver, column_sq_norms, make_solver

LOSSES = [LogisticLoss(), SquaredLoss(), HuberLoss(kappa=0.7), PoissonLoss()]


def _labels(loss, rng, n):
    if loss.name == "poisson":
        return rng.poisson(3.0, size=n).astype(np.float64)
    return np.where(rng.random(n) < 0.5, -1.0, 1.0) if loss.binary else rng.normal(size=n)


@pytest.mark.parametrize("loss", LOSSES, ids=lambda l: l.name)
def test_gradients_match_finite_differences(loss, rng):
    z = rng.normal(scale=3, size=200)
    y = _labels(loss, rng, 200)
    h = 1e-6
    fd = (loss.value(z + h, y) - loss.value(z - h, y)) / (2 * h)
    np.testing.assert_allclose(loss.grad(z, y), fd, atol=1e-6, rtol=1e-6)  # rtol: Poisson's e^z reaches e^10
    if loss.name != "huber":  # huber's second derivative jumps at the threshold
        fd2 = (loss.grad(z + h, y) - loss.grad(z - h, y)) / (2 * h)
        np.testing.assert_allclose(loss.hess(z, y), fd2, atol=1e-5, rtol=1e-6)
    g, hh = loss.grad_hess(z, y)
    np.testing.assert_allclose(g, loss.grad(z, y))
    np.testing.assert_allclose(hh, loss.hess(z, y))


@pytest.mark.parametrize("loss", LOSSES, ids=lambda l: l.name)
@pytest.mark.parametrize("t", [0.01, 1.0, 50.0])
def test_prox_matches_scalar_minimiser(loss, t, rng):
    v = rng.normal(scale=5, size=60)
    y = _labels(loss, rng, 60)
    z = loss.prox(v, y, t)
    for i in range(60):
        ref = minimize_scalar(lambda u: t * loss.value(np.array([u]), y[i:i + 1])[0] + 0.5 * (u - v[i]) ** 2,
                              bracket=(v[i] - 10, v[i] + 10), tol=1e-12).x
        assert abs(z[i] - ref) < 1e-6 * (1 + abs(ref))


def test_logistic_prox_warm_start_and_extreme_margins(rng):
    loss = LogisticLoss()
    v = np.concatenate([rng.normal(size=100), [1e4, -1e4, 800.0, -800.0]])
    y = np.ones_like(v)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        z_cold = loss.prox(v, y, 3.0)
        z_warm = loss.prox(v, y, 3.0, z0=z_cold + 0.5)
        vals = loss.value(np.array([1e4, -1e4]), np.array([1.0, 1.0]))
    np.testing.assert_allclose(z_cold, z_warm, atol=1e-9)
    phi = 3.0 * loss.grad(z_cold, y) + z_cold - v
    assert np.max(np.abs(phi)) < 1e-10 * (1 + np.max(np.abs(v)))
    assert vals[0] == 0.0 and vals[1] == pytest.approx(1e4)


def test_poisson_prox_is_the_lambert_w_root_without_overflow_and_warm_starts_agree(rng):
    """The Poisson prox solves ``t e^z + z = u`` (u = v + t y): ``z = u − W(t e^u)`` (Lambert W, evaluated here in
    log space by scipy where t e^u is finite). Extreme centres (±1e4) and steps (1e-4 … 1e4) raise no overflow, and a
    warm start on either side of the root gives the same root."""
    loss = PoissonLoss()
    v = np.concatenate([rng.normal(scale=5, size=2000), [1e4, -1e4, 700.0, -700.0]])
    y = np.concatenate([rng.poisson(3.0, size=2000), [0.0, 50.0, 2.0, 0.0]]).astype(np.float64)
    for t in (1e-4, 0.05, 1.0, 20.0, 1e4):
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            z = loss.prox(v, y, t)
            z_warm = loss.prox(v, y, t, z0=z + rng.normal(scale=2.0, size=z.size))
        u = v + t * y
        phi = t * np.exp(z) + z - u
        assert np.max(np.abs(phi) / (1.0 + np.abs(u))) < 1e-10
        np.testing.assert_allclose(z_warm, z, atol=1e-9, rtol=1e-12)
        with np.errstate(over="ignore"):
            finite = np.isfinite(t * np.exp(u))
        ref = u[finite] - np.real(lambertw(t * np.exp(u[finite])))
        np.testing.assert_allclose(z[finite], ref, atol=1e-9, rtol=1e-12)


@pytest.mark.parametrize("reg", [L2(), L1(), ElasticNet(l1_ratio=0.3)], ids=lambda r: r.name)
def test_prox_moreau_identity_and_optimality(reg, rng):
    v = rng.normal(scale=2, size=50)
    t = 0.7
    p = reg.prox(v, t)
    # optimality: p minimises t R(x) + ½‖x − v‖²; compare with perturbations
    f = lambda x: t * reg.value(x) + 0.5 * np.sum((x - v) ** 2)  # noqa: E731
    for _ in range(20):
        assert f(p) <= f(p + 1e-3 * rng.normal(size=50)) + 1e-12
    if isinstance(reg, L2):
        # Moreau: v = prox_{tR}(v) + t prox_{R*/t}(v/t); for R = ½‖·‖², R* = R.
        dual = (v / t) / (1 + 1 / t)
        np.testing.assert_allclose(p + t * dual, v)
    if isinstance(reg, L1):
        # Moreau: v − prox_{t‖·‖₁}(v) is the projection onto the ℓ∞ ball of radius t
        np.testing.assert_allclose(v - p, np.clip(v, -t, t))


def test_spectral_solver_matches_direct_solve_and_range_basis(rng):
    D = rng.normal(size=(40, 6))
    D[:, 5] = D[:, 0] + D[:, 1]  # rank deficient, like a9a's one-hot blocks
    S = SpectralSolver(D)
    assert S.rank == 5
    b = rng.normal(size=6)
    for lam_q, rho in [(0.3, 1.0), (2.0, 0.05)]:
        np.testing.assert_allclose(S.solve(b, lam_q, rho), np.linalg.solve(lam_q * np.eye(6) + rho * D.T @ D, b),
                                   rtol=1e-10)
    U = S.range_basis(D)
    assert U.shape == (40, 5)
    np.testing.assert_allclose(U.T @ U, np.eye(5), atol=1e-10)
    # every column of D lies in span(U)
    np.testing.assert_allclose(U @ (U.T @ D), D, atol=1e-10)


def _blocks(rng):
    import scipy.sparse as sp

    dense = rng.normal(size=(60, 8))
    dense[:, 7] = dense[:, 0] - dense[:, 2]  # rank deficient
    sparse = sp.random(300, 25, density=0.1, random_state=np.random.RandomState(1), format="csr")
    return [("dense", dense), ("sparse", sparse)]


@pytest.mark.parametrize("which", [0, 1], ids=["dense", "sparse"])
def test_cg_solver_matches_eigh_and_warm_start_costs_nothing(which, rng):
    name, D = _blocks(rng)[which]
    d = D.shape[1]
    E = SpectralSolver(D)
    C = CGSolver(D, tol=1e-10)
    for lam_q, rho in [(0.3, 1.0), (2.0, 0.05), (1e-3, 10.0)]:
        b = rng.normal(size=d)
        x = C.solve(b, lam_q, rho)
        np.testing.assert_allclose(x, E.solve(b, lam_q, rho), rtol=1e-8, atol=1e-10)
        assert np.linalg.norm(lam_q * x + rho * C.gram_matvec(x) - b) <= 1e-9 * np.linalg.norm(b)
        C.solve(b, lam_q, rho, x0=x)  # warm start at the solution: no iteration needed
        assert C.last_iterations == 0
    v = rng.normal(size=d)
    np.testing.assert_allclose(C.gram_matvec(v), E.gram_matvec(v), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(column_sq_norms(D), np.diag(E.gram), rtol=1e-12)
    # an upper bound on the top eigenvalue, and a tight one (FISTA's step needs L >= lambda_max)
    assert E.lipschitz <= C.lipschitz <= 1.02 * E.lipschitz


def test_cg_reduction_stops_early_and_errors_shrink_with_the_warm_start(rng):
    D = rng.normal(size=(200, 30))
    b = rng.normal(size=30)
    exact = SpectralSolver(D).solve(b, 0.5, 1.0)
    C = CGSolver(D, reduction=0.1)
    x1 = C.solve(b, 0.5, 1.0)
    r0 = np.linalg.norm(b)
    assert np.linalg.norm(0.5 * x1 + C.gram_matvec(x1) - b) <= 0.1 * r0
    assert C.last_iterations < 30
    x2 = C.solve(b, 0.5, 1.0, x0=x1)  # the next call from the previous iterate gains another factor
    assert np.linalg.norm(x2 - exact) < np.linalg.norm(x1 - exact)


def test_make_solver_choice_and_cg_has_no_range_basis(rng):
    from dpadmm.exceptions import InvalidParameterError

    D = rng.normal(size=(20, 5))
    assert make_solver(D).kind == "eigh"
    assert make_solver(D, "cg").kind == "cg"
    wide = np.zeros((3, EIGH_MAX_DIM + 1))
    assert make_solver(wide).kind == "cg"
    import scipy.sparse as sp

    assert make_solver(sp.csr_matrix(np.eye(EIGH_MAX_DIM_SPARSE))).kind == "eigh"
    assert make_solver(sp.csr_matrix((5, EIGH_MAX_DIM_SPARSE + 1))).kind == "cg"
    with pytest.raises(ValueError, match="solver must be one of"):
        make_solver(D, "lu")
    with pytest.raises(InvalidParameterError, match="solver='eigh'"):
        make_solver(D, "cg").range_basis(D)


def test_get_loss_rejects_unknown():
    from dpadmm.exceptions import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="loss must be one of"):
        get_loss("hinge")
