"""Functional quantile regression, a worker's local math [Zhou]: residuals and check losses, the linearised step
[Zhou, eq. 21], the exact local solve [Zhou, eq. 16] on the smoothed check loss, and the sensitivity of a release
with the premises it needs.
"""

from __future__ import annotations

import math

import numpy as np

from ...kernels.quantile import check_loss, smoothed_check_curvature, smoothed_check_grad, smoothed_check_loss
from .messages import PartyConfig, PartyState
from .rules import FULL_LEVELS, LOCAL_STEPS, NEWTON_ITERATIONS, PENALTIES, STEP_RULES, penalty_subgradient

def _bmm(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Stacked matrix products ``X[b] @ Y[b]`` over the leading axes, one BLAS call per worker
    (numpy's stacked matmul is ~50x slower here for the thin K-column shapes)."""
    lead = X.shape[:-2]
    Xf = X.reshape((-1,) + X.shape[-2:])
    Yf = Y.reshape((-1,) + Y.shape[-2:])
    out = np.empty((Xf.shape[0], Xf.shape[1], Yf.shape[2]), dtype=np.result_type(Xf, Yf))
    for b in range(Xf.shape[0]):
        np.matmul(Xf[b], Yf[b], out=out[b])
    return out.reshape(lead + out.shape[-2:])


def _residuals(cfg: PartyConfig, w: np.ndarray) -> np.ndarray:
    """r = y + shift − A w for every (g, worker, sample, setting): (G, W, m, S)."""
    Aw = _bmm(cfg.A, np.swapaxes(w, -1, -2))
    Aw -= cfg.y[..., None]
    Aw -= cfg.settings.shift
    return np.negative(Aw, out=Aw)


def _At(cfg: PartyConfig, v: np.ndarray) -> np.ndarray:
    """(1/m) Σ_j A_jᵀ v_j per setting: v (G, W, m, S) → (G, W, S, K)."""
    return np.swapaxes(_bmm(cfg.AT, v), -1, -2) / cfg.m


def mean_check_loss(cfg: PartyConfig, w: np.ndarray) -> np.ndarray:
    """f_i(w) = (1/m) Σ_j ρ_τ(y_j − A_j w): (G, W, S)."""
    return check_loss(_residuals(cfg, w), cfg.settings.tau).mean(-2)


def _linearized(cfg: PartyConfig, st: PartyState, w_hub: np.ndarray, gamma: np.ndarray, eta: np.ndarray,
                h: float = 0.0) -> np.ndarray:
    """[Zhou, eq. 21] closed form (§5.1 for ℓ1, §5.2 for ℓ2).

    ``h = 0``: g = (1/m) Σ_j A_jᵀ ψ_τ(r_j), the subgradient ψ_τ = τ − 1{r ≤ 0} of the paper. ``h > 0``
    (beyond the paper): ψ = clip(r/h, τ − 1, τ), the gradient of the Moreau-smoothed check loss, so the
    step is a gradient step on a smooth function and settles as h_l → 0. Either way |ψ| ≤ max(τ, 1 − τ) ≤ 1,
    so one replaced sample moves g by at most 2c_1/m and the sensitivity of [Zhou, Lemma 2] (corrected) holds.
    """
    s = cfg.settings
    Aw = _bmm(cfg.A, np.swapaxes(st.w_tilde, -1, -2))
    if h > 0:
        psi = np.clip((cfg.Ys - Aw) / h, s.tau - 1.0, s.tau)  # smoothed-loss gradient, (G, W, m, S)
        g = np.swapaxes(_bmm(cfg.AT, psi), -1, -2) / cfg.m
    else:
        # g = (1/m) Σ_j A_jᵀ(τ − 1{r_j ≤ 0}) = (τ Σ_j A_j − Σ_j A_jᵀ 1{A_j w̃ ≥ y_j + shift}) / m
        below = np.greater_equal(Aw, cfg.Ys).astype(np.float32)  # 1{r ≤ 0}
        g = (s.tau[:, None] * cfg.colsum[:, :, None, :]
             - np.swapaxes(_bmm(cfg.AT32, below), -1, -2).astype(np.float64)) / cfg.m
    pen = penalty_subgradient(st.w_tilde, cfg.penalty, cfg.l1_ratio, cfg.fit_intercept)
    lam_m = (s.lam / cfg.n_workers)[:, None]
    inv_eta = (1.0 / eta)[:, None]
    num = g - lam_m * pen + gamma + cfg.rho * w_hub[:, None] + st.w_tilde * inv_eta
    return num / (cfg.rho + inv_eta)


def _weighted_gram(cfg: PartyConfig, cv: np.ndarray) -> np.ndarray:
    """(1/m) Σ_j cv_js A_j A_jᵀ for every (g, worker, setting): (G, W, S, K, K). Only the samples with
    cv ≠ 0 (inside the smoothing band, a few per K) enter, gathered before one BLAS product each."""
    G, W, m, K = cfg.A.shape
    S = cv.shape[-1]
    H = np.zeros((G, W, S, K, K))
    for g in range(G):
        for w in range(W):
            for s in range(S):
                c = cv[g, w, :, s]
                nz = np.flatnonzero(c)
                if nz.size:
                    An = cfg.A[g, w, nz]
                    H[g, w, s] = (An.T * c[nz]) @ An / m
    return H


def _smoothed_objective(cfg, w, v, h, lam_m, a1, a2, mask):
    r = _residuals(cfg, w)
    f = smoothed_check_loss(r, cfg.settings.tau, h).mean(-2)
    wp = w * mask
    hub = np.where(np.abs(wp) <= h, wp * wp / (2 * h), np.abs(wp) - h / 2)
    pen = a1 * hub.sum(-1) + a2 * 0.5 * (wp * wp).sum(-1)
    return f + lam_m * pen + 0.5 * cfg.rho * ((w - v) ** 2).sum(-1)


def exact_local_solve(cfg: PartyConfig, v: np.ndarray, w0: np.ndarray, lam_scale: float = 1.0,
                      levels: tuple[float, ...] = (1e-2, 1e-4, 1e-6)) -> np.ndarray:
    """argmin_w f_i(w) + (λ/M) P(w) + ρ/2 ‖w − v‖² [Zhou, eq. 16] for every batch entry.

    Semismooth Newton with backtracking on the Moreau-smoothed loss and penalty, bandwidth
    h = 1e-2, 1e-4, 1e-6 (each level warm-starts the next); the smoothed minimiser is within O(h) of
    the exact one. The objective is ρ-strongly convex, so every Newton system is well posed.
    ADMM rounds after the first warm-start from the previous local solution with ``levels`` = the
    finest bandwidths only (``WARM_LEVELS``).
    """
    s = cfg.settings
    tau = s.tau
    lam_m = lam_scale * s.lam[None, None, :] / cfg.n_workers
    if cfg.penalty == "l1":
        a1, a2 = 1.0, 0.0
    elif cfg.penalty == "l2":
        a1, a2 = 0.0, 1.0
    else:
        a1, a2 = cfg.l1_ratio, 1.0 - cfg.l1_ratio
    K = cfg.K
    mask = np.ones(K)
    if cfg.fit_intercept:
        mask[-1] = 0.0
    eye = np.eye(K)
    w = w0.copy()
    converged = True
    for h in levels:
        f_old = _smoothed_objective(cfg, w, v, h, lam_m, a1, a2, mask)
        stuck = np.zeros(f_old.shape, dtype=bool)
        for it in range(NEWTON_ITERATIONS):
            r = _residuals(cfg, w)
            gl = smoothed_check_grad(r, tau, h)
            cv = smoothed_check_curvature(r, tau, h)
            wp = w * mask
            grad = (-_At(cfg, gl)
                    + lam_m[..., None] * (a1 * np.clip(wp / h, -1, 1) + a2 * wp) * mask + cfg.rho * (w - v))
            H = _weighted_gram(cfg, cv)
            dpen = (a1 * (np.abs(wp) < h) / h + a2) * mask
            H = H + (lam_m[..., None] * dpen)[..., None] * eye + cfg.rho * eye
            d = -np.linalg.solve(H, grad[..., None])[..., 0]
            dec = -(grad * d).sum(-1)
            active = (dec > cfg.newton_tol * (1.0 + np.abs(f_old))) & ~stuck
            if not active.any():
                break
            if it == NEWTON_ITERATIONS - 1 and h == levels[-1]:
                converged = False
            t = active.astype(float)
            for _ls in range(30):  # backtracking (Armijo) for the entries still moving
                w_new = w + t[..., None] * d
                f_new = _smoothed_objective(cfg, w_new, v, h, lam_m, a1, a2, mask)
                bad = active & (f_new > f_old - 1e-4 * t * dec + 1e-13 * np.abs(f_old))
                if not bad.any():
                    break
                t = np.where(bad, t * 0.5, t)
            else:
                stuck |= bad  # no decrease at rounding level: this entry has converged for this h
                t = np.where(bad, 0.0, t)
                w_new = w + t[..., None] * d
                f_new = _smoothed_objective(cfg, w_new, v, h, lam_m, a1, a2, mask)
            w, f_old = w_new, np.where(t > 0, f_new, f_old)
    if not converged and tuple(levels) != FULL_LEVELS:
        # the warm start did not settle: the output must not depend on the (private) starting point, so
        # solve again from zero with the full homotopy [REDTEAM F15]
        return exact_local_solve(cfg, v, np.zeros_like(w0), lam_scale, FULL_LEVELS)
    return w


# ----------------------------------------------------------------------------- party step
def sensitivity_premises(cfg: PartyConfig) -> list[str]:
    """What the bound of :func:`sensitivity` assumes of the public settings, violated ones named (empty: all
    hold). Checked by a private party at Setup (``policies._functional_check``; REDTEAM_POLICY R4, R7):

    - τ ∈ (0, 1): the check loss' subgradient has |ψ_τ| ≤ max(τ, 1 − τ) ≤ 1 (τ = 1e6 scales the data part
      by 1e6 at the same noise); ``shift`` finite;
    - a convex penalty: λ ≥ 0 finite, ``penalty`` one of :data:`PENALTIES`, ``l1_ratio`` ∈ [0, 1] (a negative
      λ removes the strong convexity the exact step's 2c₁/(mρ) rests on);
    - a known step rule and local step, eps_iter > 0, δ_iter ∈ (0, 1], c_w, c2, η₀ finite and > 0 (η > 0).
    The clip ‖A_j‖ ≤ c₁ is enforced in :func:`setup_party_from_curves`; ρ + 1/η > 0 in :func:`party_step`."""
    s = cfg.settings
    bad = []

    def arr(v):
        return np.asarray(v, dtype=float)

    if not np.all((arr(s.tau) > 0) & (arr(s.tau) < 1)):
        bad.append(f"tau = {arr(s.tau).tolist()} (each in (0, 1))")
    if not np.all(np.isfinite(arr(s.shift))):
        bad.append("shift (finite)")
    if not np.all(np.isfinite(arr(s.lam)) & (arr(s.lam) >= 0)):
        bad.append(f"lam = {arr(s.lam).tolist()} (each finite and >= 0)")
    if not np.all(arr(s.eps_iter) > 0) or not np.all((arr(s.delta_iter) > 0) & (arr(s.delta_iter) <= 1)):
        bad.append("eps_iter > 0 and delta_iter in (0, 1]")
    if cfg.penalty not in PENALTIES:
        bad.append(f"penalty = {cfg.penalty!r} (one of {list(PENALTIES)})")
    if not (isinstance(cfg.l1_ratio, (int, float, np.number)) and 0.0 <= float(cfg.l1_ratio) <= 1.0):
        bad.append(f"l1_ratio = {cfg.l1_ratio!r} (in [0, 1])")
    if cfg.step not in STEP_RULES or cfg.local_step not in LOCAL_STEPS:
        bad.append(f"step = {cfg.step!r}, local_step = {cfg.local_step!r} (one of {list(STEP_RULES)}, "
                   f"{list(LOCAL_STEPS)})")
    for name in ("c_w", "c2", "eta0"):
        v = getattr(cfg, name)
        if not (isinstance(v, (int, float, np.number)) and math.isfinite(float(v)) and float(v) > 0):
            bad.append(f"{name} = {v!r} (finite and > 0)")
    return bad


def sensitivity(cfg: PartyConfig, eta: np.ndarray) -> np.ndarray:
    """Corrected [Zhou, Lemma 2] sensitivity 2c_1/(m_i(ρ + 1/η)) per setting (docs/algorithms.md §3 erratum);
    ``2c_1/(m_i ρ)`` for the exact step. Premises: :func:`sensitivity_premises` (checked at Setup),
    ρ + 1/η > 0 and finite for every setting (checked every round in :func:`party_step`)."""
    if cfg.local_step == "exact":
        return np.full(eta.shape, 2.0 * cfg.c1 / (cfg.m * cfg.rho))
    return 2.0 * cfg.c1 / (cfg.m * (cfg.rho + 1.0 / eta))
