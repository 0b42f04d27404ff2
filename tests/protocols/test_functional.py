"""F-ADMM / FDP-ADMM [Zhou]: exactness against centralised QR, zero-noise limit, Thm 1 σ, clipping and
the corrected sensitivity, reports, estimator validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpadmm.algorithms.functional import statistics as fs

from dpadmm import FunctionalQuantileRegressor
from dpadmm.algorithms.functional import (hub as functional_hub, local as functional_local,
                                          messages as functional_messages, party as functional_party,
                                          rules as functional_rules)
from dpadmm.data.functional import simulate_zhou
from dpadmm.exceptions import InvalidDataError, InvalidParameterError, PrivacyPreconditionError
from dpadmm.kernels import fpca as F
from dpadmm.privacy.accountants import gaussian_epsilon
from dpadmm.privacy.accountants.composition import advanced_composition
from dpadmm.algorithms.functional.report import calibrate_total, iteration_noise_multiplier, paper_bound, zhou_sigma


@pytest.fixture(scope="module")
def small():
    return simulate_zhou(4000, tau=0.3, random_state=0)


def _qr(y, A, tau):
    import statsmodels.api as sm

    return np.asarray(sm.QuantReg(y, A).fit(q=tau, max_iter=5000, p_tol=1e-10).params)


def test_nonprivate_distributed_equals_centralised_qr(small):
    est = FunctionalQuantileRegressor(tau=0.3, method="exact", lam=0.0, c1=1e6, workers=2, max_iter=40,
                                      random_state=0).fit(small.curves, small.y)
    A = est.basis_.scores(small.curves)
    ref = _qr(small.y, np.c_[A, np.ones(len(A))], 0.3)
    err = np.abs(np.r_[est.coef_, est.intercept_] - ref).max()
    assert err < 1e-3, err


@pytest.mark.slow
def test_nonprivate_distributed_equals_centralised_qr_paper_scale():
    d = simulate_zhou(20000, tau=0.5, random_state=1)
    est = FunctionalQuantileRegressor(tau=0.5, method="exact", lam=0.0, c1=1e6, workers=4, max_iter=40,
                                      fit_intercept=False, random_state=1).fit(d.curves, d.y)
    ref = _qr(d.y, est.basis_.scores(d.curves), 0.5)
    assert np.abs(est.coef_ - ref).max() < 1e-3


def test_exact_local_solve_with_l1_matches_linear_programme():
    """F-ADMM's local step [Zhou, eq. 16] with ℓ1 is a minimiser: no random perturbation lowers the
    exact (unsmoothed) objective."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(300, 3))
    y = A @ np.array([1.0, -0.5, 0.2]) + rng.standard_t(3, size=300)
    st = functional_messages.Settings.make([0.4], lam=0.5)
    cfg, _ = functional_party.make_party("a", A, y, st, rho=0.2, n_workers=1, penalty="l1", local_step="exact")
    v = np.array([0.3, 0.1, -0.2])[None, None, None]
    w = functional_local.exact_local_solve(cfg, v, np.zeros_like(v))[0, 0, 0]

    def obj(x):
        r = y - A @ x
        return np.mean(r * (0.4 - (r <= 0))) + 0.5 * np.abs(x).sum() + 0.1 * np.sum((x - v[0, 0, 0]) ** 2)

    f0 = obj(w)
    for _ in range(300):
        assert obj(w + rng.normal(scale=1e-3, size=3)) >= f0 - 1e-9


def test_linearized_step_is_the_closed_form_of_section_5_1():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(50, 4))
    y = rng.normal(size=50)
    tau, lam, rho, M = 0.3, 0.2, 0.1, 5
    st = functional_messages.Settings.make([tau], lam=lam)
    cfg, state = functional_party.make_party("a", A, y, st, rho=rho, n_workers=M, penalty="l1", step="constant", eta0=0.7)
    wt = rng.normal(size=4)
    gam = rng.normal(size=4)
    w_hub = rng.normal(size=4)
    state = state._replace(w_tilde=wt[None, None, None], gamma=gam[None, None, None])
    # round 1: no deferred dual update, so γ is used as stored
    new, msg, events = functional_party.party_step(cfg, state, functional_messages.HubMessage(0, w_hub[None, None]), rng=np.random.default_rng(0))
    eta = 0.7
    g = A.T @ (tau - (y - A @ wt <= 0)) / 50
    expected = (g - lam / M * np.sign(wt) + gam + rho * w_hub + wt / eta) / (rho + 1 / eta)  # [Zhou, §5.1]
    np.testing.assert_allclose(new.w[0, 0, 0], expected, atol=1e-12)
    np.testing.assert_array_equal(msg.w_tilde, new.w)  # no noise: w̃ = w
    assert events == []


