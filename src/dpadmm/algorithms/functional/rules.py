"""Functional quantile regression's public rules [Zhou]: the method presets, the penalties and their
subgradients, the step-size rules (including [Zhou, Thm 2]'s) and the smoothing schedule of the check loss.
"""

from __future__ import annotations

import math

import numpy as np

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
