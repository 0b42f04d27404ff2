"""The worst-case audit: the Gaussian-DP bound, the games against the real party code, and their plants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpadmm.privacy.accountants.gaussian import calibrate_noise_multiplier, gaussian_epsilon
from dpadmm.privacy.audit_gdp import gdp_delta, gdp_epsilon, gdp_lower_bound, gdp_mu


@pytest.mark.parametrize("eps, delta", [(1.0, 1e-5), (2.0, 1e-3), (0.3, 1e-6)])
def test_gdp_curve_matches_the_accountant_for_composed_gaussians(eps, delta):
    """T Gaussian releases at multiplier nm are sqrt(T)/nm-GDP; the accountant's ε at δ is that curve's."""
    T = 4
    nm = calibrate_noise_multiplier(eps, delta, T)
    mu = math.sqrt(T) / nm
    assert gdp_epsilon(mu, delta) == pytest.approx(gaussian_epsilon([nm] * T, delta), rel=2e-3)
    assert gdp_mu(eps, delta) == pytest.approx(mu, rel=2e-3)
    assert gdp_delta(gdp_mu(eps, delta), eps) == pytest.approx(delta, rel=1e-6)


def test_gdp_lower_bound_covers_the_true_mu_at_its_confidence():
    """1,000 repetitions at μ = 0.5, n = 300 per side: μ_lower > μ in at most 5% of them (binomial: ≤ 7.6% with
    false-failure rate 1e-4 at the nominal 5%), and the bound is not vacuous (median above 0.25)."""
    rng = np.random.default_rng(0)
    mu, n, reps = 0.5, 300, 1000
    lows = np.array([gdp_lower_bound(rng.normal(size=n), mu + rng.normal(size=n), None)["mu_lower"]
                     for _ in range(reps)])
    assert np.mean(lows > mu) <= 0.076
    assert np.median(lows) > 0.25  # expected ≈ (μ − 1.96·√(2/n))/(1 + 2.24/√(2n)) ≈ 0.29


def test_gdp_lower_bound_sees_no_difference_between_identical_distributions():
    rng = np.random.default_rng(1)
    res = gdp_lower_bound(rng.normal(size=400), rng.normal(size=400), 1e-5, alpha=1e-3)
    assert res["epsilon_lower_bound"] == 0.0


def test_gdp_lower_bound_is_capped_for_noiseless_separation():
    res = gdp_lower_bound(np.zeros(50), np.ones(50), 1e-5)
    assert res["mu_lower"] == pytest.approx(40.0) and res["epsilon_lower_bound"] > 100


# ----------------------------------------------------------------------------- games (real party steps)
_GAMES: dict = {}


def _game(name):
    from dpadmm.experiments import audit_worst_case as W

    if not _GAMES:
        _GAMES.update({g.name: g for g in W.games()})
    return _GAMES[name]


@pytest.mark.parametrize("name", [
    "worst-case vertical-gaussian[record] (planted: draw reused across rounds)",
    "worst-case vertical-gaussian[record] (planted: draw shared by two parties)",
    "worst-case vertical-gaussian[record] (planted: coordinator-supplied sensitivity)",
    "worst-case zhou-fdp-admm (planted: draw reused across rounds)",
    "worst-case zhou-fdp-admm (planted: coordinator-supplied sensitivity)",
])
def test_gross_plants_are_caught_with_few_runs(name):
    from dpadmm.experiments.audit_games import play

    res = play(_game(name), runs=8)  # 40 runs per side
    assert res.caught and res.epsilon_lower_bound > 2 * res.epsilon_claimed, res.details["statistics"]


def test_honest_game_replays_the_mean_exactly():
    """The adversary's noiseless replay is exact: on the honest vertical game the likelihood-ratio scores have
    the model's spread (Var = Σ‖Δ‖²/σ² = μ², mean ∓μ²/2) and the plants patch nothing permanently."""
    from dpadmm.algorithms.vertical import party as vs
    from dpadmm.experiments.audit_games import play

    before = (vs.party_step, vs.clip_share_input, vs.setup_party)
    res = play(_game("worst-case vertical-gaussian[record]"), runs=20)  # 100 runs per side
    st = res.details["statistics"]["likelihood-ratio"]
    mu = res.details["claimed_mu"]
    # per-round ratio limit rho/(lambda_s + rho): 0.926 (rho 1) and 0.990 (rho 8), two rounds each
    mu_model = mu * math.sqrt((0.926 ** 2 + 0.990 ** 2) / 2)
    assert abs(st["mu"] - mu_model) < 5 * math.sqrt(2 / 75)  # 5 sds of the estimate on 75 eval runs per side
    assert res.epsilon_claimed == pytest.approx(1.0, rel=1e-3) and not res.caught
    assert (vs.party_step, vs.clip_share_input, vs.setup_party) == before


