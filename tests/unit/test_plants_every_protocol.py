"""Every protocol's mechanism, planted — its noise halved, and separately a draw reused — fails a statistical check
of the noise it released, and the honest mechanism passes it (issue 35, item 4).

The plants act on the generator a party draws from (:func:`dpadmm.experiments.audit_games.planted_generators`:
:class:`~dpadmm.experiments.audit_rngs.ScaledRNG` — Gaussian draws and Gamma radii × ½, a randomized-response flip
probability × ½ — and :class:`~dpadmm.experiments.audit_rngs.RepeatRNG` — a party's odd-numbered generator repeats
the draws of the one before: round 2j + 1 of a fit reuses round 2j's, or fit 2j + 1 fit 2j's where a fit has one
generator), so they reach whichever library function turns the draws into noise; the ledgers are unchanged.

The check. Gaussian mechanisms, through the worst-case audit games (the real party steps; the adversary's
noiseless replay gives the un-noised release exactly): each release's noise projected on the direction the canary
moves it, over its stated σ, ``u = Δᵀ(x − μ)/(σ‖Δ‖)``, is N(0, 1) and independent over releases. (a) variance:
``Σu² ~ χ²_k``, two-sided; (b) independence: for every lag ℓ ≤ 2T of the releases in order (run after run),
``|Σ u_i u_{i+ℓ}|`` over the disjoint pairs (i, i + ℓ) with ⌊i/ℓ⌋ even (each release in at most one pair, so the
m products are independent), against the Chernoff bound ``P(S ≥ s) ≤ min_λ e^{−λs}(1 − λ²)^{−m/2}`` (the MGF of a
product of independent N(0, 1) variables is ``(1 − λ²)^{−1/2}``), Bonferroni over the lags and both tails. Randomized response: the flip count is
Binomial(n, q) (two-sided); the rows flipped in both of two fits Binomial(n, q²). Consensus penalty perturbation and
the experts' output perturbation: the χ²/Gamma and correlation tests of ``test_audit_noise``.

False-failure probability of each honest check ≤ ``FALSE_FAILURE`` = 1e-6 (the test is seeded, so deterministic;
that is the rate for a fresh seed). Under a plant the statistics are far outside: halved noise puts ``Σu²/k`` near
¼, a reused draw a correlation of about 1 into half the pairs of one lag.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import binom, chi2

from test_audit_noise import consensus_noise, consensus_radii_ok, uncorrelated  # the M-ADMM noise (one home)

from dpadmm.experiments import audit_worst_case as W
from dpadmm.experiments.audit_games import ZeroRNG, _play, _seen, generator_plant, planted_generators
from dpadmm.experiments.audit_plants import draws_reused, noise_times

FALSE_FAILURE = 1e-6
PLANTS = {"honest": None, "noise x1/2": lambda: noise_times(0.5), "draw reused": draws_reused}


def chernoff_product_bound(m: int, p: float) -> float:
    """s with ``P(Σ_{j<m} X_j Y_j ≥ s) ≤ p`` for independent N(0, 1) X_j, Y_j: the smallest s whose Chernoff bound
    ``min_λ exp(−λs − (m/2) log(1 − λ²))`` is ≤ p."""
    lams = np.linspace(1e-4, 0.999, 4000)

    def log_bound(s):
        return float(np.min(-lams * s - 0.5 * m * np.log1p(-lams ** 2)))

    return brentq(lambda s: log_bound(s) - math.log(p), 1e-9, 50.0 * m + 100.0)


def variance_ok(u: np.ndarray) -> bool:
    """Σu² within the two-sided χ²_k interval of probability 1 − FALSE_FAILURE/2 (half the budget; the lags the other)."""
    k, s = u.size, float(np.sum(u * u))
    return chi2.ppf(FALSE_FAILURE / 4, k) <= s <= chi2.ppf(1 - FALSE_FAILURE / 4, k)


def independent(u: np.ndarray, max_lag: int) -> bool:
    """No lag ℓ ≤ max_lag whose disjoint-pair product sum is beyond its Chernoff bound (two-sided, Bonferroni over the
    lags at FALSE_FAILURE/2 in all)."""
    p = FALSE_FAILURE / 2 / (2 * max_lag)
    for lag in range(1, max_lag + 1):
        i = np.arange(u.size - lag)
        i = i[(i // lag) % 2 == 0]
        if abs(float(u[i] @ u[i + lag])) > chernoff_product_bound(i.size, p):
            return False
    return True


# ----------------------------------------------------------------------------- Gaussian mechanisms: the audit games
GAMES = {
    "vertical (ADMM sharing, features)": ("worst-case vertical-gaussian[record]", 60),
    "vertical labels (Gaussian label DP)": ("worst-case vertical-label", 60),
    "encrypted features": ("worst-case vertical-encrypted[record]", 60),
    "encrypted labels": ("worst-case vertical-encrypted[label]", 80),
    "gossip gradients": ("worst-case gossip-gradient", 60),
    "gossip ranges": ("worst-case gossip-range", 60),
    "gossip regression (squared)": ("worst-case gossip-squared", 60),
    "gossip several classes (softmax)": ("worst-case gossip-multinomial", 60),
    "functional (FDP-ADMM rounds)": ("worst-case zhou-fdp-admm", 60),
    "functional (pooled mean)": ("worst-case functional-statistics[mean]", 200),
}
_GAME_CACHE: dict = {}


def _game(name):
    if not _GAME_CACHE:
        _GAME_CACHE.update({g.name: g for g in W.games()})
    return _GAME_CACHE[name]


def standardised_noise(name: str, runs: int, plant) -> tuple[np.ndarray, int]:
    """The mechanism party's releases of ``runs`` fits on D (the game's seed 0) under ``plant``: each release's noise
    projected on the canary's direction over its stated σ, in release order; and T (releases per fit)."""
    game = _game(name)
    with planted_generators(plant()) if plant else contextlib.nullcontext():
        rec = (game.player or _play)(game, 0, runs, 12345)
    X, mu0, mu1 = _seen(game, 0, rec)
    sigma = np.array([float(e.sigma) for e in rec["events"]])
    D = mu1 - mu0
    norm = np.linalg.norm(D, axis=-1)
    moved = norm > 1e-12
    assert moved.any(axis=0).sum() == 1 and moved[:, moved.any(axis=0)].all()  # one stream, every release
    p = int(np.flatnonzero(moved.any(axis=0))[0])
    u = np.sum(D[:, p] * (X[:, p] - mu0[:, p]), axis=-1) / (norm[:, p] * sigma)
    return u, game.rounds


