"""ε lower bounds from two samples of a scalar test statistic, fitted as Gaussian differential privacy.

A mechanism is μ-GDP (Dong, Roth & Su 2022) when telling its outputs on neighbours apart is no
easier than telling N(0, 1) from N(μ, 1). A composition of Gaussian releases whose sensitivities are
met is μ-GDP with ``μ = sqrt(Σ_t (Δ_t/σ_t)²)``, and the accountant's (ε, δ) of such a run is exactly
the GDP curve ``δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)`` (:func:`gdp_delta`).

The auditor scores each run with the likelihood ratio of the Gaussian model (the projection of
everything the adversary saw onto the whitened mean difference). Under D the scores are N(m₀, s²),
under D' N(m₁, s²), and the pair of output distributions is ``μ = (m₁ − m₀)/s``-GDP *exactly*
when the adversary's messages do not depend on the noise, and round by round when they do (each
round is then a Gaussian release given the transcript before it). :func:`gdp_lower_bound` turns
the two samples into a one-sided confidence bound on μ — a lower bound on the mean difference (a
normal interval, α/2) over upper bounds on both standard deviations (χ², α/4 each) — and that into
ε at the claimed δ (Nasr et al. 2023, "Tight auditing of differentially private machine
learning", §5: fit the GDP μ rather than count threshold errors, which needs ~e^ε/α samples).

The fit is a *model* of the score distribution (the Gaussian shape is exact for the Gaussian
mechanisms audited here, not for arbitrary code). :func:`dpadmm.privacy.audit.epsilon_lower_bound`
gives the distribution-free Clopper–Pearson bound on the same scores; the audit reports both.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.stats import chi2, norm

MU_CAP = 40.0  # beyond this the two score samples do not overlap at all: ε is reported as the value at the cap


def gdp_delta(mu: float, eps: float) -> float:
    """δ(ε) of μ-GDP (Dong, Roth & Su 2022, Corollary 2.13)."""
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    return float(norm.cdf(-eps / mu + mu / 2.0) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2.0)))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with ``gdp_delta(mu, ε) ≤ delta`` (0 for μ = 0)."""
    mu = min(float(mu), MU_CAP)
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2.0
    return float(brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-10))


def gdp_mu(eps: float, delta: float) -> float:
    """The μ whose GDP curve passes through (ε, δ): the claim in GDP units."""
    if math.isinf(eps):
        return math.inf
    if eps <= 0:
        return 0.0
    hi = 1.0
    while gdp_delta(hi, eps) < delta:
        hi *= 2.0
        if hi > MU_CAP:
            return MU_CAP
    return float(brentq(lambda m: gdp_delta(m, eps) - delta, 1e-9, hi, xtol=1e-12))


def gdp_lower_bound(s0: np.ndarray, s1: np.ndarray, delta: float | None, *, alpha: float = 0.05) -> dict:
    """One-sided (1 − alpha) lower bound on μ, and on ε at ``delta``, from scores on D (``s0``) and on
    D' (``s1``), oriented so that D' scores higher.

    ``μ_lb = max(0, (m₁ − m₀) − z_{1−α/2} sqrt(s₀²/n₀ + s₁²/n₁)) / max(s₀⁺, s₁⁺)`` with ``s⁺`` the χ²
    upper bound (α/4 each) on each standard deviation; the three bounds hold jointly with
    probability ≥ 1 − α (Bonferroni). Returns ``mu``, ``mu_lower``, ``epsilon_lower_bound`` and the
    sample moments. ``delta=None``: μ only (no ε).
    """
    s0, s1 = np.asarray(s0, float), np.asarray(s1, float)
    if not (np.all(np.isfinite(s0)) and np.all(np.isfinite(s1))):
        return {"epsilon_lower_bound": 0.0 if delta is not None else None, "mu": float("nan"), "mu_lower": 0.0,
                "n": [len(s0), len(s1)], "means": [float("nan")] * 2, "sds": [float("nan")] * 2}
    n0, n1 = len(s0), len(s1)
    m0, m1 = float(s0.mean()), float(s1.mean())
    v0, v1 = float(s0.var(ddof=1)), float(s1.var(ddof=1))
    z = float(norm.ppf(1.0 - alpha / 2.0))
    diff_lb = (m1 - m0) - z * math.sqrt(v0 / n0 + v1 / n1)
    sd_ub = math.sqrt(max(v0 * (n0 - 1) / chi2.ppf(alpha / 4.0, n0 - 1), v1 * (n1 - 1) / chi2.ppf(alpha / 4.0, n1 - 1)))
    sd = math.sqrt(0.5 * (v0 + v1))
    mu_hat = MU_CAP if sd == 0 else min((m1 - m0) / sd, MU_CAP)
    if diff_lb <= 0:
        mu_lb = 0.0
    elif sd_ub <= 1e-12 * max(abs(m1 - m0), 1e-300):
        mu_lb = MU_CAP  # no noise left in the statistic: the neighbours are told apart without error
    else:
        mu_lb = min(diff_lb / sd_ub, MU_CAP)
    if not math.isfinite(mu_lb):  # non-finite scores: no evidence claimed (the Clopper-Pearson bound still applies)
        mu_lb = 0.0
    eps = None if delta is None else gdp_epsilon(mu_lb, delta)
    return {"epsilon_lower_bound": eps, "mu": float(mu_hat), "mu_lower": float(mu_lb),
            "n": [n0, n1], "means": [m0, m1], "sds": [math.sqrt(v0), math.sqrt(v1)]}
