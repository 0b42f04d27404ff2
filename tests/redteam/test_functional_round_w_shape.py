"""The functional ADMM round ([Zhou], ``algorithms.functional.party.party_step``) attacked by the hub through the shape
of the consensus ``w`` it sends every round. The policy says "w (every round): public; the bound covers any hub
value" — any value, but not any *shape*: ``w`` of shape (B, 1, K) instead of (G, S, K) = (1, 1, K) broadcasts the
local step into B solutions, ``rng.standard_normal(w.shape)`` noises each with its own draw, and one event per
setting is booked (the sensitivity and σ of one release).

Found (xfail strict, F5, high): B = 10,000 copies at w = 0; the hub averages them (noise σ/√B) and projects on the
direction the replaced curve moves the noiseless step. Worst-case-ish neighbours (curve 0 → −10× itself, its response
→ −1e6·sign): the noiseless step moves by 0.01 (Δ = 0.063, σ = 0.19 booked); averaged over the copies the
projection is −0.0001 (D) vs 0.0098 (D′), sd 0.0019: above the midpoint 197/200 runs of D′, 1/200 of D —
Clopper–Pearson ε ≥ 3.55 from 200 runs a side, for one round. Booked per round: z = 3, ε(δ = 1e-5) = 1.27; released:
10,000 Gaussians at z = 3, ≈ one at z = 0.03, ε(δ = 1e-5) ≈ 697 — every round, B the hub's choice (ε → ∞).

Held (regular test): the honest (1, 1, K) w releases one (1, 1, 1, K) vector and one event per setting.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.stats import beta

from dpadmm.algorithms.functional import messages as fm
from dpadmm.algorithms.functional import party as fpty
from dpadmm.kernels import fpca

B, RUNS = 10_000, 200


def _curves(m=50, T=20, seed=3):
    rng = np.random.default_rng(seed)
    grid = np.linspace(0, 1, T)
    X = rng.normal(size=(m, 4)) @ np.array([np.cos(k * np.pi * grid) for k in range(4)]) * 3
    return grid, X, X[:, 2] + rng.normal(size=m)


def _party(X, y, grid):
    settings = fm.Settings.make([0.5], noise_multiplier=3.0, lam=0.05)
    opts = dict(rho=1.0, n_workers=2, fit_intercept=True, c1=math.hypot(3.0, 1.0), step="constant")
    return fpty.setup_party_from_curves("worker1", X, y, fpca.fourier_basis(grid, 3), 1.0, 0.0, 1.0, 3.0, settings,
                                        opts)


def _neighbours():
    grid, X, y = _curves()
    X2, y2 = X.copy(), y.copy()
    X2[0] = -10.0 * X[0]
    y2[0] = -math.copysign(1e6, y[0])
    return _party(X, y, grid), _party(X2, y2, grid)


def _quiet(cfg):
    return dataclasses.replace(cfg, settings=dataclasses.replace(
        cfg.settings, noise_multiplier=np.zeros_like(cfg.settings.noise_multiplier)))


def _cp(a0, n0, a1, n1, alpha=0.05):
    lo = beta.ppf(alpha / 2, a0, n0 - a0 + 1) if a0 > 0 else 0.0
    hi = beta.ppf(1 - alpha / 2, a1 + 1, n1 - a1) if a1 < n1 else 1.0
    return math.log(lo / hi) if lo > 0 else 0.0


def test_the_honest_w_releases_one_vector_and_one_event():
    (cfg, st), _ = _neighbours()
    _, msg, ev = fpty.party_step(cfg, st, fm.HubMessage(0, np.zeros((1, 1, cfg.K))), rng=np.random.default_rng(0))
    assert msg.w_tilde.shape == (1, 1, 1, cfg.K) and len(ev) == 1


def test_a_broadcasting_w_is_refused_or_releases_one_vector():
    (c0, s0), (c1, s1) = _neighbours()
    K = c0.K
    honest = fm.HubMessage(0, np.zeros((1, 1, K)))
    a = fpty.party_step(_quiet(c0), s0, honest, rng=np.random.default_rng(0))[1].w_tilde.ravel()
    b = fpty.party_step(_quiet(c1), s1, honest, rng=np.random.default_rng(0))[1].w_tilde.ravel()
    u = (b - a) / np.linalg.norm(b - a)
    hostile = fm.HubMessage(0, np.zeros((B, 1, K)))
    try:
        out = fpty.party_step(c0, s0, hostile, rng=np.random.default_rng(1))[1].w_tilde
    except Exception as exc:  # refused on the message alone: held (fixed: party._checked_hub_w)
        assert "refused round 1" in str(exc) and "expected (1, 1," in str(exc), exc
        return
    if out.size == K:
        return  # one release: held

    def stat(cfg, st, seed):
        w = fpty.party_step(cfg, st, hostile, rng=np.random.default_rng([7, seed]))[1].w_tilde
        return float((w.reshape(-1, K).mean(axis=0) - a) @ u)

    thr = 0.5 * float((b - a) @ u)
    s0_ = np.array([stat(c0, s0, r) for r in range(RUNS)])
    s1_ = np.array([stat(c1, s1, RUNS + r) for r in range(RUNS)])
    eps = _cp(int(np.sum(s1_ > thr)), RUNS, int(np.sum(s0_ > thr)), RUNS)
    assert eps < 1.0, (out.shape, eps, int(np.sum(s1_ > thr)), int(np.sum(s0_ > thr)), s0_.mean(), s1_.mean(), thr)


def test_a_deployed_worker_refuses_a_broadcasting_w(tmp_path):
    """The same through the party runtime the gRPC backend serves (encoded hub messages, the party's policy and
    budget): held if the round is refused or one (1, 1, 1, K) vector is sent back."""
    pytest.importorskip("test_redteam_policy", reason="the policy harness (tests/protocols) is not importable")
    from dpadmm.algorithms.functional import protocol as fp
    from dpadmm.backends.grpc_party import _Refused
    from test_redteam_policy import BUDGET, Party, _fargs

    grid, X, y = _curves()
    w = Party(tmp_path, [fp.PROTOCOL, fp.STATISTICS_PROTOCOL], "worker1", accept_coordinator_data=True, **BUDGET)
    try:
        w.setup(fp.PROTOCOL, _fargs(X, y, fpca.fourier_basis(grid, 3)), 3)
        K = w.svc.cfg.K
        try:
            out = w.step(0, fm.HubMessage(0, np.zeros((50, 1, K))))
        except _Refused:
            return
        assert np.asarray(out["outbox"].w_tilde).size == K, np.asarray(out["outbox"].w_tilde).shape
    finally:
        w.close()
