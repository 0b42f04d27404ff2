"""Distributed penalised quantile regression on FPCA scores: F-ADMM and FDP-ADMM — [Zhou, eq. 14–24].

Problem [Zhou, eq. 13]: ``min Σ_i [ (1/m_i) Σ_j ρ_τ(y_ij − A_ij w_i) + (λ/M) P(w_i) ]`` s.t. ``w_i = w``,
with the check loss ρ_τ (``kernels.quantile``) and P ∈ {ℓ1: ‖w‖₁, ℓ2: ½‖w‖², elastic net:
α‖w‖₁ + (1 − α)½‖w‖²} (ℓ2 as ½‖·‖² so that P'(w) = w, as in [Zhou, §5.2]). An optional unpenalised
intercept is a constant score column (the last coordinate) that P skips.

Round l (the engine's round l − 1), worker i, given the hub's ``w^{l−1}``:

- dual [Zhou, eq. 18/24] (deferred from the previous round so that messages keep the paper's
  order): ``γ_i^{l−1} = γ_i^{l−2} − ρ(w̃_i^{l−1} − w^{l−1})`` (skipped at l = 1, γ⁰ = 0);
- local step, one of
  * ``exact`` (F-ADMM [Zhou, eq. 16]): ``w_i = argmin f_i(w) + (λ/M)P(w) − ⟨γ_i, w − w^{l−1}⟩
    + ρ/2‖w − w^{l−1}‖²``, solved to machine precision by semismooth Newton on the Moreau-smoothed
    check loss with a bandwidth homotopy h → 1e-6 (piecewise quadratic: Newton terminates once
    the residual signs are identified);
  * ``linearized`` (FDP-ADMM [Zhou, eq. 19, 21; §5.1]):
    ``w_i = [ g_i − (λ/M)P'(w̃_i) + γ_i + ρ w + w̃_i/η_i^l ] / (ρ + 1/η_i^l)``,
    ``g_i = (1/m_i) Σ_j A_ijᵀ (τ − 1{y_ij − A_ij w̃_i ≤ 0})``;
- noise [Zhou, eq. 22, Thm 1]: ``w̃_i = w_i + N(0, σ_{i,l}² I)`` with ``σ_{i,l} = z Δ_{i,l}``,
  ``Δ_{i,l} = 2c_1/(m_i(ρ + 1/η_i^l))`` — the *corrected* sensitivity (docs/algorithms.md §3 erratum: m_i, not
  m_i²) — and ``z = sqrt(2 ln(1.25/δ))/ε`` for a per-iteration (ε, δ) [Thm 1] (or z calibrated to a
  total budget). For the exact step Δ = 2c_1/(m_i ρ) (the 1/η → 0 limit: the objective is
  ρ-strongly convex and one replaced sample changes it by a 2c_1/m_i-Lipschitz function);
- message worker → hub: ``(w̃_i^l, γ_i^{l−1})`` [Zhou, Alg. 2];
- hub [Zhou, eq. 17/23]: ``w^l = mean_i w̃_i^l − mean_i γ_i^{l−1}/ρ``; output ``w^L`` (paper) or, beyond
  the paper, the average of ``w^l`` over the last ``average_last`` fraction of rounds (post-processing).

Step size [Zhou, Thm 2] (``step="paper"``):
``η_i^l = c_w/sqrt(2l) · ((c_1 + λc_2/M)² + 8K c_1² ln(1.25/δ)/(m_i² ε²))^{−1/2}`` (the last term is 0
without privacy); ``step="constant"``: η_i^l = η₀ (beyond the paper).

Batched layout (the math is written once; a single worker is the batch of one): a party holds
``W`` workers' data ``A`` (G, W, m, K), ``y`` (G, W, m) for ``G`` independent data sets (e.g.
repetitions) and runs ``S`` settings at once (τ, response shift, noise multiplier, λ): iterates
are (G, W, S, K). The estimator uses one party per worker (G = W = S = 1); the reproductions use
one 'virtual party' holding every worker and every (τ, privacy) setting of a repetition.

| symbol | code |
|--------|------|
| A_ij (clipped scores, ‖A_ij‖ ≤ c_1) | ``PartyConfig.A`` |
| y_ij | ``PartyConfig.y`` (+ ``settings.shift``) |
| w_i, w̃_i, γ_i | ``PartyState.w``, ``PartyState.w_tilde``, ``PartyState.gamma`` |
| w | ``HubState.w`` |
| τ, λ, ρ, c_1, c_w, c_2 | ``Settings.tau``, ``Settings.lam``, ``rho``, ``c1``, ``c_w``, ``c2`` |
| z = σ/Δ | ``Settings.noise_multiplier`` (0 = non-private) |
| η_i^l | :func:`step_size` |
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, NamedTuple

import numpy as np

from ..kernels.quantile import (
    check_loss, smoothed_check_curvature, smoothed_check_grad, smoothed_check_loss,
)
from ..privacy.events import RECORD_REPLACE, GaussianRelease

PENALTIES = ("l1", "l2", "elasticnet")
FULL_LEVELS = (1e-2, 1e-4, 1e-6)
NEWTON_ITERATIONS = 20
WARM_LEVELS = (1e-6,)  # smoothing bandwidths of the exact local solve after the first round
LOCAL_STEPS = ("linearized", "exact")
STEP_RULES = ("paper", "constant", "decay", "smooth")

#: Method presets (beyond the paper unless stated). Every method works on *standardised* data (the
#: estimator maps back): the response as (y − a)/b with a public or privately estimated location a and
#: scale b, and the scores divided by their standard deviations (``standardize="each"``) or by the
#: largest one (``"common"``, keeping the raw scores' relative scales as in the paper), so that step
#: sizes, ρ, λ, c_1 and the stopping tolerance mean the same thing whatever the data's units.
#: ``paper`` is FDP-ADMM as published ([Zhou, Thm 2] step, output w^L); ``fast`` (default) uses the
#: linearised step [Zhou, eq. 21] on the Moreau-smoothed check loss with a bandwidth h_l shrinking
#: geometrically from 1 to 10⁻³ over the first half of the rounds and the step η_l = η₀·h_l (a gradient step on a smooth function:
#: the subgradient step oscillates at amplitude ~η and never settles on nearly noiseless data), and
#: outputs the average of w^l over the last half of the rounds (post-processing); ``exact`` is F-ADMM [Zhou, eq. 16] with exact local solves,
#: stopped when the primal and dual residuals are below ``tol`` (noise, if any, with Δ = 2c_1/(m_i ρ)).
#: ``c1`` is the clipping radius of the standardised scores (applied in private fits only).
METHODS: dict[str, dict] = {
    "paper": {"local_step": "linearized", "step": "paper", "standardize": "common", "average_last": 0.0,
              "iterations": 300, "c1": 3.0, "eta0": 1.0, "tol": 0.0, "adapt_rho": False},
    "fast": {"local_step": "linearized", "step": "smooth", "standardize": "each", "average_last": 0.5,
             "iterations": 200, "c1": 4.0, "eta0": 1.0, "tol": 0.0, "adapt_rho": False,
             "smooth": (1.0, 0.0, 1e-3)},
    "exact": {"local_step": "exact", "step": "constant", "standardize": "each", "average_last": 0.0,
              "iterations": 500, "c1": 4.0, "eta0": 1.0, "tol": 1e-5, "adapt_rho": True},
}


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True, eq=False)
class Settings:
    """The S settings run side by side (arrays of shape (S,)); all public.

    ``tau`` quantile levels in (0, 1); ``shift`` added to y (the simulation's τ-dependent error
    centring); ``noise_multiplier`` z = σ/Δ (0: no noise); ``lam`` λ ≥ 0; ``eps_iter``/``delta_iter``
    the per-iteration budget entering the Thm 2 step size (inf/1 without privacy).
    """

    tau: np.ndarray
    shift: np.ndarray
    noise_multiplier: np.ndarray
    lam: np.ndarray
    eps_iter: np.ndarray
    delta_iter: np.ndarray

    @staticmethod
    def make(tau, *, shift=0.0, noise_multiplier=0.0, lam=0.05, eps_iter=math.inf, delta_iter=1.0) -> "Settings":
        arrs = np.broadcast_arrays(*(np.atleast_1d(np.asarray(v, float)) for v in
                                     (tau, shift, noise_multiplier, lam, eps_iter, delta_iter)))
        return Settings(*(np.ascontiguousarray(a) for a in arrs))

    @property
    def size(self) -> int:
        return self.tau.shape[0]


def penalty_value(w: np.ndarray, penalty: str, l1_ratio: float, free_last: bool) -> np.ndarray:
    """P(w) over the last axis (the intercept coordinate excluded when ``free_last``)."""
    v = w[..., :-1] if free_last else w
    l1 = np.abs(v).sum(-1)
    l2 = 0.5 * (v * v).sum(-1)
    if penalty == "l1":
        return l1
    if penalty == "l2":
        return l2
    return l1_ratio * l1 + (1.0 - l1_ratio) * l2


def penalty_subgradient(w: np.ndarray, penalty: str, l1_ratio: float, free_last: bool) -> np.ndarray:
    """P'(w): sgn(w) for ℓ1 [Zhou, §5.1], w for ℓ2 [§5.2], their mix for the elastic net."""
    if penalty == "l1":
        g = np.sign(w)
    elif penalty == "l2":
        g = w.copy()
    else:
        g = l1_ratio * np.sign(w) + (1.0 - l1_ratio) * w
    if free_last:
        g[..., -1] = 0.0
    return g


