"""Red team of the experts regression target (docs/redteam-2026-11-29.md, third pass: X1, X2). The attacker is the
coordinator (the label party): it chooses the Setup's λ, noise-norm rule, loss and Huber κ, and the labels; each
value below is one the party's policy accepts (:func:`dpadmm.algorithms.experts.policy._experts_check`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpadmm.algorithms.experts import model as xm, regression as xr
from dpadmm.algorithms.experts.messages import ExpertConfig
from dpadmm.algorithms.experts.policy import _experts_check
from dpadmm.exceptions import PrivacyPreconditionError
from dpadmm.privacy.policy import PartyPolicy, PolicyRefusal

POLICY = PartyPolicy(max_epsilon=8.0, delta=1e-5)  # a budgeted party, its defaults otherwise (min_clip 1e-12)


def _check(X, **kw):
    cfg = ExpertConfig("party2", X, {}, **kw)
    _experts_check(cfg, [], POLICY, "party2")


# ----------------------------------------------------------------------------- X1: a data-dependent solver refusal
def _collinear(seed: int, n: int = 200, d: int = 3):
    """Three copies of one column (1e-9 apart), rows far beyond the clip, labels with heavy tails (clipped to ±1)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, 1))
    X = (np.hstack([base] * d) + 1e-9 * rng.normal(size=(n, d))) * 1e6
    return X, np.clip(rng.standard_cauchy(n), -1.0, 1.0)


HOSTILE = dict(R=1.0, lam=1e-300, noise_multiplier=1.0, noise_norm=1e300, loss="huber", huber_kappa=1e-6)


def _released(X, y) -> bool:
    try:
        xr.fit_regression_expert(X, y, R=1.0, lam=1e-300, noise_multiplier=1.0, rng=np.random.default_rng(0),
                                 noise_norm=1e300, loss="huber", kappa=1e-6)
    except RuntimeError:
        return False
    return True


def test_x1_whether_a_huber_expert_releases_does_not_depend_on_one_record():
    """X1 (fixed): κ = 1e-6, λ = 1e-300 and a noise-norm rule of 1e300 pass the party's checks; on data set A (seed 6)
    the solver used to stop short of ‖∇F‖ ≤ γ at the old floor λ = 1e-10 R² and the party refused ("nothing
    released"), while A with row 0 replaced released: told apart with certainty, ε = ∞. Now the Huber floor is
    1e-5 R² and a Newton failure falls back to a method that reaches γ by a theorem: both release."""
    X, y = _collinear(6)
    _check(X, **HOSTILE)  # accepted at Setup
    X2, y2 = X.copy(), y.copy()
    X2[0], y2[0] = 0.0, 0.0
    assert _released(X, y) and _released(X2, y2)


def _huber_gradient(A, y, lam, kappa, w):
    return np.asarray(A.T @ (np.clip(A @ w - y, -kappa, kappa) / A.shape[0])).ravel() + lam * w


@pytest.mark.parametrize("kappa", [1e-6, 1e-3, 0.5])
def test_x1_the_fallback_reaches_gamma_on_the_hostile_data_sets_within_its_public_step_count(kappa):
    """The theorem behind the fix (``regression`` module docstring, "Enforced by"): Nesterov's method from 0 for
    ``fallback_steps`` steps reaches ‖∇F‖ ≤ γ/2 at the floored λ, whatever the data. Checked on the red team's hostile
    data sets (collinear columns 1e-9 apart, rows far beyond the clip, Cauchy labels), and it lands within γ/λ of the
    Newton minimiser, as the sensitivity proof needs of any γ-approximate minimiser."""
    from dpadmm.data.prepare import clip_rows

    n, R = 200, 1.0
    lam = xr.expert_lambda(n, 3, R, 1.0, 1e-300, 1e300, "huber", kappa)
    assert lam == xr.HUBER_LAMBDA_FLOOR * R * R
    gtol = xr.GRADIENT_TOLERANCE * 2.0 * xr.lipschitz(R, lam, "huber", kappa) / n
    for seed in (0, 6, 11):
        X, y = _collinear(seed)
        A = xm.augment(clip_rows(X, R), R)
        w = xr.solve_huber_fallback(A, y, R, lam, kappa, gtol)
        assert np.linalg.norm(_huber_gradient(A, y, lam, kappa, w)) <= gtol / 2
        w_newton = xm._solve(A, y, lam, gtol, loss=xr._loss("huber", kappa))
        assert np.linalg.norm(w - w_newton) <= 2 * gtol / lam