def test_zero_noise_limit_equals_nonprivate():
    """The private code path with σ → 0 gives the non-private iterates; real noise moves them."""
    from dpadmm.experiments.zhou import make_settings, run_settings, simulate_rep

    rep = simulate_rep(np.random.default_rng(0), 4000, n_workers=4)
    # same step sizes (the Thm 2 step depends on (ε, δ)), noise multiplier 0 vs 1e-12 vs 5
    st, _ = make_settings([(math.inf, 1.0)] * 3, (0.3,), noise_multipliers=[0.0, 1e-12, 5.0])
    for method in ("fast", "paper", "exact"):
        w, _ = run_settings(rep, 4, st, penalty="l1", method=method, iterations=6, seed=1)
        np.testing.assert_allclose(w[1], w[0], atol=1e-8)
        assert np.abs(w[2] - w[0]).max() > 1e-3


def test_dual_sum_stays_zero_so_hub_is_mean_of_shares(small):
    A = F.fpca(small.curves, small.grid, 4).scores(small.curves)
    st = functional_messages.Settings.make([0.3, 0.7], noise_multiplier=[0.0, 3.0], lam=0.05)
    cfgs = [functional_party.make_party(f"w{i}", A[i::3], small.y[i::3], st, rho=0.1, n_workers=3, step="constant",
                          c1=10.0) for i in range(3)]
    hub_cfg = functional_messages.HubConfig(0.1, tuple(c.name for c, _ in cfgs), (1, 2, 4), rounds=5)
    hs, inbox = functional_hub.init_hub(hub_cfg)
    states = [s for _, s in cfgs]
    for r in range(5):
        outs = {}
        for i, (c, _) in enumerate(cfgs):
            states[i], outs[c.name], _ = functional_party.party_step(c, states[i], inbox[c.name], rng=np.random.default_rng(r * 10 + i))
        hs, inbox, _ = functional_hub.hub_step(hub_cfg, hs, outs, rng=None)
        gsum = sum(o.gamma for o in outs.values())
        np.testing.assert_allclose(gsum, 0.0, atol=1e-12)
        np.testing.assert_allclose(hs.w, np.mean([o.w_tilde for o in outs.values()], axis=0)[:, 0], atol=1e-12)


def test_thm1_sigma_and_events():
    c1, m, rho, eta, eps, delta = 2.0, 100, 0.1, 0.5, 0.5, 1e-5
    expected = 2 * c1 * math.sqrt(2 * math.log(1.25 / delta)) / (m * eps * (rho + 1 / eta))
    assert zhou_sigma(c1=c1, m=m, rho=rho, eta=eta, epsilon=eps, delta=delta) == pytest.approx(expected, rel=1e-14)
    # the algorithm emits exactly this σ, with sensitivity 2c1/(m(ρ+1/η)) (m, not m²: docs/algorithms.md §3 erratum)
    rng = np.random.default_rng(0)
    A = F.clip_rows(rng.normal(size=(m, 5)), c1)
    st = functional_messages.Settings.make([0.5], noise_multiplier=iteration_noise_multiplier(eps, delta), lam=0.1)
    cfg, state = functional_party.make_party("w", A, rng.normal(size=m), st, rho=rho, n_workers=1, step="constant", eta0=eta, c1=c1)
    _, _, events = functional_party.party_step(cfg, state, functional_messages.HubMessage(0, np.zeros((1, 1, 5))), rng=rng)
    (ev,) = events
    assert ev.sigma == pytest.approx(expected, rel=1e-12)
    assert ev.sensitivity == pytest.approx(2 * c1 / (m * (rho + 1 / eta)), rel=1e-12)
    assert ev.noise_multiplier == pytest.approx(math.sqrt(2 * math.log(1.25 / delta)) / eps)