def step_size(rule: str, l: int, *, c_w: float, c1: float, c2: float, lam: np.ndarray, n_workers: int, K: int,
              m: int, eps_iter: np.ndarray, delta_iter: np.ndarray, eta0: float, decay_start: float = math.inf,
              smooth: tuple[float, float, float] = (0.0, 1.0, 0.0)) -> np.ndarray:
    """η_i^l per setting, (S,). ``paper``: [Zhou, Thm 2]; ``constant``: η₀; ``decay``: η₀ for l ≤ l₀,
    then η₀·l₀/l, with l₀ = ``decay_start`` (a public schedule); ``smooth``: η₀·h_l with the smoothing
    bandwidth h_l of :func:`bandwidth` (a gradient step on the smoothed loss, whose gradient is
    (1/h_l)-Lipschitz for standardised scores)."""
    if rule == "constant":
        return np.full(np.shape(lam), float(eta0))
    if rule == "smooth":
        return np.full(np.shape(lam), float(eta0) * bandwidth(l, smooth))
    if rule == "decay":
        return np.full(np.shape(lam), float(eta0) * min(1.0, decay_start / l))
    with np.errstate(divide="ignore", invalid="ignore"):
        priv = np.where(np.isfinite(eps_iter),
                        8.0 * K * c1 * c1 * np.log(1.25 / delta_iter) / (m * m * eps_iter * eps_iter), 0.0)
    return c_w / math.sqrt(2.0 * l) / np.sqrt((c1 + lam * c2 / n_workers) ** 2 + priv)  # [Zhou, Thm 2]


