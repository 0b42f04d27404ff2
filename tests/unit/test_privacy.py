"""Accountants, calibration, the papers' bounds, and the correlated noise of [Hu, eq. 16]."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from dpadmm.privacy import mechanisms
from dpadmm.privacy.accountants import (
    advanced_composition, calibrate_noise_multiplier, gaussian_epsilon, hu_corollary1,
)
from dpadmm.privacy.events import FEATURE_COLUMN, GaussianRelease
from dpadmm.privacy.ledger import PrivacyLedger
from dpadmm.algorithms.vertical.report import hu_report


def test_classical_gaussian_sigma_closed_form():
    # σ = sqrt(2 ln(1.25/δ)) Δ / ε  [Hu, Thm 3]
    assert mechanisms.classical_gaussian_sigma(2.0, 0.5, 1e-5) == pytest.approx(
        math.sqrt(2 * math.log(1.25e5)) * 2.0 / 0.5)
    assert mechanisms.classical_gaussian_epsilon(4.0, 1e-5) == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 4.0)


def test_hu_sensitivity_as_published():
    # C = 3/(d_m ρ) [λ c1 + (1 + Mρ) b1]  [Hu, Lemma 1]
    C = mechanisms.hu_sensitivity(d_m=66, rho=0.3, lam=32.561, c1=1.0, n_parties=2, b1=10.0)
    assert C == pytest.approx(3 / (66 * 0.3) * (32.561 + 1.6 * 10.0))
    # separate bounds reduce to the bracket b_y + ρ b_z + (M − 1) ρ b_x
    C2 = mechanisms.hu_sensitivity(d_m=66, rho=0.3, lam=32.561, c1=1.0, n_parties=2, b_x=1.0, b_y=2.0, b_z=3.0)
    assert C2 == pytest.approx(3 / (66 * 0.3) * (32.561 + 2.0 + 0.3 * 3.0 + 0.3 * 1.0))


def test_advanced_composition_closed_form():
    eps, delta = advanced_composition(0.1, 1e-6, 50, 1e-5)
    assert eps == pytest.approx(math.sqrt(2 * 50 * math.log(1e5)) * 0.1 + 50 * 0.1 * math.expm1(0.1))
    assert delta == pytest.approx(50 * 1e-6 + 1e-5)
    assert hu_corollary1(0.1, 1e-6, 50, 1e-5) == (eps, delta)


def test_gaussian_epsilon_matches_analytic_gaussian_mechanism():
    # One Gaussian mechanism at unit sensitivity: δ(ε) = Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ)
    # (Balle & Wang 2018). PLD must reproduce the exact ε to its discretisation.
    sigma, delta = 2.0, 1e-5
    eps = gaussian_epsilon([sigma], delta, "pld")
    d = norm.cdf(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * norm.cdf(-1 / (2 * sigma) - eps * sigma)
    assert d == pytest.approx(delta, rel=0.02)
    # T-fold composition of N(0, σ²) equals one mechanism with σ/√T (Gaussian composition is exact)
    assert gaussian_epsilon([sigma] * 16, delta, "pld") == pytest.approx(gaussian_epsilon([sigma / 4], delta, "pld"), rel=1e-3)


def test_rdp_is_an_upper_bound_of_pld_and_both_below_advanced_composition():
    nm, T, delta = 3.0, 30, 1e-5
    pld = gaussian_epsilon([nm] * T, delta, "pld")
    rdp = gaussian_epsilon([nm] * T, delta, "rdp")
    eps_it = mechanisms.classical_gaussian_epsilon(nm, delta / (2 * T))
    adv, _ = advanced_composition(eps_it, delta / (2 * T), T, delta / 2)
    assert pld <= rdp <= adv


@pytest.mark.parametrize("method", ["pld", "rdp"])
def test_monotonicity(method):
    e = [gaussian_epsilon([s] * 10, 1e-5, method) for s in (0.8, 1.0, 2.0, 4.0)]
    assert all(a > b for a, b in zip(e, e[1:]))  # decreasing in σ
    t = [gaussian_epsilon([2.0] * T, 1e-5, method) for T in (1, 5, 20, 80)]
    assert all(a < b for a, b in zip(t, t[1:]))  # increasing in T
    d = [gaussian_epsilon([2.0] * 10, delta, method) for delta in (1e-8, 1e-6, 1e-4)]
    assert all(a > b for a, b in zip(d, d[1:]))  # decreasing in δ


def test_conservative_fallbacks():
    assert gaussian_epsilon([1.0, 0.0], 1e-5) == math.inf
    assert gaussian_epsilon([], 1e-5) == 0.0
    assert gaussian_epsilon([float("nan")], 1e-5) == math.inf


@pytest.mark.slow  # 12 PLD calibrations (about 7 CPU-s): CI runs it; the default suite stays under 3 CPU-minutes
@settings(max_examples=12, deadline=None)
@given(eps=st.floats(0.2, 200.0), T=st.integers(1, 60), log_delta=st.floats(-9, -3))
def test_calibration_never_overspends(eps, T, log_delta):
    delta = 10.0 ** log_delta
    nm = calibrate_noise_multiplier(eps, delta, T, "pld")
    spent = gaussian_epsilon([nm] * T, delta, "pld")
    assert spent <= eps
    assert spent >= 0.97 * eps  # and is not wastefully loose


def test_calibration_round_trip_rdp():
    nm = calibrate_noise_multiplier(5.0, 1e-5, 20, "rdp")
    assert gaussian_epsilon([nm] * 20, 1e-5, "rdp") == pytest.approx(5.0, rel=1e-3)


def test_hu_report_headline_and_paper_bound():
    ledger = PrivacyLedger()
    ledger.record([GaussianRelease(f"party{m}", t, 10.0, 30.0, FEATURE_COLUMN) for t in range(20) for m in (1, 2)])
    rep = hu_report(ledger, delta=1e-5, rounds=20)
    assert rep.relation == "feature_column"
    assert "one feature column" in rep.relation_description
    assert rep.epsilon == pytest.approx(gaussian_epsilon([3.0] * 20, 1e-5, "pld"))
    assert set(rep.per_party) == {"party1", "party2"}
    eps_it = mechanisms.classical_gaussian_epsilon(3.0, 1e-5 / 40)
    assert rep.paper_bound["epsilon"] == pytest.approx(advanced_composition(eps_it, 1e-5 / 40, 20, 5e-6)[0])
    assert rep.paper_bound["delta"] == pytest.approx(1e-5)
    assert rep.epsilon < rep.paper_bound["epsilon"]


# ------------------------------------------------------------------ noise of [Hu, eq. 16]
def _range_projector(D):
    U, s, _ = np.linalg.svd(D, full_matrices=False)
    U = U[:, s > 1e-10 * s.max()]
    return U, U @ U.T


def test_range_noise_equals_eq16_covariance_for_full_rank(rng):
    D = rng.normal(size=(12, 4))
    cov_eq16 = D @ np.linalg.inv(D.T @ D) @ D.T  # Cov(D ξ) / σ² with ξ ~ N(0, σ²(DᵀD)⁻¹)
    _, P = _range_projector(D)
    np.testing.assert_allclose(cov_eq16, P, atol=1e-12)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("seed", range(5))
def test_range_noise_covariance_statistical(seed):
    """Sample covariance of σ U g against σ² P for a rank-deficient block.

    Each entry of the sample covariance of n Gaussian vectors is asymptotically normal with
    variance (Σ_ij² + Σ_ii Σ_jj)/n. We test all 78 distinct entries with a Bonferroni bound:
    max |z| ≤ Φ⁻¹(1 − α/(2·78)) with α = 1e-4 (the false-failure rate of one seed). A σ off by 20%
    moves every diagonal z by ≈ 0.44·sqrt(n/2) ≈ 44 at n = 20,000, so the test fails then.
    """
    gen = np.random.default_rng(1000 + seed)
    D = gen.integers(0, 2, size=(12, 6)).astype(float)
    D[:, 5] = D[:, 0]  # one-hot-like duplicate: not full column rank
    U, P = _range_projector(D)
    sigma, n = 1.7, 20_000
    draws = np.stack([mechanisms.range_gaussian(gen, sigma, U) for _ in range(n)])
    assert np.abs(draws @ (np.eye(12) - P)).max() < 1e-9  # noise lives in range(D)
    S = sigma**2 * P
    Shat = draws.T @ draws / n
    iu = np.triu_indices(12)
    var = (S[iu] ** 2 + np.diag(S)[iu[0]] * np.diag(S)[iu[1]]) / n
    mask = var > 0
    z = (Shat[iu][mask] - S[iu][mask]) / np.sqrt(var[mask])
    zcrit = norm.ppf(1 - 1e-4 / (2 * mask.sum()))
    assert np.abs(z).max() <= zcrit
    # the same statistic with a 20% larger σ would fail: guard that the test has power
    z_wrong = (Shat[iu][mask] - 1.44 * S[iu][mask]) / np.sqrt(var[mask])
    assert np.abs(z_wrong).max() > zcrit


def test_history_says_why_a_monitoring_key_is_missing():
    """A private fit's history_ keeps round/seconds; a monitoring key raises a KeyError subclass naming
    monitor=True, and a non-private (monitored) fit has the key."""
    import numpy as np
    from dpadmm import MonitoringKeyError, VerticalLogisticRegression

    rng = np.random.default_rng(0)
    B = [rng.normal(size=(200, 3)) / 3, rng.normal(size=(200, 2)) / 3]
    y = np.where(B[0][:, 0] + B[1][:, 0] > 0, 1, -1)
    priv = VerticalLogisticRegression(label_epsilon=1.0, random_state=0).fit(B, y)
    assert set(priv.history_) == {"round", "seconds"}
    with pytest.raises(KeyError) as info:
        priv.history_["objective"]
    assert isinstance(info.value, MonitoringKeyError) and "monitor=True" in str(info.value)
    assert "round, seconds" in str(info.value)
    plain = VerticalLogisticRegression(max_iter=5).fit(B, y)
    assert len(plain.history_["objective"]) == 5
    with pytest.raises(KeyError) as info:
        plain.history_["no_such_key"]
    assert not isinstance(info.value, MonitoringKeyError)
    import pickle
    assert pickle.loads(pickle.dumps(priv.history_)).monitored is False


@pytest.mark.slow
def test_one_privacy_report_both_sides(tmp_path, capsys):
    """summary(), the CLI's privacy line and metrics.json say the same per side: a label-only run shows the
    label ε and 'features: NOT protected', never a lone epsilon inf."""
    import json
    import re
    from conftest import run_cli

    code, out, err = run_cli(["vertical", "admm", "--data", "a9a", "--normalize-rows", "--label-epsilon", "1", "--seed", "0",
                              "--iterations", "3", "--out", tmp_path / "r", "--quiet"], capsys)
    assert code == 0, err
    p = json.loads((tmp_path / "r" / "metrics.json").read_text())["privacy"]
    assert p["sides"]["labels"]["protected"] and 0.9 < p["sides"]["labels"]["epsilon"] <= 1.0
    assert not p["sides"]["features"]["protected"] and p["epsilon_side"] == "features"
    printed = " ".join(out.split())
    for line in p["summary"]:
        assert " ".join(line.split()) in printed, (line, out)
    # randomized response (the default label mechanism) is pure ε: δ = 0 on the label side
    assert re.search(r"labels: ε = 1 at δ = 0\b", printed) and "features: NOT protected" in printed
