"""Feature-side sensitivity of the gaussian share mechanism, checked against worst-case neighbours.

Every bound of :func:`dpadmm.privacy.mechanisms.ridge_share_sensitivity` is checked on the code path
that runs (``vertical_sharing.party_step`` with zero noise, so the clip is included): over many
neighbours — random, structured and numerically optimised — the realised
``‖message(D) − message(D')‖`` never exceeds the bound the noise is calibrated to.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from dpadmm.algorithms.vertical import messages as vertical_messages, party as vertical_party
from dpadmm.kernels.regularizers import get_regularizer
from dpadmm.privacy.mechanisms import clip_share_input, ridge_share_sensitivity

N, D_COLS = 24, 4


def _party(D, *, relation, V, V_inf, lam_sum, noise=0.0):
    spec = vertical_messages.PrivacySpec(noise_scale=noise, mechanism="gaussian", relation=relation, clip=V, clip_inf=V_inf)
    cfg, state = vertical_party.setup_party("p", D, {"lam_sum": lam_sum, "reg": get_regularizer("l2"), "private": spec})
    return cfg, state


def _message(D, v, *, relation, V, V_inf, lam_sum, rho):
    """The share party_step releases (zero noise) for an inbox whose v = dual + ρ(residual − share) is ``v``."""
    cfg, state = _party(D, relation=relation, V=V, V_inf=V_inf, lam_sum=lam_sum)
    inbox = vertical_messages.CoordinatorMessage(1, np.zeros(D.shape[0]), v, rho)
    _, out, events = vertical_party.party_step(cfg, state, inbox, rng=np.random.default_rng(0))
    return out.share, events[0].sensitivity


def _unit_rows(rng, n, d):
    D = rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0, size=d)
    return D / np.linalg.norm(D, axis=1, keepdims=True)


def _A(D, lam_sum, rho):
    H = lam_sum * np.eye(D.shape[1]) + rho * D.T @ D
    return D @ np.linalg.solve(H, D.T)


SETTINGS = [(0.05, 3.0), (20.0, 0.3), (0.05, 0.1), (1.0, 1.0), (200.0, 5.0)]


def _settings(default):
    """Every (λ_sum, ρ) setting, in the slow suite: each search takes 10–15 CPU-seconds, and the default suite
    keeps the bound's closed-form and clipping checks below (``test_whole_block_bound_and_clip_is_what_makes_it_hold``);
    ``default`` is the regime listed first."""
    first = [s for s in SETTINGS if s == default]
    return [pytest.param(*s, marks=pytest.mark.slow) for s in first + [s for s in SETTINGS if s != default]]


@pytest.mark.parametrize("lam_sum, rho", _settings((0.05, 3.0)))
def test_column_relation_bound_holds_against_worst_case_neighbours(lam_sum, rho):
    rng = np.random.default_rng(int(lam_sum * 100 + rho * 10))
    V = 3.0
    worst = 0.0
    for trial in range(2):
        D = _unit_rows(rng, N, D_COLS)
        bound = ridge_share_sensitivity(relation="feature_column", V=V, lam_sum=lam_sum, rho=rho)
        A = _A(D, lam_sum, rho)

        def gap(delta, j):
            delta = delta / max(np.linalg.norm(delta), 1e-12)  # ‖δ‖ = 1: [Hu, Definition 2]
            D2 = D.copy()
            D2[:, j] += delta
            return np.linalg.norm(_A(D2, lam_sum, rho) - A, 2) * V  # worst v for this δ: top singular vector

        for j in range(D_COLS):
            cands = [rng.normal(size=N) for _ in range(3)] + [D[:, j], -D[:, j], np.linalg.svd(D)[0][:, 0]]
            for c in cands:
                res = minimize(lambda z: -gap(z, j), c, method="Nelder-Mead", options={"maxiter": 400})
                delta = res.x / np.linalg.norm(res.x)
                D2 = D.copy()
                D2[:, j] += delta
                # the realised gap through party_step, with the worst v (its clip included)
                _, _, Vt = np.linalg.svd(_A(D2, lam_sum, rho) - A)
                for v in (Vt[0] * V, -Vt[0] * V, Vt[0] * 10 * V):  # the last is clipped back to V by the party
                    m1, C = _message(D, v, relation="feature_column", V=V, V_inf=None, lam_sum=lam_sum, rho=rho)
                    m2, _ = _message(D2, v, relation="feature_column", V=V, V_inf=None, lam_sum=lam_sum, rho=rho)
                    assert C == pytest.approx(bound)  # ‖v‖ = V after the clip
                    realised = np.linalg.norm(m1 - m2)
                    assert realised <= bound * (1 + 1e-9), (realised, bound)
                    worst = max(worst, realised / bound)
    assert worst > 0.05  # the search found non-trivial neighbours (the check is not vacuous)


@pytest.mark.parametrize("lam_sum, rho", _settings((20.0, 0.3)))
def test_record_relation_bound_holds_against_worst_case_neighbours(lam_sum, rho):
    rng = np.random.default_rng(int(lam_sum * 7 + rho * 3) + 1)
    V, V_inf = 3.0, 1.0
    worst = 0.0
    for trial in range(3):
        D = _unit_rows(rng, N, D_COLS)
        bound = ridge_share_sensitivity(relation="record", V=V, V_inf=V_inf, lam_sum=lam_sum, rho=rho)
        i = int(rng.integers(N))

        def realised(params):
            row = params[:D_COLS] / max(np.linalg.norm(params[:D_COLS]), 1e-12)  # unit-norm replacement row
            v = clip_share_input(params[D_COLS:], V, V_inf)
            D2 = D.copy()
            D2[i] = row
            m1, C1 = _message(D, v, relation="record", V=V, V_inf=V_inf, lam_sum=lam_sum, rho=rho)
            m2, C2 = _message(D2, v, relation="record", V=V, V_inf=V_inf, lam_sum=lam_sum, rho=rho)
            assert C1 == C2 <= bound * (1 + 1e-12)  # calibrated from what was received: a function of v only
            return np.linalg.norm(m1 - m2) / C1  # realised gap in units of the calibrated sensitivity

        starts = [np.r_[-D[i], rng.normal(size=N)], np.r_[rng.normal(size=D_COLS), V_inf * np.sign(rng.normal(size=N))],
                  np.r_[-D[i], V_inf * np.eye(N)[i] + 0.1 * rng.normal(size=N)]]
        for x0 in starts:
            res = minimize(lambda p: -realised(p), x0, method="Powell", options={"maxiter": 3000, "xtol": 1e-4})
            r = realised(res.x)
            assert r <= 1 + 1e-9, r
            worst = max(worst, r)
    assert worst > 0.05


def test_whole_block_bound_and_clip_is_what_makes_it_hold():
    """‖A(D) − A(D')‖ ≤ 1/ρ for any two blocks; without the clip on v the released gap is unbounded."""
    rng = np.random.default_rng(5)
    lam_sum, rho, V = 0.5, 0.7, 2.0
    for _ in range(50):
        D, D2 = _unit_rows(rng, N, D_COLS), _unit_rows(rng, N, D_COLS) * rng.uniform(0, 10)
        assert np.linalg.norm(_A(D, lam_sum, rho) - _A(D2, lam_sum, rho), 2) <= 1 / rho + 1e-12
    # planted bug: a v the party did not clip. Realised gap exceeds the bound -> the clip is necessary.
    D = _unit_rows(rng, N, D_COLS)
    D2 = D.copy()
    D2[:, 0] += np.linalg.svd(D)[0][:, 0]
    _, _, Vt = np.linalg.svd(_A(D2, lam_sum, rho) - _A(D, lam_sum, rho))
    v = 100 * V * Vt[0]
    bound = ridge_share_sensitivity(relation="feature_column", V=V, lam_sum=lam_sum, rho=rho)
    unclipped = np.linalg.norm((_A(D2, lam_sum, rho) - _A(D, lam_sum, rho)) @ v)
    assert unclipped > bound
    m1, _ = _message(D, v, relation="feature_column", V=V, V_inf=None, lam_sum=lam_sum, rho=rho)
    m2, _ = _message(D2, v, relation="feature_column", V=V, V_inf=None, lam_sum=lam_sum, rho=rho)
    assert np.linalg.norm(m1 - m2) <= bound


def test_party_clips_rows_it_holds():
    rng = np.random.default_rng(1)
    D = rng.normal(size=(10, 3)) * 5
    cfg, _ = _party(D, relation="record", V=1.0, V_inf=1.0, lam_sum=1.0)
    assert np.all(np.linalg.norm(np.asarray(cfg.D.todense() if hasattr(cfg.D, "todense") else cfg.D), axis=1) <= 1 + 1e-12)


def test_isotropic_noise_moments():
    """Released noise is N(0, σ² I_N): mean and variance within 5 standard errors (false-failure rate < 1e-6)."""
    rng = np.random.default_rng(2)
    D = _unit_rows(rng, N, D_COLS)
    cfg, state = _party(D, relation="feature_column", V=1.0, V_inf=None, lam_sum=1.0, noise=2.0)
    shares, _ = vertical_party.release(cfg, np.zeros(N), 1.0, 1, rng=rng, size=20000)
    k = shares.size
    assert abs(shares.mean()) <= 5 * 2.0 / np.sqrt(k)
    assert abs(shares.var() - 4.0) <= 5 * 4.0 * np.sqrt(2.0 / k)
    # isotropic: the part outside range(D) carries (N - rank)/N of the variance
    Q, _ = np.linalg.qr(D)
    outside = shares - (shares @ Q) @ Q.T
    assert np.mean(outside ** 2) * N / (N - D_COLS) == pytest.approx(4.0, rel=0.02)


def test_default_private_fit_shares_are_not_confined_to_the_data_range(a9a_small_normalized):
    """Issue 10: every share of a default private fit has ≥ 10% of its norm outside range(D_m)
    (the published mechanism: ~0%, its support depends on the data)."""
    from dpadmm import VerticalLogisticRegression

    B, y, _, _ = a9a_small_normalized
    bases = []
    for D in B:
        U, s, _ = np.linalg.svd(D, full_matrices=False)
        bases.append(U[:, s > 1e-10 * s.max()])
    for mechanism, check in (("gaussian", lambda f: f >= 0.10), ("paper", lambda f: f < 1e-8)):
        shares = []
        tr = lambda r, s, rcv, msg, kind: shares.append((s, msg.share)) if kind == "protocol" and s != "hub" else None  # noqa: E731
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            VerticalLogisticRegression(epsilon=1.0, max_iter=10, mechanism=mechanism).fit(B, y, transcript=tr)
        assert len(shares) == 20
        nonzero = 0
        for name, share in shares:
            if mechanism == "gaussian" and not np.any(share):
                continue  # the answer to the all-zero first inbox is exactly 0 for every D: no data, no noise needed
            nonzero += 1
            U = bases[int(name[-1]) - 1]
            outside = share - U @ (U.T @ share)
            assert check(np.linalg.norm(outside) / np.linalg.norm(share)), (mechanism, name)
        assert nonzero >= 18