def bandwidth(l: int, smooth: tuple[float, float, float]) -> float:
    """Smoothing bandwidth of round l: ``h_l = max(h_min, h_0 q^{l−1})`` for ``smooth = (h_0, q, h_min)``
    (0: the exact subgradient of [Zhou, eq. 21]). A public schedule in standardised units."""
    h0, q, hmin = smooth
    if h0 <= 0:
        return 0.0
    return max(hmin, h0 * q ** (l - 1))


def smooth_schedule(smooth: tuple[float, float, float], rounds: int, average_last: float) -> tuple[float, float, float]:
    """Fill in an automatic decay (q = 0): h reaches h_min when the averaging window starts (or at the
    last round), ``q = (h_min/h_0)^{1/l₀}``."""
    h0, q, hmin = (float(v) for v in smooth)
    if h0 > 0 and q <= 0:
        l0 = max(1.0, rounds * (1.0 - average_last) if average_last > 0 else rounds - 1.0)
        q = (hmin / h0) ** (1.0 / l0)
    return h0, q, hmin


# ----------------------------------------------------------------------------- messages / states
class HubMessage(NamedTuple):
    """Hub → workers: the round number, the consensus ``w^{l−1}`` (G, S, K) and the penalty ρ_l of the
    coming round (``None``: the configured ρ; set by residual balancing, a function of released values)."""

    round: int
    w: np.ndarray
    rho: float | None = None