@pytest.mark.statistical
@pytest.mark.parametrize("plant", list(PLANTS))
@pytest.mark.parametrize("protocol", list(GAMES))
def test_gaussian_mechanism_noise_check_catches_each_plant(protocol, plant):
    name, runs = GAMES[protocol]
    u, T = standardised_noise(name, runs, PLANTS[plant])
    ok = variance_ok(u) and independent(u, 2 * T)
    assert ok == (plant == "honest"), (protocol, plant, float(np.mean(u * u)))


# ----------------------------------------------------------------------------- randomized response: labels, experts
def binomial_ok(k: int, n: int, p: float, alpha: float) -> bool:
    """k within the two-sided Binomial(n, p) interval of probability 1 − alpha."""
    return binom.ppf(alpha / 2, n, p) <= k <= binom.isf(alpha / 2, n, p)


def flips_ok(flipped: list, q: float) -> bool:
    """Two fits' flip indicators: each fit's count Binomial(n, q), the rows flipped in both Binomial(n, q²) (the fits'
    flips independent); Bonferroni over the three at FALSE_FAILURE."""
    a = FALSE_FAILURE / 3
    n = flipped[0].size
    return (all(binomial_ok(int(f.sum()), n, q, a) for f in flipped)
            and binomial_ok(int(np.sum(flipped[0] & flipped[1])), n, q * q, a))


