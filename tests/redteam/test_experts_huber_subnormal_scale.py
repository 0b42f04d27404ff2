"""Red team 2026-11-29, fourth pass (H1): the Huber expert's Δ = (2L/n)(1 + 2·0.005)/λ with L = R_a·min(κ, ·) is
computed through L and 2L/n, which a coordinator's tiny κ (any finite κ > 0 is accepted) puts in the SUBNORMAL range
while Δ itself stays ≥ 1e-280 (λ ~ 1e-5 R² divides it back up): R = 1e-100, κ = 1e-220, n = 333 gave a computed Δ
2.1% BELOW the exact bound (the noise drawn at σ = zΔ is then smaller than the theorem needs), and the solver's
tolerance γ ≈ 1e-324 is a few ulps. The party now refuses, from public quantities only, a fit whose tolerance γ
(the smallest of these quantities) is not a normal float (≥ 1e-280), at Setup and at the fit."""

from __future__ import annotations

import numpy as np
import pytest
from mpmath import mp, mpf, sqrt

from dpadmm.algorithms.experts import regression as xr
from dpadmm.algorithms.experts.messages import ExpertConfig
from dpadmm.algorithms.experts.policy import _experts_check
from dpadmm.exceptions import PrivacyPreconditionError
from dpadmm.privacy.policy import PartyPolicy, PolicyRefusal

R, N = 1e-100, 333


def _exact_delta(n, lam, kappa):
    mp.dps = 50
    Ra = sqrt(2) * mpf(R)
    L = Ra * min(mpf(kappa), Ra / sqrt(mpf(lam)) + 1)
    return (2 * L / n) * (1 + 2 * mpf(xr.GRADIENT_TOLERANCE)) / mpf(lam)


def _fit(kappa, n=N):
    rng = np.random.default_rng(0)
    D, y = rng.standard_normal((n, 3)) * R, np.clip(rng.standard_cauchy(n), -1, 1)
    return xr.fit_regression_expert(D, y, R=R, lam=1e-300, noise_multiplier=1.0, rng=rng, noise_norm=1e300,
                                    loss="huber", kappa=kappa)


def test_the_computed_delta_is_never_below_the_exact_bound_it_claims():
    for kappa in (1e-200, 1e-210, 1e-215, 1e-218, 1e-219, 1e-220, 1e-221):
        try:
            _, info, _ = _fit(kappa)
        except PrivacyPreconditionError:
            continue  # refused from public quantities: nothing released
        exact = _exact_delta(N, info["lam"], kappa)
        assert info["sensitivity"] >= float(exact) * (1 - 1e-12), (kappa, info["sensitivity"] / float(exact))


def test_a_subnormal_tolerance_is_refused_at_the_fit_and_at_setup_from_public_quantities():
    with pytest.raises(PrivacyPreconditionError, match="float range"):
        _fit(1e-220)
    _fit(1e-150)  # an ordinary (if small) scale still runs
    X = np.random.default_rng(1).standard_normal((N, 3)) * R
    policy = PartyPolicy(max_epsilon=8.0, delta=1e-5, min_clip=1e-100)  # an operator who accepts R = 1e-100

    def check(kappa):
        cfg = ExpertConfig("party2", X, {}, R=R, lam=1e-300, noise_multiplier=1.0, noise_norm=1e300, loss="huber",
                           huber_kappa=kappa)
        _experts_check(cfg, [], policy, "party2")

    with pytest.raises(PolicyRefusal, match="public scale"):
        check(1e-220)
    check(1e-150)