class PartyMessage(NamedTuple):
    """Workers → hub: ``w̃_i^l`` and ``γ_i^{l−1}`` (G, W, S, K) [Zhou, Alg. 2]."""

    w_tilde: np.ndarray
    gamma: np.ndarray


class PartyState(NamedTuple):
    w: np.ndarray
    w_tilde: np.ndarray
    gamma: np.ndarray
    w_hub: np.ndarray
    rho: float = math.nan  # ρ of the last local step (for the deferred dual update); nan: the configured ρ


@dataclass(frozen=True, eq=False)
class PartyConfig:
    """What a party (one worker, or a virtual party of W workers) holds; A and y never leave it."""

    name: str
    A: np.ndarray  # (G, W, m, K) clipped scores (+ intercept column last if fit_intercept)
    y: np.ndarray  # (G, W, m)
    settings: Settings
    rho: float
    n_workers: int  # M over all parties (for λ/M)
    penalty: str = "l1"
    l1_ratio: float = 0.5
    fit_intercept: bool = False
    local_step: str = "linearized"
    step: str = "paper"
    c1: float = 1.0
    c2: float = 1.0
    c_w: float = 1.0
    eta0: float = 1.0
    decay_start: float = math.inf
    smooth: tuple[float, float, float] = (0.0, 1.0, 0.0)  # (h_0, q, h_min) of :func:`bandwidth`; h_0 = 0: subgradient
    newton_tol: float = 1e-10
    emit_events: bool = True
    worker_names: tuple[str, ...] = ()
    AT: np.ndarray | None = None  # (G, W, K, m) contiguous transpose of A, built by make_party
    AT32: np.ndarray | None = None  # float32 copy of AT (products with 0/1 masks)
    Ys: np.ndarray | None = None  # (G, W, m, S) responses y + shift per setting
    colsum: np.ndarray | None = None  # (G, W, K) Σ_j A_j

    @property
    def m(self) -> int:
        return self.A.shape[2]

    @property
    def K(self) -> int:
        return self.A.shape[3]


def make_party(name: str, A: np.ndarray, y: np.ndarray, settings: Settings, **options) -> tuple[PartyConfig, PartyState]:
    """Build a party; A (m, K) / y (m,) are promoted to (1, 1, m, K) / (1, 1, m)."""
    A = np.asarray(A, float)
    y = np.asarray(y, float)
    if A.ndim == 2:
        A, y = A[None, None], y[None, None]
    A = np.ascontiguousarray(A)
    AT = np.ascontiguousarray(np.swapaxes(A, -1, -2))
    cfg = PartyConfig(name=name, A=A, y=np.ascontiguousarray(y), settings=settings, AT=AT,
                      AT32=AT.astype(np.float32), Ys=np.ascontiguousarray(y[..., None] + settings.shift),
                      colsum=A.sum(-2), **options)
    G, W, _, K = cfg.A.shape
    zero = np.zeros((G, W, settings.size, K))
    return cfg, PartyState(zero, zero, zero, np.zeros((G, settings.size, K)))


