"""The experts protocol with K ≥ 3 declared classes: each feature party's ONE multi-output DP ridge (issue 41).

The protocol is :mod:`.model`'s (one round; the label party sends its training labels once, every other party fits
and perturbs its model once, keeps it, and answers scores on NEW records only) with a class label:

1. the label party DECLARES its K classes (public; in a private run never read off the labels: K is the release's
   shape) and sends each training row's one-hot target ``t_i = e_{y_i} ∈ R^K`` (:func:`one_hot`) — of its exact
   labels (not protected), or with ``label_epsilon`` of its one k-ary randomized-response release
   (:func:`dpadmm.privacy.label_mechanisms.k_randomized_response`; the other parties see only that release);
2. party m projects every target row it receives onto the unit ball ``‖t_i‖ ≤ 1`` and its rows to ``‖d_i‖ ≤ R``
   itself, whatever it was sent, fits the multi-output ridge
   ``F(X) = (1/n) Σ_i ½‖Xᵀa_i − t_i‖² + (λ/2)‖X‖_F²`` (``X ∈ R^{(d+1)×K}``, ``a_i = (d_i, R)``, ``‖a_i‖ ≤ R_a = √2 R``)
   in closed form and releases ``X̂ + N(0, σ² I)`` on all (d+1)K entries — ONE Gaussian release, whatever K
   (:func:`fit_multiclass_expert`);
3. its scores ``Xᵀa`` (K per record) on new records (post-processing) go to the label party, which stacks them with
   its own multinomial model (:mod:`.stack_multiclass`).

Sensitivity (enforced, proof): the single-output bound times the target-norm bound. Let the targets lie in the ball
``‖t_i‖ ≤ τ`` (τ = 1 here: one-hot rows, and the party's projection enforces it). Then
``F(X*) ≤ F(0) = (1/2n) Σ‖t_i‖² ≤ τ²/2``; in closed form ``X* = (BᵀB + λI)⁻¹Bᵀ(T/√n)`` with ``B = A/√n``, whose
operator has norm ``≤ 1/(2√λ)``, and ``‖T/√n‖_F ≤ τ``, so ``‖X*‖_F ≤ ρ = τ/(2√λ)``. On that ball a row's residual
``r_i = Xᵀa_i − t_i`` has ``‖r_i‖ ≤ ‖X‖_op R_a + τ ≤ τ(R_a/(2√λ) + 1)``, and the row's gradient ``a_i r_iᵀ`` has
Frobenius norm ``‖a_i‖‖r_i‖ ≤ L = τ R_a(R_a/(2√λ) + 1)`` — exactly τ times the single-output squared loss's L
(:func:`.regression.lipschitz`). Replacing one record (row and target), F is λ-strongly convex in the Frobenius
inner product and the argument of :mod:`.regression` carries over word for word with matrices:
``‖X* − X'*‖_F ≤ 2L/(nλ)``; the closed form is checked to ``‖∇F(X̂)‖_F ≤ γ`` (nothing released otherwise), so
``Δ_F = τ·Δ_1`` with Δ_1 the single-output squared-loss bound (:func:`.regression.sensitivity`). The release with
``σ = zΔ_F`` on the vectorised X̂ is one Gaussian mechanism of noise multiplier z under the record relation (the
ℓ2 norm of the vectorisation is the Frobenius norm), accounted like the binary expert's single release.

The ridge: :func:`.regression.expert_lambda` for the squared loss with the noise norm ``zΔ√((d+1)K)`` of all the
released entries (public quantities only: n, d, K, R, z).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ...data.prepare import clip_rows
from ...exceptions import PrivacyPreconditionError
from ...privacy.events import RECORD_REPLACE, GaussianRelease
from ...privacy.mechanisms import gaussian
from . import regression as xr
from .model import GRADIENT_TOLERANCE, R_RANGE, augment, public_range_ok

#: the Setup's ``loss`` naming this target (the labels a K-column matrix of one-hot rows)
LOSS = "multiclass"
#: the bound τ on a target row's norm the party enforces (one-hot rows have norm 1)
TARGET_NORM = 1.0


def one_hot(index, k: int) -> np.ndarray:
    """Step 1: the (n, K) one-hot targets of class indices ``0 ≤ index < K``."""
    index = np.asarray(index, dtype=np.int64)
    out = np.zeros((index.size, int(k)))
    out[np.arange(index.size), index] = 1.0
    return out


def project_targets(T) -> np.ndarray:
    """Step 2's enforcement: every row scaled onto the ball of radius :data:`TARGET_NORM` (the proof's premise)."""
    T = np.asarray(T, dtype=np.float64)
    norms = np.linalg.norm(T, axis=1)
    return T / np.maximum(norms / TARGET_NORM, 1.0)[:, None]


def sensitivity(n: int, R: float, lam: float) -> float:
    """Δ_F = τ·Δ_1: the single-output squared-loss bound times the target-norm bound (module docstring)."""
    return TARGET_NORM * xr.sensitivity(n, R, lam, "squared", xr.HUBER_KAPPA)


def expert_lambda(n: int, d: int, k: int, R: float, noise_multiplier, lam: float, noise_norm: float) -> float:
    """The smallest admissible ridge with noise norm ``zΔ√((d+1)K) ≤ noise_norm`` (public quantities only)."""
    return xr.expert_lambda(n, (d + 1) * int(k) - 1, R, noise_multiplier, lam, noise_norm / TARGET_NORM, "squared",
                            xr.HUBER_KAPPA)


def _solve(A, T, lam: float, gtol: float) -> np.ndarray:
    """The closed form ``(AᵀA/n + λI)⁻¹AᵀT/n``, then the checked bound ``‖∇F‖_F ≤ gtol``."""
    n, k = A.shape
    G = A.T @ A
    G = np.asarray(G.toarray() if sp.issparse(G) else G) / n + lam * np.eye(k)
    AtT = np.asarray(A.T @ T) / n
    X = np.linalg.solve(G, AtT)
    if not float(np.linalg.norm(G @ X - AtT)) <= gtol:  # ∇F = (AᵀA/n + λI)X − AᵀT/n; a NaN fails too
        raise RuntimeError(f"the expert's solver did not reach ‖∇F‖ ≤ {gtol:.3g}; its sensitivity bound would not "
                           "hold, so nothing is released")
    return X


def fit_multiclass_expert(D, targets, *, R: float, lam: float, noise_multiplier, rng: np.random.Generator,
                          party: str = "party2", noise_norm: float = 0.1):
    """Step 2: ``(coef (d+1, K), info, events)``. ``targets``: one row per training row (K ≥ 2 columns), projected
    onto the unit ball here; the rows clipped to norm R here, whatever the caller sends."""
    T = np.asarray(targets, dtype=np.float64)
    if T.ndim != 2 or T.shape[0] != D.shape[0] or T.shape[1] < 2 or not np.all(np.isfinite(T)):
        raise ValueError(f"party {party!r}: the targets it is sent must be one finite row of K >= 2 numbers per "
                         "training row; nothing released")
    T = project_targets(T)
    D = clip_rows(D, R)
    n, d = D.shape
    k = T.shape[1]
    private = noise_multiplier is not None
    lam_used = expert_lambda(n, d, k, R, noise_multiplier, lam, noise_norm) if private else float(lam)
    Delta = sensitivity(n, R, lam_used)
    if private and not public_range_ok(R, lam_used, Delta, noise_multiplier):
        raise PrivacyPreconditionError(
            f"party {party!r}: R = {R:g}, the ridge {lam_used:g} or the sensitivity {Delta:g} is outside the float range "
            f"the proof holds in (R in [{R_RANGE[0]:g}, {R_RANGE[1]:g}], λ, Δ and σ finite > 0); nothing released; "
            "pass a row clip, λ and noise norm of ordinary size")
    gtol = GRADIENT_TOLERANCE * 2.0 * TARGET_NORM * xr.lipschitz(R, lam_used, "squared", xr.HUBER_KAPPA) / n
    try:
        X = _solve(augment(D, R), T, lam_used, gtol)
    except RuntimeError:
        raise
    except Exception:  # e.g. a singular system: one line naming no value computed from the data
        raise RuntimeError("the expert's solver failed; its sensitivity bound would not hold, so nothing is "
                           "released") from None
    info = {"lam": lam_used, "sensitivity": Delta, "sigma": 0.0, "rows": n, "columns": d, "classes": k}
    if not private:
        return X, info, []
    sigma = float(noise_multiplier) * Delta
    info["sigma"] = sigma
    noise = gaussian(rng, sigma, X.size).reshape(X.shape)
    return X + noise, info, [GaussianRelease(party, 0, Delta, sigma, RECORD_REPLACE)]


def expert_scores(coef: np.ndarray, D, R: float) -> np.ndarray:
    """A party's K scores per row of ``D`` (clipped as in training): post-processing of its release."""
    return np.asarray(augment(clip_rows(D, R), R) @ coef)