@pytest.mark.statistical
def test_noise_has_the_thm1_standard_deviation():
    rng = np.random.default_rng(1)
    m, K = 200, 8
    A = F.clip_rows(rng.normal(size=(m, K)), 1.0)
    st = functional_messages.Settings.make(np.full(500, 0.5), noise_multiplier=10.0, lam=0.0)
    cfg, state = functional_party.make_party("w", A, rng.normal(size=m), st, rho=0.1, n_workers=1, c1=1.0, emit_events=False)
    new, msg, _ = functional_party.party_step(cfg, state, functional_messages.HubMessage(0, np.zeros((1, 500, K))), rng=rng)
    noise = (msg.w_tilde - new.w).ravel()
    eta = functional_rules.step_size("paper", 1, c_w=1.0, c1=1.0, c2=1.0, lam=np.zeros(1), n_workers=1, K=K, m=m,
                       eps_iter=np.array([math.inf]), delta_iter=np.ones(1), eta0=1.0)[0]
    sigma = 10.0 * 2.0 / (m * (0.1 + 1 / eta))
    # 4000 draws: sd within 5 standard errors (false-failure rate < 1e-6)
    assert abs(noise.std() / sigma - 1) < 5 / math.sqrt(2 * noise.size)
    assert abs(noise.mean()) < 5 * sigma / math.sqrt(noise.size)


@pytest.mark.parametrize("local_step", ("linearized", "exact"))
def test_clipping_enforces_the_sensitivity_bound(local_step):
    """Replace one sample by an extreme one: after clipping, the local update moves by at most
    2c_1/(m(ρ + 1/η)) (linearised) or 2c_1/(mρ) (exact), whatever the state."""
    rng = np.random.default_rng(3)
    m, K, c1 = 40, 3, 1.5
    worst = 0.0
    for trial in range(20):
        A = rng.normal(scale=2.0, size=(m, K))
        y = rng.normal(size=m)
        A2, y2 = A.copy(), y.copy()
        A2[0] = rng.normal(scale=50.0, size=K)
        y2[0] = rng.normal(scale=100.0)
        st = functional_messages.Settings.make([rng.uniform(0.05, 0.95)], lam=0.1)
        opts = dict(rho=0.1, n_workers=2, local_step=local_step, step="constant", eta0=2.0, c1=c1)
        c_a, s_a = functional_party.make_party("a", F.clip_rows(A, c1), y, st, **opts)
        c_b, _ = functional_party.make_party("b", F.clip_rows(A2, c1), y2, st, **opts)
        state = s_a._replace(w_tilde=rng.normal(size=(1, 1, 1, K)), gamma=rng.normal(size=(1, 1, 1, K)))
        inbox = functional_messages.HubMessage(0, rng.normal(size=(1, 1, K)))
        wa = functional_party.party_step(c_a, state, inbox, rng=np.random.default_rng(0))[0].w
        wb = functional_party.party_step(c_b, state, inbox, rng=np.random.default_rng(0))[0].w
        bound = functional_local.sensitivity(c_a, np.array([2.0]))[0]
        worst = max(worst, np.linalg.norm(wa - wb) / bound)
    assert worst <= 1.0 + 1e-6, worst
    assert worst > 0.05  # the test exercises the bound


def test_estimator_clips_scores_and_reports(small):
    est = FunctionalQuantileRegressor(tau=0.5, workers=2, max_iter=5, epsilon=1.0, delta=1e-5, c1=0.5,
                                      random_state=0, monitor=True).fit(small.curves, small.y)
    assert est.clipped_fraction_ > 0.5
    assert est.c1_ == pytest.approx(math.sqrt(0.5**2 + 1))
    assert any(a["status"] == "enforced" for a in est.privacy_.assumptions)
    z = iteration_noise_multiplier(1.0, 1e-5)
    # 5 ADMM rounds + the private statistics (histograms, means, moment sum) + the comparison with the DP
    # constant, all at the iteration's multiplier, + the B bisection counts of the DP quantile at z·√B
    B = fs.QUANTILE_STEPS
    assert est.privacy_.epsilon == pytest.approx(gaussian_epsilon([z] * 9 + [z * math.sqrt(B)] * B, 1e-5), rel=1e-9)
    assert est.privacy_.rounds == 5
    assert est.privacy_.paper_bound["epsilon"] == pytest.approx(advanced_composition(1.0, 1e-5, 9 + B, 1e-5)[0])
    assert est.predict(small.curves).shape == (small.n,)
    assert est.beta_.shape == small.grid.shape