@contextlib.contextmanager
def _planted(plant, module, who=None):
    """``plant`` in every generator ``module.party_rng`` hands out (one party's store per stream index)."""
    if plant is None:
        yield
        return
    real = module.party_rng
    with planted_generators(plant()), pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "party_rng", lambda entropy, index, round_: generator_plant()(
            real(entropy, index, round_), who or f"stream {index}"))
        yield


@pytest.mark.statistical
@pytest.mark.parametrize("plant", list(PLANTS))
def test_label_randomized_response_check_catches_each_plant(plant):
    """The labels' randomized response of vertical ADMM (``algorithms.vertical.driver.rr_labels``, the default label mechanism)."""
    from dpadmm.algorithms.vertical import label as vertical_label
    from dpadmm.algorithms.vertical import driver as vertical_fit

    y = np.where(np.arange(4000) % 3 == 0, -1.0, 1.0)
    with _planted(PLANTS[plant], vertical_fit):
        released = [vertical_fit.rr_labels(y, 1.0, seed, 2, None, None)[0] for seed in (0, 1)]
    ok = flips_ok([r != y for r in released], vertical_label.flip_probability(1.0))
    assert ok == (plant == "honest"), plant


def experts_releases(plant) -> tuple[list, list, float]:
    """Two seeded fits of the experts protocol (label ε = 1 by randomized response, feature ε = 1 by output
    perturbation; two feature parties of 150 columns): each fit's released labels' flips, each party's coefficient
    noise over its stated σ (the un-noised coefficient: the party's real ``fit_expert`` replayed without noise on the
    same inputs), and the flip probability."""
    from dpadmm.algorithms.experts import driver as experts_driver, model as ve, party as experts_party
    from dpadmm.algorithms.vertical import label as vl
    from dpadmm.backends import base as backend_base  # the feature parties' streams (hosted by the backend)
    from dpadmm.estimators.vertical_experts import VerticalExpertsClassifier

    rng = np.random.default_rng(3)
    n, d = 1500, 150
    blocks = [rng.normal(size=(n, 2)), rng.normal(size=(n, d)) / math.sqrt(d), rng.normal(size=(n, d)) / math.sqrt(d)]
    y = np.where(blocks[0][:, 0] + blocks[1][:, 0] * 4 + rng.normal(size=n) > 0, 1, -1)
    flips, Z = [], []
    real_fit, real_rr = ve.fit_expert, vl.randomized_response
    with _planted(plant, experts_driver), _planted(plant, backend_base), pytest.MonkeyPatch.context() as mp, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def rr(labels, epsilon, *, rng):
            out = real_rr(labels, epsilon, rng=rng)
            flips.append(np.asarray(out[0]) != np.asarray(labels))
            return out

        def fit(D, labels, **kw):
            coef, info, events = real_fit(D, labels, **kw)
            exact = real_fit(D, labels, **dict(kw, rng=ZeroRNG()))[0]
            (event,) = events
            Z.append((np.asarray(coef) - np.asarray(exact)) / float(event.sigma))
            return coef, info, events

        mp.setattr(vl, "randomized_response", rr)
        mp.setattr(ve, "fit_expert", fit)
        mp.setattr(experts_party, "fit_expert", fit)  # where the party's step looks it up
        for seed in (0, 1):
            VerticalExpertsClassifier(epsilon=1.0, label_epsilon=1.0, calibrate=False, min_effective_rows=1,
                                      random_state=seed).fit(blocks, y)
    assert len(flips) == 2 and len(Z) == 4
    return flips, Z, vl.flip_probability(1.0)


