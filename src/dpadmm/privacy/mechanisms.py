"""Noise samplers, clipping, and the sensitivity bounds of the mechanisms the code runs.

All samplers take an explicit ``numpy.random.Generator``; none touches global state.

Vertical ADMM sharing, feature side: the isotropic Gaussian share (``mechanism="gaussian"``)
--------------------------------------------------------------------------------------------
Party m holds ``D ∈ R^{N×d}`` (rows clipped to ``‖d_k‖ ≤ 1`` at setup). Each round it receives
N-vectors from the coordinator and forms ``v = y + ρ c_m`` (ADMM, [Hu, eq. 6]) or
``v = g̃ − ρ ũ_m`` (label-private protocol); ``c_m`` and ``ũ_m`` use the party's *released*
share, so v is a function of the transcript only. What the code does, in order:

1. receive: ``v ← clip_inf(v, V_∞)`` (record relation only), then ``v ← v·min(1, V/‖v‖)``;
2. compute: ``x = argmin_x λ_s/2‖x‖² + vᵀDx + ρ/2‖Dx‖² = −H⁻¹Dᵀv``, ``H = λ_s I + ρDᵀD`` (no
   projection, no damping, no dependence on the party's previous x);
3. release: ``u + σ ξ`` with ``u = Dx = −A(D) v``, ``A(D) = D H⁻¹ Dᵀ``, ξ ~ N(0, I_N).

Given the transcript so far v is fixed, so the round is a Gaussian mechanism on the map
``D ↦ u`` with ℓ2 sensitivity Δ = sup over neighbours ‖u(D) − u(D')‖; composing the rounds
adaptively is what the accountant does. Three facts, with s the singular values of D:

(F1) ``‖H⁻¹Dᵀ‖ = max_s s/(λ_s + ρ s²) ≤ 1/(2√(λ_s ρ))``, so ``‖x‖ ≤ B := V/(2√(λ_s ρ))``.
(F2) A(D) is symmetric with eigenvalues ``s²/(λ_s + ρ s²) ∈ [0, 1/ρ)``; hence ``‖u‖ < V/ρ``.
(F3) F_D is quadratic with Hessian H_D, so for any D', ``x_{D'} − x_D = −H_{D'}⁻¹ ∇F_{D'}(x_D)``.

**Any change of the whole block** (covers both relations): A(D) and A(D') are both in
``[0, I/ρ]`` (Loewner order), so ``A(D) − A(D') ∈ [−I/ρ, I/ρ]`` and
``‖u − u'‖ ≤ ‖A(D) − A(D')‖ V ≤ V/ρ``.

**One feature column of party m** ([Hu, Definition 2]: ``D' = D + δ e_jᵀ``, ``‖δ‖ ≤ Δ_c``, Δ_c = 1).
``∇F_{D'}(x) = e_j δᵀ(v + ρu) + ρ x_j D'ᵀδ``. With (F3),
``u' − u = −D'H'⁻¹e_j δᵀ(v + ρu) − ρ x_j D'H'⁻¹D'ᵀδ + δ x_j``, and by (F1), (F2), ``ρ‖A(D')‖ ≤ 1``:
``‖u' − u‖ ≤ Δ_c (V + ρ·V/ρ)/(2√(λ_s ρ)) + Δ_c B + Δ_c B = 4 B Δ_c = 2 Δ_c V/√(λ_s ρ)``.

**One record of party m** (row i replaced, ``‖d_i‖, ‖d_i'‖ ≤ 1``; ``|v_i| ≤ V_∞``).
``∇F_{D'}(x) = (v_i + ρ d_i'ᵀx) d_i' − (v_i + ρ d_iᵀx) d_i``, of norm ≤ ``2(V_∞ + ρB)``; with (F3)
``u' − u = −D'H'⁻¹∇F_{D'}(x) + e_i (d_i' − d_i)ᵀx``, so
``‖u' − u‖ ≤ (V_∞ + ρB)/√(λ_s ρ) + 2B``.

The sensitivity used is the smallest bound valid for the relation (:func:`ridge_share_sensitivity`).
Premises and the lines enforcing them: V and V_∞ by :func:`clip_share_input` inside
``vertical_sharing.party_step``; unit rows by ``vertical_sharing.make_party`` (rows clipped);
λ_s > 0 and an l2 penalty by the estimator (it refuses others for a private fit); no damping and
no projection of x in the gaussian mechanism (``party_step``). The proof is about the exact x-step:
the eigendecomposition solver is exact to rounding; the conjugate-gradient solver used for wide
blocks solves a private party's step to relative accuracy 1e-10 (never the inexact mode), a
deviation of that relative size from the map analysed here. ``tests/unit/test_vertical_privacy.py``
checks each bound against worst-case neighbours numerically.

Vertical label side: the coordinator's gradient message (``label_epsilon``)
----------------------------------------------------------------------------
Relation: one training label changes. Given the transcript, the coordinator's public score
``s = Σ_m ũ_m + b̃`` does not depend on labels (the shares are computed from earlier releases, the
public intercept b̃ from earlier noisy sums), so ``g_i = clip(ℓ'(s_i, Y_i), −C, C)`` depends on Y_i
alone: one label changes one coordinate of g, by at most ``W = min(2C, gap)`` (for the logistic
loss ``ℓ'(s, +1) − ℓ'(s, −1) = −1`` for every s, so gap = 1 and no clipping is needed), and the
sum ``Σ_i g_i`` (the intercept's statistic) by the same W. The coordinator releases
``(g + σ ξ, Σ_i g_i + σ ξ_0)``: a Gaussian mechanism with ℓ2 sensitivity ``√2 W``
(``W`` without intercept), see :func:`label_sensitivity`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit

from ..kernels.norms import safe_norm


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


def isotropic_gaussian(rng: np.random.Generator, sigma: float, n: int, size: int | None = None) -> np.ndarray:
    """N(0, σ² I_n) noise on a whole released N-vector (support all of R^n, unlike [Hu, eq. 16]).
    ``size`` gives ``size`` independent draws as rows of a ``(size, n)`` array."""
    shape = n if size is None else (size, n)
    return sigma * rng.standard_normal(shape)


def clip_share_input(v: np.ndarray, V: float, V_inf: float | None = None) -> np.ndarray:
    """What a party receives, clipped: ``|v_i| ≤ V_inf`` (if given), then ``‖v‖₂ ≤ V``.

    The coordinatewise clip first and the rescaling second keep both bounds (rescaling by a factor
    ≤ 1 cannot raise a coordinate). Works on ``(N,)`` or ``(k, N)`` (each row clipped).
    """
    if V_inf is not None:
        v = np.clip(v, -V_inf, V_inf)
    norm = safe_norm(v, axis=-1, keepdims=True)  # no underflow: a v ≠ 0 never passes as norm 0 (REDTEAM_POLICY R1)
    over = norm > V
    scale = np.where(over, V / np.where(over, norm, 1.0), 1.0)
    return v * scale


def ridge_share_sensitivity(*, relation: str, V: float, lam_sum: float, rho: float, V_inf: float | None = None,
                            column_change: float = 1.0) -> float:
    """ℓ2 sensitivity of the released share ``u = −D(λ_s I + ρDᵀD)⁻¹Dᵀv`` (module docstring proof).

    ``relation``: ``"feature_column"`` (one column of the block changes by ≤ ``column_change`` in ℓ2,
    [Hu, Definition 2]) or ``"record"`` (one row replaced, rows of norm ≤ 1, ``|v_i| ≤ V_inf``).
    Returns the smallest of the bounds proved for the relation, always ≤ V/ρ (any block change).
    """
    whole = V / rho
    root = math.sqrt(lam_sum * rho)
    B = V / (2.0 * root)
    if relation == "feature_column":
        return min(whole, 4.0 * B * column_change)
    if relation == "record":
        if V_inf is None:
            return whole
        return min(whole, (min(V_inf, V) + rho * B) / root + 2.0 * B)
    raise ValueError(f"relation must be 'feature_column' or 'record', got {relation!r}.")


def label_sensitivity(*, label_gap: float, clip: float, fit_intercept: bool) -> float:
    """ℓ2 sensitivity of the coordinator's release ``(g, Σ g)`` under one label change.

    ``W = min(2 clip, label_gap)`` bounds the change of the one coordinate g_i (``label_gap`` =
    ``sup_s |ℓ'(s, Y) − ℓ'(s, Y')|``, 1 for the logistic loss, ∞ for regression losses; clipping is
    1-Lipschitz so the gap survives it); the intercept's sum changes by the same W.
    """
    W = min(2.0 * clip, label_gap)
    return math.sqrt(2.0) * W if fit_intercept else W


def flip_probability(epsilon: float) -> float:
    """q = 1/(1 + e^ε) = expit(−ε): the flip probability of randomized response on one binary label at ε
    (ε-DP: keep/flip = e^ε). Computed without overflow — a label ε of 1,000 gives q = e^−1000 = 0."""
    return float(expit(-float(epsilon)))


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