def setup_party(name: str, A, y, settings: Settings, options: Mapping[str, Any]):
    """Worker-side setup (``PartySpec.setup``)."""
    return make_party(name, A, y, settings, **options)


# ----------------------------------------------------------------------------- local math
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


def _refuse_round(cfg: PartyConfig, l: int, eta) -> None:
    from ..privacy.policy import PolicyRefusal

    raise PolicyRefusal(f"party {cfg.name!r} refused round {l} and released nothing: the hub's rho = {cfg.rho!r}"
                        + ("" if eta is None else f" with step sizes eta = {np.asarray(eta).tolist()}")
                        + " (the sensitivity 2c1/(m(rho + 1/eta)) needs rho finite > 0 and eta > 0)", "INVALID_ARGUMENT")


def party_step(cfg: PartyConfig, state: PartyState, inbox: HubMessage, *, rng: np.random.Generator):
    """Deferred dual update [Zhou, eq. 24], local step [eq. 16 or 21], Gaussian noise [eq. 22, Thm 1]."""
    l = inbox.round + 1
    w_hub = inbox.w
    gamma = state.gamma
    if l > 1:
        rho_prev = cfg.rho if math.isnan(state.rho) else state.rho
        gamma = gamma - rho_prev * (state.w_tilde - w_hub[:, None])  # [Zhou, eq. 24] (γ^{l−1})
    if inbox.rho is not None and inbox.rho != cfg.rho:
        cfg = replace(cfg, rho=float(inbox.rho))  # this round's ρ_l (public: chosen by the hub)
    s = cfg.settings
    noised = np.asarray(s.noise_multiplier) > 0
    if np.any(noised) and not (math.isfinite(cfg.rho) and cfg.rho > 0):  # before it enters any computation
        _refuse_round(cfg, l, None)
    eta = step_size(cfg.step, l, c_w=cfg.c_w, c1=cfg.c1, c2=cfg.c2, lam=s.lam, n_workers=cfg.n_workers,
                    K=cfg.K, m=cfg.m, eps_iter=s.eps_iter, delta_iter=s.delta_iter, eta0=cfg.eta0,
                    decay_start=cfg.decay_start, smooth=cfg.smooth)
    if cfg.local_step == "exact":
        # private: a cold start and the full homotopy, so the release is a function of (data, v) only, not of
        # the worker's private previous solution; non-private: warm start (a speed-up only)
        private = bool(np.any(s.noise_multiplier > 0))
        w = exact_local_solve(cfg, w_hub[:, None] + gamma / cfg.rho,
                              np.zeros_like(state.w) if private else state.w,
                              levels=WARM_LEVELS if l > 1 and not private else FULL_LEVELS)  # [Zhou, eq. 16]
    else:
        w = _linearized(cfg, state, w_hub, gamma, eta, bandwidth(l, cfg.smooth))  # [Zhou, eq. 21]
    delta_s = sensitivity(cfg, eta)
    sigma = s.noise_multiplier * delta_s  # [Zhou, Thm 1] with the corrected sensitivity
    eta_ok = cfg.local_step == "exact" or bool(np.all(np.asarray(eta) > 0))  # the exact step's bound has no η
    if np.any(noised) and not (eta_ok and np.all(np.isfinite(sigma[noised]) & (sigma[noised] > 0))):
        # the bound's premise ρ + 1/η > 0 for every setting, checked every round: a hub ρ between −1/η₀ and −1/η₁
        # made one setting's σ negative, released but uncharged (REDTEAM_POLICY R8)
        _refuse_round(cfg, l, eta)
    events = []
    if np.any(sigma > 0):
        w_tilde = w + sigma[:, None] * rng.standard_normal(w.shape)  # [Zhou, eq. 22]
        if cfg.emit_events:
            names = cfg.worker_names or (cfg.name,)
            for si in range(s.size):
                if noised[si]:  # one event per noised (released) setting
                    tag = names[0] if (s.size == 1 and len(names) == 1) else f"{cfg.name}[setting {si}]"
                    events.append(GaussianRelease(tag, inbox.round, float(delta_s[si]), float(sigma[si]),
                                                  RECORD_REPLACE))
    else:
        w_tilde = w
    new = PartyState(w=w, w_tilde=w_tilde, gamma=gamma, w_hub=w_hub, rho=cfg.rho)
    return new, PartyMessage(w_tilde=w_tilde, gamma=gamma), events