@pytest.mark.statistical
@pytest.mark.parametrize("plant", list(PLANTS))
def test_experts_checks_catch_each_plant(plant):
    """The experts protocol: its labels' randomized response (flip counts) and each party's output perturbation (χ²
    of the standardised coefficient noise; pairwise correlation — the two fits and the two parties — at FALSE_FAILURE
    by the Chernoff bound over the six pairs)."""
    flips, Z, q = experts_releases(PLANTS[plant])
    z = np.concatenate(Z)
    bound = chernoff_product_bound(Z[0].size, FALSE_FAILURE / 4 / 12)
    pairs_ok = all(abs(float(Z[i] @ Z[j])) <= bound for i in range(4) for j in range(i + 1, 4))
    ok = flips_ok(flips, q) and variance_ok(z) and pairs_ok
    assert ok == (plant == "honest"), (plant, flips_ok(flips, q), variance_ok(z), pairs_ok)


# ----------------------------------------------------------------------------- M-ADMM: consensus penalty perturbation
@pytest.mark.statistical
@pytest.mark.parametrize("plant", list(PLANTS))
def test_m_admm_penalty_noise_checks_catch_each_plant(plant):
    """Penalty perturbation's draws (``privacy.mechanisms.gamma_norm``, the generator planted): the radii's Gamma test
    and the cross-node / cross-round correlation test of ``test_audit_noise`` (false failure ≤ 1e-6 and 1e-4)."""
    from dpadmm.privacy import mechanisms

    factory = PLANTS[plant]
    with (planted_generators(factory()) if factory else contextlib.nullcontext()), \
            pytest.MonkeyPatch.context() as mp:
        if factory:
            real = mechanisms.gamma_norm
            mp.setattr(mechanisms, "gamma_norm",
                       lambda rng, a, dim, size=None: real(generator_plant()(rng, "node"), a, dim, size=size))
        Z = consensus_noise()
    radii_ok = consensus_radii_ok(*Z.pop("radii"))
    ok = radii_ok and uncorrelated(Z)
    assert ok == (plant == "honest"), (plant, radii_ok)


# ----------------------------------------------------------------------------- several classes, real-valued labels
@pytest.mark.statistical
@pytest.mark.parametrize("plant", list(PLANTS))
@pytest.mark.parametrize("mechanism", ["k-ary", "bins"])
def test_label_k_ary_and_bins_randomized_response_check_catches_each_plant(mechanism, plant):
    """k-ary randomized response and randomized response on bins (``privacy/label_mechanisms.py``), two releases
    from the label party's generators (planted as :func:`planted_generators` plants every generator): each release's
    changed rows Binomial(n, P(change)), the rows changed in both Binomial(n, P(change)²)."""
    from dpadmm.privacy import label_mechanisms as lm

    y = np.arange(4000) % 4
    values = np.linspace(0.0, 1.0, 4000)
    changed, qs = [], []
    with planted_generators(PLANTS[plant]()) if PLANTS[plant] else contextlib.nullcontext():
        for seed in (0, 1):
            rng = np.random.default_rng(seed)
            wrap = generator_plant()
            rng = wrap(rng, "label party") if wrap is not None else rng
            if mechanism == "k-ary":
                changed.append(lm.k_randomized_response(y, 4, 1.0, rng=rng)[0] != y)
                qs.append(lm.change_probability(1.0, 4))
            else:
                rel = lm.rr_on_bins(values, 3.0, rng=rng, label_range=(0.0, 1.0), n_bins=8)
                truth = rel.outputs[rel.assign[np.clip(np.searchsorted(rel.edges, values, side="right") - 1, 0, 7)]]
                changed.append(rel.labels != truth)
                qs.append(lm.change_probability(rel.epsilons["rr"], rel.outputs.size))
    assert qs[0] == qs[1] and qs[0] > 0.05  # the same number of outputs in both releases
    assert flips_ok(changed, qs[0]) == (plant == "honest"), (mechanism, plant)
