"""Each node's choice of its model by cross-validation on its own rows (``algorithms/gossip/choice.py``; issue 38,
items 3 and 4): its recalibrated consensus, its own model or its own base rate — local, nothing released."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from dpadmm.algorithms.gossip import choice


def _ll(m, y):
    return float(np.mean(np.logaddexp(0.0, -y * m)))


def _node(n, sign, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [1.0, 50.0, 0.01] + [0.0, 1000.0, 5.0]  # raw units of very different scales
    z = sign * 1.5 * X[:, 0] + 0.02 * (X[:, 1] - 1000.0)
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-z)), 1.0, -1.0)
    Xt = np.column_stack([np.clip((X - X.mean(0)) / (3 * X.std(0)), -1, 1), np.ones(n)])  # a stand-in prepared map
    return X, Xt, y


def test_fit_own_is_ridge_logistic_regression_with_a_free_intercept():
    X, _, y = _node(400, 1.0, 0)
    Z, mu, sd = choice.standardised(X)
    w = choice.fit_own(Z, y, 2.0)
    sk = LogisticRegression(C=0.5, tol=1e-12, max_iter=10_000).fit(Z[:, :-1], y)  # sklearn: ½‖w‖² + C Σ loss
    np.testing.assert_allclose(w[:-1], sk.coef_[0], rtol=1e-5, atol=1e-7)
    assert w[-1] == pytest.approx(sk.intercept_[0], rel=1e-5, abs=1e-7)
    raw = choice.to_raw_units(w, mu, sd)  # the same margins on the raw rows
    np.testing.assert_allclose(X @ raw[:-1] + raw[-1], Z @ w, rtol=1e-9, atol=1e-9)


def test_a_node_whose_rows_disagree_with_the_consensus_keeps_its_own_model():
    """The consensus says +x₀, this node's rows say −x₀: its own model, and it predicts its held-out rows better."""
    X, Xt, y = _node(1200, -1.0, 1)
    w = np.array([4.0, 0.0, 0.0, 0.0])  # a consensus that ranks this node's rows backwards on x₀
    tr, te = slice(0, 800), slice(800, None)
    c = choice.choose(Xt[tr], y[tr], w, X_raw=X[tr])
    assert c.choice == "own" and c.space == "raw" and c.cv[1] < c.cv[0] and "beats" in c.reason
    recal, _, _ = choice.recalibrate(Xt[tr], y[tr], w)
    assert _ll(X[te] @ c.model[:-1] + c.model[-1], y[te]) < _ll(Xt[te] @ recal, y[te])


def test_a_good_consensus_is_kept_and_a_node_without_signal_gets_no_worse_than_its_base_rate():
    X, Xt, y = _node(300, 1.0, 2)
    truth = np.array([1.5 * X[:, 0].std() * 3, 0.02 * X[:, 1].std() * 3, 0.0, 0.0])  # the consensus is right
    assert choice.choose(Xt, y, truth, X_raw=X).choice == "consensus"
    rng = np.random.default_rng(3)
    noise_y = np.where(rng.random(300) < 0.3, 1.0, -1.0)  # labels unrelated to the rows
    bad = choice.choose(Xt, noise_y, np.array([6.0, -6.0, 6.0, 0.0]), X_raw=X)  # a confident, useless model
    assert bad.choice in ("base-rate", "own")
    p = (np.sum(noise_y > 0) + 1) / (len(noise_y) + 2)
    assert min(bad.cv) <= bad.cv[2] and bad.cv[2] == pytest.approx(
        _ll(np.full(300, math.log(p / (1 - p))), noise_y), abs=0.02)  # the base rate's CV loss ≈ its own loss


def test_a_node_with_too_few_rows_of_a_class_is_not_judged():
    X, Xt, y = _node(50, 1.0, 4)
    y = -np.ones(50)
    y[0] = 1.0
    c = choice.choose(Xt, y, np.array([1.0, 0.0, 0.0, 0.0]), X_raw=X)
    assert c.choice == "consensus" and np.all(np.isnan(c.cv)) and "not judged" in c.reason


def _hessian(Z, y, w, lam):
    p = 1.0 / (1.0 + np.exp(-(Z @ w)))
    reg = np.full(Z.shape[1], lam)
    reg[-1] = 1e-8
    return (Z * (p * (1 - p))[:, None]).T @ Z + np.diag(reg), Z.T @ (p - (y > 0)) + reg * w


def _objective(Z, y, w, lam):
    return float(np.logaddexp(0.0, -y * (Z @ w)).sum() + 0.5 * lam * w[:-1] @ w[:-1])


@pytest.mark.parametrize("n, d, seed", [(300, 3, 5), (1500, 12, 6), (4000, 30, 7)])
def test_the_shared_work_cross_validation_finds_fit_owns_minimisers_and_the_same_choice(n, d, seed):
    """``_own_cv`` (folds sharing work, chord steps) against :func:`fit_own` (exact Newton from zero) on every fold
    and λ. Both stop at a Newton decrement gᵀH⁻¹g/2 ≤ 1e-12·F, so each lies within √(2e-12·F) of the minimiser in
    the Hessian's norm (to second order; ×1.5 for the quadratic model's error): their models within 2 × that, each
    fold's held-out loss within ‖∇ held-out‖_{H⁻¹} × that. The choice and its CV losses are choose's."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) * rng.uniform(0.1, 10.0, d)
    z = X @ rng.normal(size=d) / (np.sqrt(d) * X.std(0).mean())
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-z)), 1.0, -1.0)
    Z, _, _ = choice.standardised(X)
    fold = choice._folds(y, choice.FOLDS, 0)
    fast = choice._own_cv(Z, y, fold, choice.FOLDS)
    old = []  # fit_own's summed held-out losses per λ: the choice as the exact solver makes it
    for (held, w_all), lam in zip(fast, choice.LAMBDAS):
        ref = choice.fit_own(Z, y, lam)
        H, _ = _hessian(Z, y, ref, lam)
        gap = 2 * 1.5 * math.sqrt(2e-12 * _objective(Z, y, ref, lam))
        assert math.sqrt((w_all - ref) @ H @ (w_all - ref)) <= gap
        slack, held_ref = 0.0, 0.0
        for j in range(choice.FOLDS):
            tr, te = fold != j, fold == j
            wj = choice.fit_own(Z[tr], y[tr], lam)
            Hj, _ = _hessian(Z[tr], y[tr], wj, lam)
            held_ref += float(np.logaddexp(0.0, -y[te] * (Z[te] @ wj)).sum())
            p = 1.0 / (1.0 + np.exp(-(Z[te] @ wj)))
            g_te = Z[te].T @ (p - (y[te] > 0))  # the held-out loss's gradient at fold j's model
            slack += math.sqrt(g_te @ np.linalg.solve(Hj, g_te)) * 2 * 1.5 * math.sqrt(
                2e-12 * _objective(Z[tr], y[tr], wj, lam))
        assert abs(held - held_ref) <= slack
        old.append(held_ref / n)
    Xt = np.column_stack([np.clip((X - X.mean(0)) / (3 * X.std(0)), -1, 1), np.ones(n)])
    w = rng.normal(size=d + 1)
    c = choice.choose(Xt, y, w, X_raw=X)
    assert c.cv[1] == pytest.approx(min(h for h, _ in fast) / n, rel=1e-12)
    cv_old = [c.cv[0], min(old), c.cv[2]]  # consensus and base rate do not involve the solver
    pick = int(np.argmin(cv_old))
    assert c.choice == choice.CANDIDATES[0 if cv_old[pick] >= cv_old[0] else pick]