def party_diagnostics(cfg: PartyConfig, state: PartyState) -> dict:
    """Monitoring (not messages): f_i(w̃_i), (λ/M)P(w̃_i) and ‖w̃_i − w‖ per worker: (G, W, S)."""
    s = cfg.settings
    loss = mean_check_loss(cfg, state.w_tilde)
    pen = (s.lam / cfg.n_workers) * penalty_value(state.w_tilde, cfg.penalty, cfg.l1_ratio, cfg.fit_intercept)
    gap = np.linalg.norm(state.w_tilde - state.w_hub[:, None], axis=-1)
    return {"loss": loss, "penalty": pen, "gap": gap}


def party_coef(cfg: PartyConfig, state: PartyState) -> np.ndarray:
    """The worker's local model (stays at the worker; exposed for the simulation API)."""
    return state.w.copy()


# ----------------------------------------------------------------------------- hub
@dataclass(frozen=True, eq=False)
class HubConfig:
    """The central machine: ρ, the parties, the batch shape and the output rule."""

    rho: float
    party_names: tuple[str, ...]
    shape: tuple[int, int, int]  # (G, S, K)
    average_last: float = 0.0  # 0: output w^L [Zhou, Alg. 2]; f ∈ (0, 1]: mean of w^l over the last f·L rounds
    rounds: int = 1
    tol: float = 0.0
    rho_in_objective: float | None = None
    adapt_rho: bool = False  # residual balancing [Boyd et al. 2011, §3.4.1]: ρ ×/÷ 2 when one residual is 10× the other


class HubState(NamedTuple):
    round: int
    w: np.ndarray
    w_sum: np.ndarray
    n_sum: int
    primal_residual: float
    dual_residual: float
    rho: float = math.nan  # ρ_l of the coming round

    @property
    def output(self) -> np.ndarray:
        """The released estimate: w^L, or the running average (post-processing of released w^l)."""
        return self.w_sum / self.n_sum if self.n_sum else self.w


def init_hub(cfg: HubConfig):
    """w⁰ = 0 [Zhou, Alg. 2]."""
    w0 = np.zeros(cfg.shape)
    st = HubState(0, w0, np.zeros(cfg.shape), 0, math.inf, math.inf, cfg.rho)
    return st, {name: HubMessage(0, w0, cfg.rho) for name in cfg.party_names}


def hub_step(cfg: HubConfig, state: HubState, outboxes: Mapping[str, PartyMessage], *, rng):
    """w^l = mean_i w̃_i^l − mean_i γ_i^{l−1}/ρ [Zhou, eq. 17/23] over every worker of every party."""
    wt = np.concatenate([outboxes[p].w_tilde for p in cfg.party_names], axis=1)
    gm = np.concatenate([outboxes[p].gamma for p in cfg.party_names], axis=1)
    rho = cfg.rho if math.isnan(state.rho) else state.rho  # the ρ_l the workers used this round
    w = wt.mean(1) - gm.mean(1) / rho
    t = state.round + 1
    start = cfg.rounds - max(1, int(round(cfg.average_last * cfg.rounds))) if cfg.average_last > 0 else cfg.rounds
    w_sum, n_sum = state.w_sum, state.n_sum
    if cfg.average_last > 0 and t > start:
        w_sum, n_sum = w_sum + w, n_sum + 1
    r = float(np.sqrt(np.mean(np.sum((wt - w[:, None]) ** 2, -1))))
    d = float(rho * np.sqrt(np.mean(np.sum((w - state.w) ** 2, -1))))
    rho_next = rho
    if cfg.adapt_rho and t > 1:
        if r > 10.0 * d:
            rho_next = min(rho * 2.0, 1e4 * cfg.rho)
        elif d > 10.0 * r:
            rho_next = max(rho / 2.0, 1e-4 * cfg.rho)
    new = HubState(t, w, w_sum, n_sum, r, d, rho_next)
    return new, {name: HubMessage(t, w, rho_next) for name in cfg.party_names}, []