def test_x1_a_newton_failure_releases_the_fallback_instead_of_refusing(monkeypatch):
    """Newton stopping short (forced here) is no longer a refusal of a private Huber fit: the party releases the
    fallback's iterate, with the same Δ and σ; the squared loss and a non-private fit keep the old refusal."""
    X, y = _collinear(6)
    kw = dict(R=1.0, lam=1e-300, noise_multiplier=1.0, noise_norm=1e300, loss="huber", kappa=1e-6)
    honest = xr.fit_regression_expert(X, y, rng=np.random.default_rng(0), **kw)

    def stops_short(*a, **k):
        raise RuntimeError("the expert's solver did not reach the bound")

    monkeypatch.setattr(xr, "_solve", stops_short)
    coef, info, events = xr.fit_regression_expert(X, y, rng=np.random.default_rng(0), **kw)
    assert info == honest[1] and events == honest[2]
    # the same noise draw; both iterates within γ/λ of the minimiser, and 2γ/λ = Δ·0.01/1.01
    assert np.linalg.norm(coef - honest[0]) <= info["sensitivity"] * 0.01 / 1.01 * (1 + 1e-9)
    with pytest.raises(RuntimeError, match="nothing is released"):
        xr.fit_regression_expert(X, y, rng=np.random.default_rng(0), **{**kw, "loss": "squared"})
    with pytest.raises(RuntimeError, match="nothing is released"):
        xr.fit_regression_expert(X, y, rng=np.random.default_rng(0), **{**kw, "noise_multiplier": None})


# ----------------------------------------------------------------------------- X2: subnormal Δ and σ
def test_x2_a_ridge_that_makes_the_release_subnormal_is_refused_at_setup():
    """X2 (fixed): λ = 1.7e308 (finite, accepted) at R = 1e-12 (the default min_clip) and 2,000 rows put Δ at
    1e-323 — two subnormal ulps — and σ = 1.4Δ at 1.5e-323 (three ulps): the coefficient, Δ and σ are rounded to the
    lattice of 5e-324, so the noise drawn is not the Gaussian at z = 1.4 that the party priced (σ/Δ recorded 1.5, the
    real shift of the rounded coefficients up to Δ + 1 ulp). Now Δ and σ must be at least 1e-280 (normal floats):
    refused at Setup from public quantities and by the fit itself."""
    X = np.random.default_rng(0).normal(size=(2000, 1))
    lam, R, z = 1.7e308, 1e-12, 1.4
    Delta = xr.sensitivity(2000, R, lam, "squared", xr.HUBER_KAPPA)
    assert 0 < Delta < 1e-300 and z * Delta / Delta != z  # subnormal: σ = zΔ is not z·Δ
    with pytest.raises(PolicyRefusal, match="public scale"):
        _check(X, R=R, lam=lam, noise_multiplier=z, loss="squared")
    with pytest.raises(PrivacyPreconditionError, match="outside the float range"):
        xr.fit_regression_expert(X, np.zeros(2000), R=R, lam=lam, noise_multiplier=z, rng=np.random.default_rng(0))
    with pytest.raises(PrivacyPreconditionError, match="outside the float range"):  # the binary expert alike
        xm.fit_expert(X, np.ones(2000), R=R, lam=lam, noise_multiplier=z, rng=np.random.default_rng(0))


def test_x2_ordinary_scales_still_release_with_sigma_z_delta():
    """The floor is far from any ordinary fit: λ = 1e6 at R = 1e-12 still releases, σ = zΔ to the last bit."""
    X = np.random.default_rng(0).normal(size=(500, 2))
    _, info, events = xr.fit_regression_expert(X, np.zeros(500), R=1e-12, lam=1e6, noise_multiplier=1.4,
                                               rng=np.random.default_rng(0))
    assert info["sigma"] == 1.4 * info["sensitivity"] and info["sensitivity"] > 1e-280
    assert math.isclose(events[0].sigma / events[0].sensitivity, 1.4, rel_tol=1e-15)


# ----------------------------------------------------------------------------- plants the earlier tests missed
@pytest.mark.parametrize("loss", xr.LOSSES)
def test_the_expert_clips_its_rows_itself_and_its_shift_stays_within_delta(loss):
    """A planted removal of the fit's own row clip (``clip_rows`` in :func:`fit_regression_expert`) passed every
    earlier test (their rows were within R already). Rows of norm up to 1e3 at R = 1: the fit equals the fit on the
    clipped rows, and one record replaced by a far row (norm 1e3) with the opposite label moves the un-noised
    coefficient by at most Δ."""
    from dpadmm.data.prepare import clip_rows

    rng = np.random.default_rng(2)
    n = 300
    X = rng.normal(size=(n, 3)) * np.geomspace(1e-2, 1e3, n)[:, None]
    y = np.clip(rng.normal(size=n), -1, 1)
    kw = dict(R=1.0, lam=1e-2, noise_multiplier=None, rng=rng, loss=loss)
    a = xr.fit_regression_expert(X, y, **kw)[0]
    b = xr.fit_regression_expert(clip_rows(X, 1.0), y, **kw)[0]
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    X1, X2, y1, y2 = X.copy(), X.copy(), y.copy(), y.copy()
    X1[0], y1[0], X2[0], y2[0] = [1e3, 0, 0], 1.0, [-1e3, 0, 0], -1.0
    shift = np.linalg.norm(xr.fit_regression_expert(X1, y1, **kw)[0] - xr.fit_regression_expert(X2, y2, **kw)[0])
    assert shift <= xr.sensitivity(n, 1.0, 1e-2, loss, xr.HUBER_KAPPA)
