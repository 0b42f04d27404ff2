"""The functional fit's model-vs-constant comparison (stage ``compare``) attacked by the hub, and the comparison's
budget share after 11d36d1 ("up to the rounds' worth: 10,000/(n·ε), at least a quarter"). Run against the
``safety-net`` branch's src.

Held: with the comparison's share at its maximum (few curves) the run's ε, recomputed by the accountant from the
multipliers the workers were handed, is at most the declared total; a planted z_compare/2 is caught.

Found, then fixed (2026-11-29, ``statistics._checked_compare_model``): the worker computed its Δ = 2κ·max(hi − p₀, p₀ − lo)/unit and its d_j from the model the hub
sends without checking that the model is a finite, well-formed one. (1) Coefficients (+inf, −inf): a curve whose two
clipped scores share a sign predicts inf − inf = NaN, and ``np.clip`` keeps NaN inside the "band", so that curve's
d_j is NaN and the release is NaN; a curve whose scores differ in sign predicts a clipped number: D′ releases NaN on
every run, D a number on every run — ε = ∞ for one curve. (2) ``unit = 1e-320`` (``unit = 0`` raises ZeroDivisionError on every input: a crash, no leak): d_j = ±inf by the sign of the loss
difference (a label above the band vs below it), Δ = inf, σ = inf: D (every d_j = +inf) releases +inf or NaN with
probability ½ each, D′ (one −inf) NaN always — ε = ∞. A private worker now checks the model alone (finite arrays,
τ ∈ (0, 1), lo < hi, unit > 0, 0 < Δ ≤ 1e100) before reading a row and clips each d_j to ±Δ/2 (NaN ↦ 0): both hostile
models are refused on D and D′ alike.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from scipy.stats import beta

from dpadmm.algorithms.functional import driver_stages as ds
from dpadmm.algorithms.functional import statistics as fs
from dpadmm.algorithms.functional import params as fparams
from dpadmm.estimators.functional import FunctionalQuantileRegressor
from dpadmm.exceptions import PrivacyPreconditionError
from dpadmm.privacy.policy import PolicyRefusal
from dpadmm.privacy.events import GaussianRelease
from dpadmm.privacy.accountants.gaussian import gaussian_epsilon

if not hasattr(fparams, "COMPARE_N_EPSILON"):
    pytest.skip("the comparison's n-dependent share (safety-net branch, 11d36d1) is not in this src", allow_module_level=True)
COMPARE_N_EPSILON, SHARES = fparams.COMPARE_N_EPSILON, fparams.SHARES


def _curves(n, seed, T=12):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, T)).cumsum(axis=1) / 3.0
    return X, X[:, -1] + rng.normal(size=n), np.full(T, 1.0 / T), np.linspace(0.0, 1.0, T)


def _model():
    X, y, _, grid = _curves(60, 2)
    est = FunctionalQuantileRegressor(tau=0.5, workers=1, n_components=3, random_state=0, max_iter=5).fit(X, y, grid=grid)
    w = np.r_[est.coef_, est.intercept_]
    return est._released_model(w, 0.0, 1.0) | {"constant": 0.0, "band": (-5.0, 5.0)}


def _outcomes(X, y, q, model, runs=200):
    """What a private worker releases on (X, y) over ``runs`` fresh generators: 'refused', 'nan', 'inf' or 'number'."""
    cfg, _ = fs.setup_stats("w", X, y, q, 2.0, quantile_multiplier=3.0, compare_multiplier=4.0)
    out = []
    for s in range(runs):
        try:
            with np.errstate(all="ignore"):
                _, msg, _ = fs.stats_step(cfg, None, fs.StatsRequest("compare", model=model),
                                          rng=np.random.default_rng([5, s]))
        except (PolicyRefusal, PrivacyPreconditionError, ValueError):
            out.append("refused")
            continue
        v = float(np.ravel(msg.values["difference"])[0])
        out.append("nan" if math.isnan(v) else "inf" if math.isinf(v) else "number")
    return {k: out.count(k) for k in ("refused", "nan", "inf", "number")}


def _epsilon_seen(c0: dict, c1: dict, alpha: float = 0.05) -> float:
    """Clopper–Pearson ε lower bound from the outcome counts: for each outcome k, ln(p₀ lower / p₁ upper) (both
    orientations), each bound at α/(2·8) (Bonferroni over the 4 outcomes × 2 orientations)."""
    a, best = alpha / 8, 0.0
    for k in c0:
        for x, y in ((c0, c1), (c1, c0)):
            n0, n1 = sum(x.values()), sum(y.values())
            lo = beta.ppf(a, x[k], n0 - x[k] + 1) if x[k] > 0 else 0.0
            hi = beta.ppf(1 - a, y[k] + 1, n1 - y[k]) if y[k] < n1 else 1.0
            if lo > 0:
                best = max(best, math.log(lo / hi))
    return best


def _told_apart(c0: dict, c1: dict, claim: float = 1.0) -> bool:
    """The outcomes reject ε ≤ ``claim`` (1: more than the comparison's share of any total a test here declares)."""
    return _epsilon_seen(c0, c1) > claim


def _sign_split(model, X):
    """The clipped scores' first two coordinates of each curve under the model's own basis (public)."""
    A = model["basis"].scores(X) / model["score_scale"]
    return A[:, 0] * A[:, 1]


def test_a_hub_model_with_infinite_coefficients_leaks_one_curve():
    model = _model()
    pool, ypool, q, _ = _curves(4000, 9)
    prod = _sign_split(model, pool)
    differ, share = np.flatnonzero(prod < 0), np.flatnonzero(prod > 0)
    X, y = pool[differ[:50]], ypool[differ[:50]]  # D: every curve's two scores differ in sign
    Xp, yp = X.copy(), y.copy()
    Xp[0], yp[0] = pool[share[0]], ypool[share[0]]  # D′: one curve replaced by one whose scores share a sign
    w = np.zeros_like(model["w"])
    w[0], w[1] = np.inf, -np.inf
    hostile = model | {"w": w}
    c0, c1 = _outcomes(X, y, q, hostile), _outcomes(Xp, yp, q, hostile)
    assert not _told_apart(c0, c1), (c0, c1, _epsilon_seen(c0, c1))
    assert c0["refused"] == c1["refused"] == 200  # the model alone is refused (fixed: a finite model is required)


def test_a_hub_model_with_a_subnormal_unit_leaks_one_label():
    model = _model()
    X, _, q, _ = _curves(50, 3)
    w = np.zeros_like(model["w"])
    hostile = model | {"w": w, "y_loc": 0.0, "y_scale": 1.0, "band": (0.0, 1.0), "constant": 1.0, "unit": 1e-320}
    y = np.full(50, 5.0)  # every label above the band: ρ(y − p_j) > ρ(y − p₀) with p_j = 0 < p₀ = 1
    yp = y.copy()
    yp[0] = -5.0  # one label below it: that curve's difference is negative
    c0, c1 = _outcomes(X, y, q, hostile), _outcomes(X, yp, q, hostile)
    assert not _told_apart(c0, c1), (c0, c1, _epsilon_seen(c0, c1))
    assert c0["refused"] == c1["refused"] == 200  # Δ = inf is refused from the model alone (fixed)


def test_an_honest_model_gives_numbers_on_both_sides():
    """The outcome check itself: an honest model releases numbers on D and D′ (it is not the check that fails)."""
    model = _model()
    X, y, q, _ = _curves(50, 3)
    yp = y.copy()
    yp[0] = 1e6
    c0, c1 = _outcomes(X, y, q, model, runs=40), _outcomes(X, yp, q, model, runs=40)
    assert c0["number"] == c1["number"] == 40 and not _told_apart(c0, c1)


def _spent(n, total, monkeypatch=None):
    """The ε of the multipliers the run hands its workers (ds.calibrate with the shares the driver uses), recomputed
    by the accountant: L rounds at z, the statistics at z/√W_s, the quantile's B counts at z√(B/W_q), the
    comparison at z/√W_c."""
    params = FunctionalQuantileRegressor(total_epsilon=total, max_iter=40)._params()
    L = 40
    shares = params.shares(L, n)
    b = ds.calibrate(epsilon=None, total_epsilon=total, delta=1e-5, accountant="pld", L=L, shares=shares, private=True,
                     y_range=None, curve_clip=None)
    mults = ([b.z] * L + [b.z_stats] * b.n_stats + [b.z_quantile] * fs.QUANTILE_STEPS + [b.z_compare])
    return shares, gaussian_epsilon(mults, 1e-5, "pld"), b


@pytest.mark.parametrize("n,total", [(200, 1.0), (1000, 2.0), (50_000, 1.0)])
def test_the_comparison_share_never_overspends(n, total):
    shares, eps, _ = _spent(n, total)
    want = min(1.0, max(SHARES["compare"], COMPARE_N_EPSILON / (n * total)))
    assert shares[2] == max(1, round(40 * want))
    assert eps <= total * (1 + 1e-6), (n, total, eps)


def test_the_recompute_catches_a_comparison_at_half_its_multiplier():
    """Plant: the comparison released at z_c/2 (what a driver calibrating with a quarter but handing the rounds' worth
    would do): the recomputed ε exceeds the total."""
    _, _, b = _spent(200, 1.0)
    mults = [b.z] * 40 + [b.z_stats] * b.n_stats + [b.z_quantile] * fs.QUANTILE_STEPS + [b.z_compare / 2]
    assert gaussian_epsilon(mults, 1e-5, "pld") > 1.0 * (1 + 1e-6)


def test_the_compare_event_states_the_noise_it_adds():
    """The event the worker books is at σ = z_c·Δ (the recompute above rests on it)."""
    model = _model()
    X, y, q, _ = _curves(50, 3)
    cfg, _ = fs.setup_stats("w", X, y, q, 2.0, quantile_multiplier=3.0, compare_multiplier=4.0)
    _, _, (ev,) = fs.stats_step(cfg, None, fs.StatsRequest("compare", model=model), rng=np.random.default_rng(0))
    assert isinstance(ev, GaussianRelease) and ev.sigma == pytest.approx(4.0 * fs.compare_sensitivity(model))
