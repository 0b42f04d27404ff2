"""M-ADMM over a graph with penalty perturbation [Zhang]: algorithm, privacy bound, estimator."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit

from dpadmm import ConsensusLogisticRegression
from dpadmm.algorithms.consensus import (messages as consensus_messages, node as consensus_node,
                                         schedules as consensus_schedules, solver as consensus_solver)
from dpadmm.exceptions import InvalidParameterError, PrivacyPreconditionError


def _toy(n_nodes=4, per_node=60, d=5, seed=0):
    """Per-node data with ||x|| <= 1 and a linear signal."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    Xs, ys = [], []
    for _ in range(n_nodes):
        X = rng.normal(size=(per_node, d))
        X /= np.maximum(np.linalg.norm(X, axis=1), 1.0)[:, None] * 1.2
        ys.append(np.where(X @ w + 0.3 * rng.normal(size=per_node) > 0, 1.0, -1.0))
        Xs.append(X)
    return Xs, ys


def _fit(Xs, ys, **kw):
    kw.setdefault("max_iter", 60)
    kw.setdefault("random_state", 0)
    return ConsensusLogisticRegression(**kw).fit(Xs, ys)


@pytest.mark.parametrize("topology", ["ring", "complete", "line", "star"])
def test_nonprivate_matches_centralised_optimum(topology):
    Xs, ys = _toy()
    m = _fit(Xs, ys, topology=topology, C=5.0, reg_weight=0.5, max_iter=200)
    f_star = consensus_solver.solve_centralised(Xs, ys, C=5.0, reg_weight=0.5)
    # independent check of the centralised optimum with scipy (same objective, [Zhang, eq. 1])
    def obj(f):
        return sum(5.0 / len(y) * np.logaddexp(0, -y * (X @ f)).sum() for X, y in zip(Xs, ys)) + 0.25 * f @ f
    ref = minimize(obj, np.zeros(5), method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(f_star, ref, atol=1e-5)
    assert np.max(np.abs(m.coefs_ - f_star)) < 1e-5
    L_star = np.mean([np.logaddexp(0, -y * (X @ f_star)).mean() for X, y in zip(Xs, ys)])
    assert abs(m.history_["train_loss"][-1] - L_star) < 1e-6


def test_batched_equals_per_node_parties():
    Xs, ys = _toy(n_nodes=5)
    kw = dict(topology="ring", eta=[0.55, 0.65, 0.6, 0.55, 0.6], eta_growth=[1.01, 1.03, 1.1, 1.2, 1.02], max_iter=25)
    a = _fit(Xs, ys, batch=True, **kw)
    b = _fit(Xs, ys, batch=False, **kw)
    np.testing.assert_allclose(a.coefs_, b.coefs_, atol=1e-10)
    np.testing.assert_allclose(a.history_["train_loss"], b.history_["train_loss"], atol=1e-12)


def _conventional_admm(Xs, ys, A, *, C, reg_weight, eta, T):
    """Textbook decentralised consensus ADMM (Forero et al. 2010, [Zhang, eq. 8–9]) with one penalty η,
    written independently: a Python loop over nodes, each subproblem solved by scipy BFGS."""
    N, d = len(Xs), Xs[0].shape[1]
    F = np.zeros((N, d))
    lam = np.zeros((N, d))
    nbrs = [np.flatnonzero(A[i]) for i in range(N)]
    for _ in range(T):
        new = np.zeros_like(F)
        for i in range(N):
            X, y, B = Xs[i], ys[i], len(ys[i])

            def fun(f, i=i, X=X, y=y, B=B):
                val = C / B * np.logaddexp(0, -y * (X @ f)).sum() + reg_weight / N * 0.5 * f @ f + 2 * lam[i] @ f
                val += eta * sum(np.sum((f - 0.5 * (F[i] + F[j])) ** 2) for j in nbrs[i])
                g = C / B * X.T @ (-y * expit(-y * (X @ f))) + reg_weight / N * f + 2 * lam[i]
                g = g + 2 * eta * sum(f - 0.5 * (F[i] + F[j]) for j in nbrs[i])
                return val, g

            new[i] = minimize(fun, F[i], jac=True, method="BFGS", options={"gtol": 1e-11}).x
        F = new
        for i in range(N):
            lam[i] = lam[i] + eta / 2 * sum(F[i] - F[j] for j in nbrs[i])
    return F


def test_eta_equal_theta_is_conventional_admm():
    Xs, ys = _toy(n_nodes=4, per_node=30, d=4)
    G = nx.cycle_graph(4)
    m = _fit(Xs, ys, topology=G, C=3.0, reg_weight=0.4, theta=0.7, eta=None, max_iter=12)
    F = _conventional_admm(Xs, ys, nx.to_numpy_array(G), C=3.0, reg_weight=0.4, eta=0.7, T=12)
    np.testing.assert_allclose(m.coefs_, F, atol=1e-6)
    # and explicitly passing eta = theta is the same run
    m2 = _fit(Xs, ys, topology=G, C=3.0, reg_weight=0.4, theta=0.7, eta=0.7, max_iter=12)
    np.testing.assert_allclose(m.coefs_, m2.coefs_, atol=1e-12)


def test_pp_with_infinite_alpha_is_m_admm():
    Xs, ys = _toy()
    kw = dict(topology="ring", eta=0.6, eta_growth=1.05, max_iter=20, C=5.0)
    plain = _fit(Xs, ys, **kw)
    inf = _fit(Xs, ys, perturbation="pp", alpha=math.inf, **kw)
    big = _fit(Xs, ys, perturbation="pp", alpha=1e12, **kw)
    noisy = _fit(Xs, ys, perturbation="pp", alpha=5.0, **kw)
    np.testing.assert_array_equal(plain.coefs_, inf.coefs_)
    np.testing.assert_allclose(plain.coefs_, big.coefs_, atol=1e-8)
    assert np.max(np.abs(plain.coefs_ - noisy.coefs_)) > 1e-2  # the noise does act
    assert inf.privacy_.epsilon == math.inf  # α = ∞: no noise, no finite bound


def test_privacy_bound_against_hand_computation():
    # line graph 0-1-2: degrees V = (1, 2, 1); node sizes B = (20, 30, 40)
    rng = np.random.default_rng(3)
    Xs = [rng.uniform(0, 0.5, size=(b, 3)) for b in (20, 30, 40)]
    ys = [np.where(rng.random(b) < 0.5, 1.0, -1.0) for b in (20, 30, 40)]
    m = _fit(Xs, ys, topology="line", C=2.0, reg_weight=1.0, theta=0.5, eta=[0.5, 0.6, 0.7], eta_growth=1.1,
             perturbation="pp", alpha=[3.0, 4.0, 5.0], alpha_growth=1.2, max_iter=3)
    c = 1.4 * 0.25
    # P_i(t) = Σ_r C(1.4 c1 + α_i(r)) / (η_i(r) V_i B_i), η_i(r) = η_i(1)·1.1^(r−1), α_i(r) = α_i(1)·1.2^(r−1)
    p0 = [2.0 * (c + 3.0) / (0.5 * 1 * 20), 2.0 * (c + 3.6) / (0.55 * 1 * 20), 2.0 * (c + 4.32) / (0.605 * 1 * 20)]
    p1 = [2.0 * (c + 4.0) / (0.6 * 2 * 30), 2.0 * (c + 4.8) / (0.66 * 2 * 30), 2.0 * (c + 5.76) / (0.726 * 2 * 30)]
    p2 = [2.0 * (c + 5.0) / (0.7 * 1 * 40), 2.0 * (c + 6.0) / (0.77 * 1 * 40), 2.0 * (c + 7.2) / (0.847 * 1 * 40)]
    expected = np.max(np.cumsum([p0, p1, p2], axis=1), axis=0)
    np.testing.assert_allclose(m.history_["privacy_bound"], expected, rtol=1e-12)
    # the total adds each node's fallback releases (DP base rate + comparison, 0.5 by default): basic composition
    assert m.privacy_.epsilon == pytest.approx(expected[-1] + 0.5, rel=1e-12)
    assert m.privacy_.paper_bound["epsilon"] == pytest.approx(expected[-1], rel=1e-12)
    assert sorted(m.privacy_.per_party.values()) == pytest.approx(sorted(np.cumsum([p0, p1, p2], axis=1)[:, -1] + 0.5))
    assert m.privacy_.delta == 0.0 and m.privacy_.relation == "record_replace"
    assert m.privacy_.per_party["node0"] == pytest.approx(sum(p0) + 0.5, rel=1e-12)
    assert m.privacy_.paper_bound["worst_node"] == "node0"


def test_dvp_is_pp_with_eta_theta_and_pvp_has_no_bound():
    Xs, ys = _toy()
    dvp = _fit(Xs, ys, perturbation="dvp", alpha=4.0, theta=0.6, max_iter=5)
    pp = _fit(Xs, ys, perturbation="pp", alpha=4.0, theta=0.6, eta=0.6, max_iter=5)
    np.testing.assert_array_equal(dvp.coefs_, pp.coefs_)
    assert dvp.privacy_.epsilon == pytest.approx(pp.privacy_.epsilon)
    pvp = _fit(Xs, ys, perturbation="pvp", alpha=4.0, max_iter=5)
    assert pvp.privacy_.epsilon == math.inf and math.isinf(pvp.history_["privacy_bound"][-1])
    with pytest.raises(InvalidParameterError, match="dvp fixes eta"):
        _fit(Xs, ys, perturbation="dvp", alpha=4.0, eta=0.7)


def test_theta_condition_raises():
    Xs, ys = _toy(per_node=10)
    # 2c1 = 0.5 must be < (B_i/C)(ρ/N + 2θV_i) = (10/100)(0.25/4 + 2·0.05·2) ≈ 0.026
    with pytest.raises(PrivacyPreconditionError, match="Alg. 1"):
        _fit(Xs, ys, perturbation="pp", alpha=3.0, C=100.0, reg_weight=0.25, theta=0.05, eta=0.5)
    # the non-private run with the same numbers is allowed
    _fit(Xs, ys, C=100.0, reg_weight=0.25, theta=0.05, eta=0.5, max_iter=2)


def test_disconnected_graph_and_other_bad_input():
    Xs, ys = _toy()
    with pytest.raises(InvalidParameterError, match="connected"):
        _fit(Xs, ys, topology=nx.Graph([(0, 1), (2, 3)]))
    with pytest.raises(InvalidParameterError, match="alpha"):
        _fit(Xs, ys, perturbation="pp")
    with pytest.raises(InvalidParameterError, match="eta"):
        _fit(Xs, ys, eta=-1.0)
    with pytest.raises(InvalidParameterError, match="reg_weight"):
        _fit(Xs, ys, reg_weight=0.0)


def test_norm_condition_enforced_or_normalised():
    Xs, ys = _toy()
    big = [3.0 * X for X in Xs]
    with pytest.raises(PrivacyPreconditionError, match=r"\|\|x\|\|_2 <= 1"):
        _fit(big, ys, perturbation="pp", alpha=3.0)
    m = _fit(big, ys, perturbation="pp", alpha=3.0, normalize=True, max_iter=3)
    assert m.privacy_.assumptions[0]["status"] == "normalised"


def test_convergence_condition_warns():
    Xs, ys = _toy()
    with pytest.warns(consensus_schedules.ConvergenceConditionWarning, match="decreases"):
        _fit(Xs, ys, eta=1.0, eta_growth=0.9, max_iter=3)
    with pytest.warns(consensus_schedules.ConvergenceConditionWarning, match="< theta"):
        _fit(Xs, ys, eta=0.2, theta=0.5, max_iter=3)


def test_outbox_is_only_the_model():
    Xs, ys = _toy(n_nodes=3)
    cfg, st = consensus_node.make_block(["a", "b", "c"], Xs, ys, degree=[2, 2, 2], C=1.0, reg=0.1, eta=np.full((3, 2), 0.5),
                            theta=np.full((3, 2), 0.5), alpha=np.full((3, 2), 2.0), perturbation="pp")
    st2, out, events = consensus_node.block_step(cfg, st, consensus_messages.NeighbourMessage(0, np.zeros((3, 5))), rng=np.random.default_rng(0))
    assert out._fields == ("f",) and out.f.shape == (3, 5)
    assert [e.party for e in events] == ["a", "b", "c"] and all(e.round == 1 for e in events)
    assert st.f.sum() == 0.0  # inputs not mutated


def test_local_newton_solves_the_subproblem():
    Xs, ys = _toy(n_nodes=3, per_node=40)
    X = consensus_solver._pad(Xs)
    y = consensus_solver._pad(ys)
    w = consensus_solver._pad([np.full(40, 2.0 / 40)] * 3)
    rng = np.random.default_rng(1)
    b = rng.normal(size=(3, 5)) * 5
    r = np.array([0.5, 1.0, 3.0])
    f, _, _ = consensus_solver.local_newton(X, y, w, r, b, np.zeros((3, 5)), tol=1e-12)
    for k in range(3):
        def fun(v, k=k):
            return (w[k] * np.logaddexp(0, -y[k] * (X[k] @ v))).sum() + 0.5 * r[k] * v @ v + b[k] @ v
        ref = minimize(fun, np.zeros(5), method="BFGS", options={"gtol": 1e-10}).x
        np.testing.assert_allclose(f[k], ref, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["ring", "complete"])
def test_adult_five_nodes_reaches_the_centralised_optimum(topology):
    """Acceptance: non-private, 5 nodes on Adult, final L(T) within 1e-3 of the centralised optimum's L."""
    from dpadmm.data import load_adult
    from dpadmm.workflows.consensus import PAPER_C, PAPER_REG_WEIGHT, _node_data

    X, y = load_adult()
    Xs, ys = _node_data(X, y, 5, "even", 10.0, 0)
    m = ConsensusLogisticRegression(C=PAPER_C, reg_weight=PAPER_REG_WEIGHT, topology=topology, max_iter=100,
                                    random_state=0).fit(Xs, ys)
    f_star = consensus_solver.solve_centralised(Xs, ys, C=PAPER_C, reg_weight=PAPER_REG_WEIGHT)
    # an independent solver on the pooled data (scikit-learn, per-sample weights C/B_i, ρ = 1/C_sklearn)
    from sklearn.linear_model import LogisticRegression

    sw = np.concatenate([np.full(len(v), PAPER_C / len(v)) for v in ys])
    sk = LogisticRegression(C=1.0 / PAPER_REG_WEIGHT, fit_intercept=False, tol=1e-10, max_iter=10000)
    sk.fit(np.concatenate(Xs), np.concatenate(ys), sample_weight=sw)
    np.testing.assert_allclose(sk.coef_.ravel(), f_star, atol=1e-4)
    L_star = np.mean([np.logaddexp(0, -v * (x @ f_star)).mean() for x, v in zip(Xs, ys)])
    assert abs(m.history_["train_loss"][-1] - L_star) < 1e-3
    print(topology, "L(T) =", m.history_["train_loss"][-1], "L* =", L_star)
