"""The noise a private fit actually draws, measured on its ordinary ``epsilon=`` path.

For every release of a fit: noise = release − the noiseless value, recomputed here (numpy, from what
the party received and its own block), divided by ``nm·C`` with the noise multiplier from the
calibration of the requested ε and C from the sensitivity *formula* (not read from the report). The
standardised noise must be N(0, 1) — a variance test — and independent across rounds and parties —
a correlation test on every pair of releases, i.e. on the linear combination ``z_a − z_b`` that a
reused draw would make noiseless.

False-failure rates (the fits are seeded, so each test is deterministic; the rates are those of the
test statistic for a fresh seed): the variance test is two-sided at 1e-6 (χ²); a pair's correlation
``|⟨z_a, z_b⟩|/n > 5/√n`` has probability 6e-7, < 1e-4 over all pairs. A 2× error of σ moves the
variance to 0.25 or 4 and a reused draw moves a correlation to 1: both far outside.
Each test is a plant check too: the same measurement with the drawn noise halved, or one draw reused,
must fail (``_plants``).
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
from scipy.stats import chi2

from dpadmm.algorithms.vertical import party as vertical_party  # where release draws its noise
from dpadmm.estimators.vertical import VerticalLogisticRegression
from dpadmm.algorithms.functional import driver_stages as fit_functional
from dpadmm.algorithms.vertical import driver as fit_vertical
from dpadmm.privacy.accountants.gaussian import calibrate_noise_multiplier

N, T, RHO, LAM, EPS, DELTA = 400, 4, 0.5, 0.01, 1.0, 1e-5
FALSE_FAILURE = 1e-6


def _declared(mp, driver, name: str, **functions):
    """The protocol declaration ``driver.name`` a fit's parties run, replaced for the test by a copy with ``functions``
    (a spy or planted ``setup`` / ``step``): specs are built from the declaration, so that is where to patch."""
    mp.setattr(driver, name, dataclasses.replace(getattr(driver, name), **functions))


def variance_ok(z: np.ndarray) -> bool:
    """Two-sided χ² test of Var z = 1 at ``FALSE_FAILURE`` (mean known to be 0)."""
    n = z.size
    s = float(np.sum(z * z))
    return chi2.ppf(FALSE_FAILURE / 2, n) <= s <= chi2.ppf(1 - FALSE_FAILURE / 2, n)


def uncorrelated(Z: dict) -> bool:
    """Releases' standardised noises ``Z[(party, round)]`` are uncorrelated: for every lag k (rounds t, t + k of
    one party) and every pair of parties (same round), the pooled ``S = Σ ⟨z_a, z_b⟩`` over those pairs has
    ``|S| ≤ 5√n`` (n = number of products; false failure 6e-7 per group); and every single pair of vectors
    with at least 100 coordinates has ``|⟨z_a, z_b⟩| ≤ 5√n``. A reused draw makes one ``z_a − z_b`` zero,
    i.e. ``⟨z_a, z_b⟩ ≈ n``."""
    groups: dict = {}
    keys = list(Z)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            prod, n = float(Z[a] @ Z[b]), Z[a].size
            if n >= 100 and abs(prod) > 5.0 * math.sqrt(n):
                return False
            gs = [("lag", abs(b[1] - a[1])), ("any lag",)] if a[0] == b[0] else \
                ([("parties", a[0], b[0])] if a[1] == b[1] else [])
            for g in gs:
                S, m = groups.get(g, (0.0, 0))
                groups[g] = (S + prod, m + n)
    return all(abs(S) <= 5.0 * math.sqrt(m) for S, m in groups.values())


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X1, X2 = rng.normal(size=(N, 3)), rng.normal(size=(N, 2))
    return X1, X2, np.where(X1[:, 0] + X2[:, 0] + rng.normal(size=N) > 0, 1, -1)


def _record_sensitivity(V, V_inf, lam_sum, rho):
    """[mechanisms.ridge_share_sensitivity], record relation, re-derived here: min(V/ρ, (V_∞ + ρB)/√(λρ) + 2B)."""
    B = V / (2.0 * math.sqrt(lam_sum * rho))
    return min(V / rho, (min(V_inf, V) + rho * B) / math.sqrt(lam_sum * rho) + 2.0 * B)


def vertical_feature_noise(seed=0) -> dict:
    """{(party, round): standardised noise of the share it sent} for a record-private ε = 1 fit."""
    X1, X2, y = _data()
    cfgs, sent, got = {}, {}, {}
    real_setup = fit_vertical.PROTOCOL.setup

    def spy(name, D, options):
        cfg, st = real_setup(name, D, options)
        cfgs[name] = cfg
        return cfg, st

    def rec(r, s, rcv, msg, kind):
        if kind == "protocol" and s == "hub":
            got.setdefault(rcv, []).append(msg)
        elif kind == "protocol":
            sent.setdefault(s, []).append(np.asarray(msg.share, float))

    est = VerticalLogisticRegression(epsilon=EPS, delta=DELTA, max_iter=T, rho=RHO, lam=LAM, relation="record",
                                     fit_intercept=False, random_state=seed)
    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore")
        _declared(mp, fit_vertical, "PROTOCOL", setup=spy)
        est.fit([X1, X2], y, transcript=rec)
    nm = calibrate_noise_multiplier(EPS, DELTA, T - 1)  # the first share answers the zero inbox: free
    lam_sum = N * LAM
    Z = {}
    for name, cfg in cfgs.items():
        D = cfg.D.toarray() if hasattr(cfg.D, "toarray") else np.asarray(cfg.D)
        assert np.all(np.linalg.norm(D, axis=1) <= 1 + 1e-12)  # the rows the bound assumes
        V, V_inf = cfg.privacy.clip, cfg.privacy.clip_inf
        prev = np.zeros(N)
        for t, (inbox, share) in enumerate(zip(got[name], sent[name])):
            v = inbox.dual + inbox.rho * (inbox.residual - prev)
            v = np.clip(v, -V_inf, V_inf)
            v = v * min(1.0, V / max(np.linalg.norm(v), 1e-300))
            x = -np.linalg.solve(lam_sum * np.eye(D.shape[1]) + inbox.rho * D.T @ D, D.T @ v)
            C = _record_sensitivity(min(V, np.linalg.norm(v)), min(V_inf, np.max(np.abs(v))), lam_sum, inbox.rho)
            if C > 0:
                Z[name, t] = (share - D @ x) / (nm * C)
            else:
                assert np.allclose(share, D @ x, atol=1e-9)  # the zero inbox: nothing private, no noise
            prev = share
    assert len(Z) == 2 * (T - 1)
    return Z


def vertical_label_noise(seed=0) -> dict:
    """{round: standardised noise of the coordinator's label message} for a label ε = 1 fit (no intercept)."""
    X1, X2, y = _data()
    shares, got = [], []

    def rec(r, s, rcv, msg, kind):
        if kind != "protocol":
            return
        if s == "hub" and rcv == "party2":
            got.append(msg)
        elif s != "hub":
            shares.append((r, s, np.asarray(msg.share, float)))

    kw = {"label_mechanism": "gaussian"} if "label_mechanism" in VerticalLogisticRegression().get_params() else {}
    est = VerticalLogisticRegression(label_epsilon=EPS, delta=DELTA, max_iter=T, rho=RHO, lam=LAM, fit_intercept=False,
                                     random_state=seed, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit([X1, X2], y, transcript=rec)
    if getattr(est.privacy_, "label", None) and est.privacy_.label.get("mechanism") == "randomized-response":
        pytest.skip("label privacy by randomized response: no Gaussian label noise")
    nm = calibrate_noise_multiplier(EPS, DELTA, T - 1)
    sigma = nm * 1.0  # label gap of the logistic loss, no intercept: sensitivity 1
    Z = {}
    for t in range(1, T):  # the hub message after round t's shares (round T's step releases nothing)
        s = sum(sh for r, _, sh in shares if r == t)
        g = -y * (1.0 / (1.0 + np.exp(y * s)))  # ℓ'(s, y) of the logistic loss
        Z["coordinator", t] = (np.asarray(got[t].dual, float) - g) / sigma
    return Z


def functional_noise(seed=0) -> dict:
    """{(worker, round): standardised noise of w~ it sent} for an ``epsilon=1`` (per iteration) FDP-ADMM fit. The
    noiseless w is the worker's real step replayed without noise on the messages it received (its state rebuilt from
    what it sent); σ = z·2c_1/(m_i(ρ + 1/η_l)) (linearised step; 2c_1/(m_i ρ) exact), z = √(2 ln(1.25/δ))/ε."""
    from dpadmm.algorithms.functional import (messages as functional_messages, party as functional_party,
                                              rules as functional_rules)
    from dpadmm.estimators.functional import FunctionalQuantileRegressor
    from dpadmm.experiments.audit_games import ZeroRNG

    rng = np.random.default_rng(seed)
    n, grid_n, L = 600, 20, 6
    grid = np.linspace(0, 1, grid_n)
    X = rng.normal(size=(n, 4)) @ np.array([np.cos(k * np.pi * grid) for k in range(4)])
    y = X[:, 2] + rng.normal(size=n)
    kw = dict(basis="fourier", n_components=6, epsilon=EPS, delta=DELTA, max_iter=L, workers=2,
              y_range=(-10.0, 10.0), curve_clip=10.0, random_state=seed)
    cfgs, sent, got = {}, {}, {}
    real = functional_party.setup_party_from_curves

    def spy(**fields):
        out = real(**fields)
        cfgs[fields["name"]] = out
        return out

    def rec(run, r, s, rcv, msg, kind):
        if kind == "protocol" and s == "hub" and isinstance(msg, functional_messages.HubMessage):
            got.setdefault(rcv, []).append(msg)
        elif kind == "protocol" and isinstance(msg, functional_messages.PartyMessage):
            sent.setdefault(s, []).append(msg)

    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore")
        _declared(mp, fit_functional, "PROTOCOL", setup=spy)
        FunctionalQuantileRegressor(**kw).fit(X, y, grid=grid, transcript=rec)
    z = math.sqrt(2.0 * math.log(1.25 / DELTA)) / EPS  # per-iteration ε [Zhou, Thm 1]: the classical Gaussian z
    Z = {}
    for name, (cfg, st) in cfgs.items():
        for t, (inbox, msg) in enumerate(zip(got[name], sent[name])):
            if t:
                prev, pin = sent[name][t - 1], got[name][t - 1]
                st = functional_messages.PartyState(w=np.asarray(prev.w_tilde), w_tilde=np.asarray(prev.w_tilde),
                                   gamma=np.asarray(prev.gamma), w_hub=np.asarray(pin.w),
                                   rho=cfg.rho if pin.rho is None else float(pin.rho))
            w = functional_party.party_step(cfg, st, inbox, rng=ZeroRNG())[0].w
            rho = cfg.rho if inbox.rho is None else float(inbox.rho)
            if cfg.local_step == "exact":
                C = 2 * cfg.c1 / (cfg.m * rho)
            else:
                s_ = cfg.settings
                eta = functional_rules.step_size(cfg.step, inbox.round + 1, c_w=cfg.c_w, c1=cfg.c1, c2=cfg.c2, lam=s_.lam,
                                   n_workers=cfg.n_workers, K=cfg.K, m=cfg.m, eps_iter=s_.eps_iter,
                                   delta_iter=s_.delta_iter, eta0=cfg.eta0, decay_start=cfg.decay_start,
                                   smooth=cfg.smooth)
                C = 2 * cfg.c1 / (cfg.m * (rho + 1.0 / float(eta[0])))
            Z[name, t] = np.ravel(np.asarray(msg.w_tilde) - w) / (z * C)
    assert len(Z) == 2 * L
    return Z


def consensus_noise(seed=0) -> dict:
    """{(node, round): standardised penalty noise} of a pp fit. The release f_i(t+1) is an argmin, not value + noise,
    so the draws are taken where they are made (``privacy.mechanisms.gamma_norm``): with density ∝ exp(−α‖ε‖) in R^d
    the covariance is (d + 1)/α² I, so z = α ε/√(d + 1) is standardised; α comes from the public schedule
    α·growth^(t−1) computed here. Also returns the radii α‖ε‖ (Gamma(d, 1) each) under key "radii"."""
    from dpadmm.estimators.consensus import ConsensusLogisticRegression
    from dpadmm.privacy import mechanisms

    rng = np.random.default_rng(seed)
    nodes, d, L, alpha, growth = 4, 24, 8, 2.0, 1.3  # d = 24: a draw shared by two nodes gives S ≈ 8d = 192 ≫ 5√(8d) = 69
    Xs = [rng.normal(size=(50, d)) for _ in range(nodes)]
    Xs = [X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0) for X in Xs]
    ys = [np.where(X[:, 0] + 0.3 * rng.normal(size=50) > 0, 1.0, -1.0) for X in Xs]
    draws = []
    real = mechanisms.gamma_norm

    def spy(rng_, a, dim, size=None):
        out = real(rng_, a, dim, size=size)
        draws.append(np.asarray(out))
        return out

    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore")
        mp.setattr(mechanisms, "gamma_norm", spy)
        ConsensusLogisticRegression(n_nodes=nodes, topology="ring", perturbation="pp", alpha=alpha, alpha_growth=growth,
                                    max_iter=L, random_state=seed, monitor=False).fit(Xs, ys)
    if len(draws) == L * nodes:  # seeded: each node of the stacked block draws from its own stream
        draws = [np.concatenate(draws[t * nodes:(t + 1) * nodes]) for t in range(L)]
    assert len(draws) == L
    Z, radii = {}, []
    for t, eps in enumerate(draws):
        a = alpha * growth ** t
        for k in range(nodes):
            Z[f"node{k}", t] = a * eps[k] / math.sqrt(d + 1)
            radii.append(a * np.linalg.norm(eps[k]))
    Z["radii"] = (np.array(radii), d)
    return Z


def consensus_radii_ok(radii: np.ndarray, d: int) -> bool:
    """Σ α‖ε‖ over k draws is Gamma(k·d, 1): two-sided at ``FALSE_FAILURE``."""
    from scipy.stats import gamma

    k = radii.size
    return gamma.ppf(FALSE_FAILURE / 2, k * d) <= radii.sum() <= gamma.ppf(1 - FALSE_FAILURE / 2, k * d)


CASES = {"vertical-feature": vertical_feature_noise, "vertical-label": vertical_label_noise,
         "functional-rounds": functional_noise, "consensus-pp": consensus_noise}
_HONEST: dict = {}


def _honest(case):
    if case not in _HONEST:
        _HONEST[case] = CASES[case]()
    return dict(_HONEST[case])


@pytest.mark.parametrize("case", list(CASES))
def test_drawn_noise_has_the_variance_the_proof_gives(case):
    Z = _honest(case)
    if "radii" in Z:
        assert consensus_radii_ok(*Z.pop("radii"))
    else:
        assert variance_ok(np.concatenate(list(Z.values())))


@pytest.mark.parametrize("case", list(CASES))
def test_drawn_noise_is_uncorrelated_across_rounds_and_parties(case):
    Z = _honest(case)
    Z.pop("radii", None)
    assert uncorrelated(Z)


# ----------------------------------------------------------------------------- the tests catch the plants
def _halve(mp):
    real = vertical_party.isotropic_gaussian
    mp.setattr(vertical_party, "isotropic_gaussian", lambda rng, sigma, n, size=None: 0.5 * real(rng, sigma, n, size))


def _reuse(mp, source: int, target: int):
    """Call ``target`` of the sampler returns call ``source``'s standard-normal draw, times its own σ. Calls go
    party 1, party 2 round after round: (2, 3) shares a draw between the parties in round 1, (2, 4) reuses
    party 1's round-1 draw in round 2."""
    real, calls = vertical_party.isotropic_gaussian, []

    def sampler(rng, sigma, n, size=None):
        z = real(rng, 1.0, n, size)
        calls.append(z)
        return sigma * (calls[source] if len(calls) - 1 == target else z)

    mp.setattr(vertical_party, "isotropic_gaussian", sampler)


def test_variance_test_fails_when_the_drawn_noise_is_halved():
    with pytest.MonkeyPatch.context() as mp:
        _halve(mp)
        Z = vertical_feature_noise()
    assert not variance_ok(np.concatenate(list(Z.values())))


def test_label_variance_test_fails_when_the_coordinators_noise_is_halved():
    from dpadmm.experiments.audit_games import ScaledRNG

    from dpadmm.algorithms.vertical import coordinator as home  # where coordinator_step looks the label step up
    real = home.label_private_step
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(home, "label_private_step", lambda cfg, st, out, *, rng: real(cfg, st, out, rng=ScaledRNG(rng, 0.5)))
        Z = vertical_label_noise()
    assert not variance_ok(np.concatenate(list(Z.values())))


def test_functional_tests_fail_when_the_workers_noise_is_halved_or_reused():
    from dpadmm.algorithms.functional import party as functional_party
    from dpadmm.experiments.audit_games import ReplayRNG, ScaledRNG

    real = functional_party.party_step
    with pytest.MonkeyPatch.context() as mp:
        _declared(mp, fit_functional, "PROTOCOL",
                  step=lambda cfg, st, inbox, *, rng: real(cfg, st, inbox, rng=ScaledRNG(rng, 0.5)))
        assert not variance_ok(np.concatenate(list(functional_noise().values())))
    store = {}
    with pytest.MonkeyPatch.context() as mp:  # every worker reuses its round-1 draw in every later round
        _declared(mp, fit_functional, "PROTOCOL", step=lambda cfg, st, inbox, *, rng: real(
            cfg, st, inbox, rng=ReplayRNG(store, cfg.name, rng, reuse=inbox.round > 0)))
        assert not uncorrelated(functional_noise())


@pytest.mark.parametrize("source, target", [(2, 3), (2, 4)], ids=["across-parties", "across-rounds"])
def test_correlation_test_fails_when_one_draw_is_reused(source, target):
    with pytest.MonkeyPatch.context() as mp:
        _reuse(mp, source, target)
        Z = vertical_feature_noise()
    assert variance_ok(np.concatenate(list(Z.values())))  # the variance alone cannot see it
    assert not uncorrelated(Z)


def test_consensus_tests_fail_when_the_penalty_noise_is_halved_or_reused():
    from dpadmm.privacy import mechanisms

    real = mechanisms.gamma_norm
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mechanisms, "gamma_norm", lambda rng, a, dim, size=None: 0.5 * real(rng, a, dim, size=size))
        Z = consensus_noise()
    assert not consensus_radii_ok(*Z.pop("radii"))
    first = {}

    def once(rng, a, dim, size=None):  # the first round's directions and radii (rescaled by alpha) every round
        z = real(rng, 1.0, dim, size=size)
        n = first.get("calls", 0)
        first["calls"] = n + 1
        k = n % 4 if np.shape(z)[0] == 1 else 0  # seeded stacked block: one call per node (4 nodes), in order
        first.setdefault(k, z)
        return first[k] / np.asarray(a)[..., None]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mechanisms, "gamma_norm", once)
        Z = consensus_noise()
    assert consensus_radii_ok(*Z.pop("radii"))  # the radii alone cannot see it
    assert not uncorrelated(Z)