def test_private_fpca_pipeline_game_replays_every_release_exactly():
    """The composed statistics game (mean, full-grid moments, 8 bisection counts): claim 1.0 over the 10 releases,
    and the likelihood-ratio scores have the model's μ = √(0.8 + 8/9 + 1)/nm = 0.947 μ_claim (mean √8 of √10,
    moments 2 of 3/√2, counts 1) within 5 sds of the estimate (150 evaluation runs per side)."""
    from dpadmm.experiments.audit_games import play

    res = play(_game("worst-case functional-statistics[private-fpca pipeline]"), runs=100)  # 200 runs per side
    st = res.details["statistics"]["likelihood-ratio"]
    mu_model = res.details["claimed_mu"] * math.sqrt((0.8 + 8.0 / 9.0 + 1.0) / 3.0)
    assert res.epsilon_claimed == pytest.approx(1.0, rel=1e-3) and res.details["rounds_per_run"] == 10
    assert abs(st["mu"] - mu_model) < 5 * math.sqrt(2 / 149), (st, mu_model)
    assert not res.caught


@pytest.mark.slow
@pytest.mark.parametrize("name", ["worst-case vertical-gaussian[record] (planted: noise x1/2)",
                                  "worst-case functional-statistics[moments] (planted: noise x1/2)",
                                  "worst-case vertical-gaussian[record] (planted: clipping skipped)",
                                  "worst-case vertical-label (planted: noise x1/2)",
                                  "worst-case zhou-fdp-admm (planted: noise x1/2)",
                                  "worst-case zhou-fdp-admm (planted: clipping skipped)"])
def test_subtle_plants_are_caught_at_the_quick_run_count(name):
    from dpadmm.experiments.audit_games import play

    res = play(_game(name), runs=300)
    assert res.caught, res.details["statistics"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["worst-case vertical-gaussian[feature_column]", "worst-case vertical-gaussian[record]",
                                  "worst-case vertical-label", "worst-case vertical-label-rr", "worst-case zhou-fdp-admm",
                                  "worst-case functional-statistics[moments]",
                                  "worst-case functional-statistics[private-fpca pipeline]",
                                  "worst-case zhang-consensus-pp"])
def test_honest_gaussian_rows_reach_half_their_claim_at_the_default_run_count(name):
    """At the default 2,000 runs (× each game's factor) every honest row's 95% lower bound is ≥ 0.5 × its claim and
    below it (measured: 0.63–0.96; the pure-DP rows, randomized response and consensus, by Clopper–Pearson)."""
    from dpadmm.experiments.audit_games import play

    res = play(_game(name), runs=2000)
    assert 0.5 * res.epsilon_claimed <= res.epsilon_lower_bound <= res.epsilon_claimed, res.details["statistics"]


@pytest.mark.slow
def test_cli_runs_one_game_by_its_full_name_and_prints_the_ratio(tmp_path, capsys):
    import json

    from conftest import run_cli

    out = tmp_path / "one"
    code, stdout, err = run_cli(["audit", "--end-to-end", "--runs", "40", "--only", "worst-case vertical-label",
                                 "--out", out, "--quiet"], capsys)
    assert code == 0, err
    (row,) = json.loads((out / "audit.json").read_text())["mechanisms"]  # the full name: not its planted row
    assert row["name"] == "worst-case vertical-label" and not row["broken"]
    assert row["details"]["ratio"] == pytest.approx(row["epsilon_lower_bound"] / row["epsilon_claimed"])
    assert row["details"]["rounds_per_run"] == 4 and row["details"]["runs_per_dataset"] == 200
    assert "ratio" in stdout and "worst-case vertical-label" in stdout


def test_gdp_lower_bound_gives_no_evidence_for_non_finite_scores():
    res = gdp_lower_bound(np.array([0.0, np.inf, 1.0]), np.array([1.0, 2.0, np.nan]), 1e-5)
    assert res["epsilon_lower_bound"] == 0.0 and res["mu_lower"] == 0.0
