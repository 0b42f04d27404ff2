"""Noise samplers and the papers' noise calibrations.

All samplers take an explicit ``numpy.random.Generator``; none touches global state.
"""

from __future__ import annotations

import math

import numpy as np


def gaussian(rng: np.random.Generator, sigma: float, size) -> np.ndarray:
    """i.i.d. N(0, sigma²) noise of the given shape."""
    return sigma * rng.standard_normal(size)


def range_gaussian(rng: np.random.Generator, sigma: float, U: np.ndarray, size: int | None = None) -> np.ndarray:
    """Shared noise of [Hu, eq. 16]: ``D_m ξ_m ~ N(0, σ² P_m)`` drawn as ``σ U g``, g ~ N(0, I_r).

    ``U`` (N × r) is an orthonormal basis of range(D_m). When D_m has full column rank,
    ``D_m ξ`` with ``ξ ~ N(0, σ²(D_mᵀD_m)⁻¹)`` has covariance ``σ² D(DᵀD)⁻¹Dᵀ = σ² P_m``: the
    same distribution; when D_m is rank deficient this is the natural extension (docs/algorithms.md §1).
    ``size`` gives ``size`` independent draws as rows of a ``(size, N)`` array.
    """
    if size is None:
        return sigma * (U @ rng.standard_normal(U.shape[1]))
    return sigma * (rng.standard_normal((size, U.shape[1])) @ U.T)


def gamma_norm(rng: np.random.Generator, alpha: float, dim: int, size=None) -> np.ndarray:
    """Noise with density ∝ exp(−alpha‖ε‖) in R^dim [Zhang, eq. 24]: norm ~ Gamma(dim, 1/alpha),
    direction uniform on the sphere. Returns shape ``(dim,)`` or ``(*size, dim)``."""
    shape = () if size is None else tuple(np.atleast_1d(size))
    direction = rng.standard_normal(shape + (dim,))
    direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
    radius = rng.gamma(shape=dim, scale=1.0 / alpha, size=shape)
    return direction * np.asarray(radius)[..., None]


def classical_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """σ = sqrt(2 ln(1.25/δ)) Δ / ε: the classical Gaussian mechanism [Hu, Thm 3] (stated for ε ≤ 1)."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def classical_gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Inverse of :func:`classical_gaussian_sigma` at unit sensitivity."""
    if noise_multiplier <= 0:
        return math.inf
    return math.sqrt(2.0 * math.log(1.25 / delta)) / noise_multiplier


def hu_sensitivity(*, d_m: int, rho: float, lam: float, c1: float, n_parties: int,
                   b1: float | None = None, b_x: float | None = None, b_y: float | None = None,
                   b_z: float | None = None) -> float:
    """l2 sensitivity of the share D_m x_m, **as published** [Hu, Lemma 1]:
    ``C = 3/(d_m ρ) · [λ c_1 + (1 + Mρ) b_1]``.

    The proof bounds ``‖y‖ + ρ‖z‖ + ρ Σ_{k≠m} ‖x̃_k‖`` by ``(1 + Mρ) b_1``; with separate bounds
    on the three variables (``b_x`` on each party's model, ``b_y`` on the dual, ``b_z`` on z) the
    same step gives ``λ c_1 + b_y + ρ b_z + (M − 1) ρ b_x`` in the bracket, which equals the
    published form when all three are b_1 (the published one keeps an extra ρ b_1).
    Caveat (docs/algorithms.md §1): the proof's step ‖(D_mᵀD_m)⁻¹‖ = 1/d_m does not follow from unit-norm rows;
    this is the paper's calibration, reported as such. λ and ρ are in the paper's scaling
    (summed loss, [Hu, eq. 1]).
    """
    if b1 is not None:
        return 3.0 / (d_m * rho) * (lam * c1 + (1.0 + n_parties * rho) * b1)
    return 3.0 / (d_m * rho) * (lam * c1 + b_y + rho * b_z + (n_parties - 1) * rho * b_x)