def test_functional_correlation_test_fails_when_two_workers_share_a_draw():
    """Worker 2 adds worker 1's standard-normal draw of the same round (times its own σ): each release alone is
    still N(0, σ²), so only the cross-party correlation can see it."""
    from dpadmm.algorithms.functional import party as functional_party
    from dpadmm.experiments.audit_games import ReplayRNG

    real, store = functional_party.party_step, {}

    def step(cfg, st, inbox, *, rng):
        return real(cfg, st, inbox, rng=ReplayRNG(store, "round", rng, reuse=cfg.name != "worker1"))

    with pytest.MonkeyPatch.context() as mp:
        _declared(mp, fit_functional, "PROTOCOL", step=step)
        Z = functional_noise()
    assert sorted({k[0] for k in Z}) == ["worker1", "worker2"]
    assert variance_ok(np.concatenate(list(Z.values())))  # the variance alone cannot see it
    assert not uncorrelated(Z)


def test_consensus_correlation_test_fails_when_two_nodes_share_a_draw():
    """Node 1 uses node 0's penalty noise of the same round (rescaled by its own α): radii and variance unchanged,
    the cross-node correlation is 1."""
    from dpadmm.privacy import mechanisms

    real, calls = mechanisms.gamma_norm, [0]
    prev: dict = {}

    def shared(rng, a, dim, size=None):
        z = real(rng, 1.0, dim, size=size)  # standardised (α = 1), rescaled below
        n = calls[0]
        calls[0] += 1
        if np.shape(z)[0] == 1:  # seeded: one call per node, nodes 0..3 in order
            if n % 4 == 0:
                prev["z"] = z
            elif n % 4 == 1:
                z = prev["z"]
        else:  # one stacked call for every node
            z = z.copy()
            z[1] = z[0]
        return z / np.asarray(a)[..., None]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mechanisms, "gamma_norm", shared)
        Z = consensus_noise()
    assert consensus_radii_ok(*Z.pop("radii"))
    assert not uncorrelated(Z)
    assert all(np.allclose(Z["node0", t], Z["node1", t]) for t in range(8))  # the plant did what it says