def hub_metrics(cfg: HubConfig, state: HubState, diagnostics: Mapping[str, dict]) -> dict:
    """Augmented objective Σ_i f_i(w̃_i) + (λ/M)P(w̃_i) + ρ‖w̃_i − w‖ [Zhou, §5] and the empirical loss
    (1/M) Σ_i f_i(w̃_i); arrays (G, S) for batched runs, floats for a single setting."""
    loss = np.concatenate([diagnostics[p]["loss"] for p in cfg.party_names], axis=1)
    pen = np.concatenate([diagnostics[p]["penalty"] for p in cfg.party_names], axis=1)
    gap = np.concatenate([diagnostics[p]["gap"] for p in cfg.party_names], axis=1)
    rho = cfg.rho if cfg.rho_in_objective is None else cfg.rho_in_objective
    aug = (loss + pen + rho * gap).sum(1)
    emp = loss.mean(1)
    out = {"augmented_objective": aug, "empirical_loss": emp, "primal_residual": state.primal_residual,
           "dual_residual": state.dual_residual}
    if aug.size == 1:
        out["augmented_objective"] = float(aug.ravel()[0])
        out["empirical_loss"] = float(emp.ravel()[0])
        out["objective"] = out["augmented_objective"]
    if cfg.tol > 0:
        out["converged"] = bool(state.primal_residual <= cfg.tol and state.dual_residual <= cfg.tol)
    return out


# ----------------------------------------------------------------------------- protocol (as data, for the network)
def _is_private(cfg: PartyConfig) -> bool:
    return bool(np.any(np.asarray(cfg.settings.noise_multiplier) > 0))


def _protocol():
    from ..protocol import Protocol
    from .policies import FUNCTIONAL

    from ..kernels.fpca import Basis
    from .functional_statistics import describe_curve_data, load_curve_data  # a worker reads its own curve file

    # setup: the worker's own curves -> scores on the public basis (setup_party_from_curves, defined below)
    return Protocol("functional-quantile", lambda *a: setup_party_from_curves(*a), party_step, party_diagnostics,
                    handlers={}, types=(HubMessage, PartyMessage, PartyState, Settings, Basis), model=party_coef,
                    private=_is_private, data_args=(1, 2), load=load_curve_data, describe=describe_curve_data,
                    policy=FUNCTIONAL)


PROTOCOL = _protocol()


def setup_party_from_curves(name: str, X, y, basis, score_scale, y_loc: float, y_scale: float, clip: float | None,
                            settings: Settings, options: Mapping[str, Any]):
    """Worker-side setup from the worker's own curves: scores on the public basis, standardised
    (``/score_scale``), clipped to ``‖A_ij‖ ≤ clip`` [Zhou, Lemma 2] (None: no clip, non-private), an
    intercept column if ``options["fit_intercept"]``, and the response as (y − a)/b."""
    from ..kernels.fpca import clip_rows

    A = clip_rows(basis.scores(np.asarray(X, float)) / score_scale, clip)
    if options.get("fit_intercept", False):
        A = np.concatenate([A, np.ones((A.shape[0], 1))], axis=1)
    return make_party(name, A, (np.asarray(y, float) - y_loc) / y_scale, settings, **options)