def test_total_budget_calibration_never_overspends(small):
    est = FunctionalQuantileRegressor(tau=0.5, workers=2, max_iter=8, total_epsilon=2.0, delta=1e-5,
                                      basis="private-fpca", curve_clip=3.0, random_state=0).fit(small.curves, small.y)
    assert est.privacy_.epsilon <= 2.0 + 1e-9
    assert est.privacy_.epsilon > 1.9
    # 3 one-shot statistics, the DP quantile (B counts) and the comparison, with budget shares W (in rounds)
    Ws, Wq, Wc = est._shares(8)
    assert (Ws, Wq, Wc) == (1, 4, 8)  # n·ε = 8,000 < COMPARE_N_EPSILON: the comparison gets the rounds' worth
    z = calibrate_total(2.0, 1e-5, 8, extra_releases=3 * Ws + Wq + Wc)
    assert est.noise_multiplier_ == pytest.approx(z, rel=1e-4)  # nudged up only by rounding of mixed multipliers
    B = fs.QUANTILE_STEPS
    assert gaussian_epsilon([est.noise_multiplier_] * 11 + [z / math.sqrt(Wc)] + [z * math.sqrt(B / Wq)] * B,
                            1e-5) <= 2.0


def test_paper_bound_is_advanced_composition():
    pb = paper_bound(0.5, 1e-4, 30)
    e, d = advanced_composition(0.5, 1e-4, 30, 1e-4)
    assert pb["epsilon"] == pytest.approx(e) and pb["delta"] == pytest.approx(d)
    assert paper_bound(math.inf, 1.0, 30)["epsilon"] == math.inf


@pytest.mark.parametrize("kwargs, exc, text", [
    ({"tau": 1.5}, InvalidParameterError, "tau must be in (0, 1)"),
    ({"tau": 0.0}, InvalidParameterError, "tau must be in (0, 1)"),
    ({"workers": 10_000}, InvalidParameterError, "workers must be at most"),
    ({"n_components": 500}, InvalidParameterError, "n_components must be at most"),
    ({"penalty": "l0"}, InvalidParameterError, "penalty must be one of"),
    ({"basis": "fpca", "epsilon": 1.0}, PrivacyPreconditionError, "in the clear"),
    ({"epsilon": 1.0, "y_range": (3.0, 1.0)}, InvalidParameterError, "lo < hi"),
    ({"epsilon": 1.0, "total_epsilon": 1.0}, InvalidParameterError, "at most one"),
])
def test_estimator_rejects_bad_parameters(small, kwargs, exc, text):
    with pytest.raises(exc, match=None) as info:
        FunctionalQuantileRegressor(**kwargs).fit(small.curves[:200], small.y[:200])
    assert text in str(info.value)


def test_estimator_rejects_bad_curves(small):
    X = small.curves[:100].copy()
    X[5, 3] = np.nan
    with pytest.raises(InvalidDataError, match="NaN"):
        FunctionalQuantileRegressor().fit(X, small.y[:100])
    with pytest.raises(InvalidDataError, match="ragged"):
        FunctionalQuantileRegressor().fit([[1.0, 2.0, 3.0], [1.0, 2.0]], [0.0, 1.0])


@pytest.mark.slow
def test_quantile_calibration_of_the_fast_method():
    # share of y <= ŷ ≈ τ: with n = 20000 the sampling sd is ≤ 0.0035; tolerance 0.02 also covers the
    # ℓ1 shrinkage bias (false-failure rate negligible)
    d = simulate_zhou(20000, tau=0.25, random_state=5)
    est = FunctionalQuantileRegressor(tau=0.25, workers=5, lam=0.0, random_state=5).fit(d.curves, d.y)
    assert abs(np.mean(d.y <= est.predict(d.curves)) - 0.25) < 0.02
