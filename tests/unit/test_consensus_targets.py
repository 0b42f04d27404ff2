"""Consensus beyond yes/no (issue 41): gossip regression (squared, Huber) and multinomial classes.

- zero noise equals non-private: on a complete graph with β = 0 the nodes' mean follows gradient descent on the
  pooled objective exactly, so after T rounds it is within ``(1 − ημ)^T ‖w*‖`` of the ridge solution w* (μ the
  smallest eigenvalue of the objective's Hessian, η = 1/L the plan's step) — checked against scikit-learn's Ridge
  on the prepared rows, with the prediction clip inactive along the whole path (checked);
- the sensitivities hold on worst-case neighbours (the per-example weight at its bound) and never exceed Δ on
  random neighbours at random points of the public box;
- ε recomputes from the noise drawn: the standard deviation of the noise the release adds, estimated from the
  draws, put through the accountant with Δ from the formula, brackets the requested ε;
- refusals, each for its reason.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from sklearn.linear_model import Ridge

from dpadmm import ConsensusLinearRegression, ConsensusMultinomialClassifier
from dpadmm.algorithms.gossip import driver
from dpadmm.algorithms.gossip import mechanism as mech
from dpadmm.algorithms.gossip import targets as tg
from dpadmm.algorithms.gossip.params import GossipParams, plan
from dpadmm.data.graphs import Nodes
from dpadmm.exceptions import InvalidDataError, InvalidParameterError
from dpadmm.privacy.accountants import gaussian_epsilon

Z = 5.0  # standard errors of a two-sided check (false failure ~6e-7 for a fresh seed; the tests are seeded)


def _regression(n=3000, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, d))
    y = 3.0 + X @ np.array([1.0, -2.0, 0.5])[:d] + 0.3 * rng.normal(size=n)
    return X, y


def test_zero_noise_squared_loss_is_pooled_ridge_within_the_gd_contraction():
    X, y = _regression()
    n, d = X.shape
    N, T, lam = 4, 300, 1e-3
    lo_y, hi_y = float(y.min() - 3.0), float(y.max() + 3.0)  # fitted values well inside the label range
    params = GossipParams(rounds=T, bounds=(-np.ones(d), np.ones(d)), target_bounds=(lo_y, hi_y), loss="squared",
                          momentum=0.0, tail=0.0, ridge=lam, monitor=False)
    res = driver.fit(params, Nodes(np.array_split(X, N), np.array_split(y, N), nx.complete_graph(N)))
    Xt = mech.prepare(X, -np.ones(d), np.ones(d), res.row_clip)  # R = √d: no row is clipped
    u = tg.scale_labels(y, lo_y, hi_y)
    w_star = Ridge(alpha=n * lam, fit_intercept=False, tol=1e-14, solver="cholesky").fit(Xt, u).coef_
    assert np.abs(Xt @ res.path.T).max() < tg.PREDICTION_CLIP  # the clip never acts: plain squared-loss GD
    H = Xt.T @ Xt / n + lam * np.eye(d + 1)
    eta = plan(params, n, d, N).step
    rate = 1.0 - eta * float(np.linalg.eigvalsh(H)[0])
    tol = rate**T * float(np.linalg.norm(w_star)) + 1e-10
    assert float(np.linalg.norm(res.F.mean(axis=0) - w_star)) <= tol, tol
    # and the estimator's raw-unit model predicts what the ridge solution does (the label map inverted)
    m = ConsensusLinearRegression(rounds=T, bounds=(-np.ones(d), np.ones(d)), target_bounds=(lo_y, hi_y),
                                  ridge=lam, topology="complete", n_nodes=N, random_state=0).fit(X, y)
    ridge_pred = tg.unscale(Xt @ w_star, lo_y, hi_y)
    # heavy ball (β = 0.9) on this quadratic: every direction has ηλ_k in [(1 − √β)², (1 + √β)²], rate √β, with a
    # linear factor from the non-normal iteration: error ≤ 2(T + 1) β^{T/2} ‖w*‖ in the model, times ‖x̃‖ ≤ 2 in a
    # prediction and (hi − lo)/2 in the label's units
    hb = 2.0 * (T + 1) * 0.9 ** (T / 2) * float(np.linalg.norm(w_star)) * 2.0 * (hi_y - lo_y) / 2.0 + 1e-9
    assert np.max(np.abs(m.predict(X) - ridge_pred)) <= hb
    assert np.allclose(X @ m.coef_ + m.intercept_, m.predict(X), atol=1e-9)


@pytest.mark.parametrize("loss,weight", [("squared", 2.0), ("huber", 0.7), ("multinomial", math.sqrt(2.0))])
def test_sensitivity_holds_on_worst_case_and_random_neighbours(loss, weight):
    R, d, K = 2.0, 4, 4
    target = tg.Target(loss, K if loss == "multinomial" else 2, 0.7)
    assert target.sensitivity(R) == pytest.approx(2.0 * weight * math.sqrt(R * R + 1.0))
    rng = np.random.default_rng(3)
    lo, hi = -np.ones(d), np.ones(d)
    X = rng.uniform(-3, 3, size=(50, d))
    worst = 0.0
    for _ in range(200):
        w = rng.uniform(-1, 1, size=target.outputs * (d + 1)) * 10 ** rng.uniform(0, 6)  # anywhere in the box
        Xb = X.copy()
        Xb[0] = rng.uniform(-1e3, 1e3, size=d)
        if loss == "multinomial":
            y, yb = rng.integers(0, K, 50), None
            yb = y.copy()
            yb[0] = (y[0] + 1) % K
        else:
            y = rng.uniform(-2, 2, size=50)  # scaled labels must be in [−1, 1]: scale_labels clips them
            y = tg.scale_labels(y, -1.0, 1.0)
            yb = y.copy()
            yb[0] = -y[0]
        G = tg.target_sum(mech.prepare(X, lo, hi, R), y, w, target)
        Gb = tg.target_sum(mech.prepare(Xb, lo, hi, R), yb, w, target)
        worst = max(worst, float(np.linalg.norm(G - Gb)))
    assert worst <= target.sensitivity(R) * (1 + 1e-12)
    assert worst >= 0.3 * target.sensitivity(R)  # the bound is not vacuous on these neighbours


def test_regression_weight_reaches_its_bound():
    """The worst case of the squared loss: a prediction clipped at +P against a label at −1 (and the neighbour's the
    reverse): |r| = P + 1 on both sides, opposite signs, on the same row of norm √(R² + 1)."""
    R = 3.0
    x = np.full((1, 9), 1.0)  # 9 columns at +1: ‖z‖ = 3 = R
    Xt = mech.prepare(x, -np.ones(9), np.ones(9), R)
    w = np.full(10, 1e6)
    t = tg.Target("squared")
    G = tg.regression_sums(Xt, np.array([-1.0]), w, t)
    Gb = tg.regression_sums(Xt, np.array([1.0]), -w, t)  # the same row, another point: |r| = 2 again, sign flipped
    assert np.linalg.norm(G) == pytest.approx(t.sensitivity(R) / 2)
    assert np.linalg.norm(G - Gb) == pytest.approx(t.sensitivity(R))


@pytest.mark.parametrize("loss", ["squared", "huber", "multinomial"])
def test_epsilon_recomputes_from_the_noise_drawn(loss):
    """σ̂ from the noise of 600 releases, Δ from the formula (not read from the events): the accountant's ε at
    σ̂(1 ± Z·se) brackets the requested ε = 1."""
    d, R, T = 5, math.sqrt(5), 20
    K = 3 if loss == "multinomial" else 2
    target = tg.Target(loss, K, 1.0)
    kw = dict(target_bounds=(0.0, 1.0)) if target.regression else {}
    params = GossipParams(epsilon=1.0, rounds=T, bounds=(-np.ones(d), np.ones(d)), loss=loss, classes=K, **kw)
    nm = plan(params, 5000, d, 5).noise_multiplier
    delta_formula = {"squared": 4.0, "huber": 2.0, "multinomial": 2.0 * math.sqrt(2.0)}[loss] * math.sqrt(R * R + 1)
    rng = np.random.default_rng(11)
    X = rng.uniform(-1, 1, size=(40, d))
    Xt = mech.prepare(X, -np.ones(d), np.ones(d), R)
    y = rng.integers(0, K, 40) if loss == "multinomial" else rng.uniform(-1, 1, 40)
    w = rng.normal(size=target.outputs * (d + 1))
    exact = tg.target_sum(Xt, y, w, target)
    noise = []
    for r in range(600):
        G, events = tg.target_release("node0", r + 1, Xt, y, R, w, nm, rng, target)
        assert len(events) == 1 and events[0].sensitivity == pytest.approx(delta_formula)
        noise.append(G - exact)
    noise = np.concatenate(noise)
    s_hat = float(np.sqrt(np.mean(noise**2)))
    se = s_hat / math.sqrt(2 * noise.size)
    eps_hi = gaussian_epsilon([(s_hat - Z * se) / delta_formula] * T, 1e-5)
    eps_lo = gaussian_epsilon([(s_hat + Z * se) / delta_formula] * T, 1e-5)
    assert eps_lo <= 1.0 <= eps_hi, (eps_lo, eps_hi)


def test_private_fit_report_prices_every_release():
    X, y = _regression(n=2000, d=3, seed=1)
    m = ConsensusLinearRegression(epsilon=1.0, n_nodes=4, random_state=0).fit(X, y)
    rep = m.privacy_
    assert rep.epsilon <= 1.0
    ledger = driver.fit(GossipParams(epsilon=1.0, loss="squared"), Nodes(np.array_split(X, 4), np.array_split(y, 4),
                                                                         nx.cycle_graph(4)), noise_seed=1).ledger
    per = ledger.by_party()
    K = plan(GossipParams(epsilon=1.0, loss="squared"), 2000, 3, 4)
    for evs in per.values():
        assert len(evs) == K.rounds + K.range_rounds
        grads = [e for e in evs if e.sensitivity == pytest.approx(4.0 * math.sqrt(K.row_clip**2 + 1))]
        assert len(grads) == K.rounds
        ranges = [e for e in evs if e.sensitivity == pytest.approx(math.sqrt(2 * (3 + 1)))]  # the label a column
        assert len(ranges) == K.range_rounds
        assert gaussian_epsilon([e.noise_multiplier for e in evs], 1e-5) <= 1.0
    assert "enforced by the node" in str(rep.assumptions)


def test_multinomial_zero_noise_fits_and_private_is_priced():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(1500, 3)) * [1.0, 10.0, 100.0] + [0.0, 50.0, 2000.0]
    y = np.digitize(X @ [1.0, 0.1, 0.01], np.quantile(X @ [1.0, 0.1, 0.01], [0.33, 0.66]))
    labels = np.array(["a", "b", "c"])[y]
    m = ConsensusMultinomialClassifier(rounds=200, random_state=0).fit(X, labels)
    assert list(m.classes_) == ["a", "b", "c"] and m.score(X, labels) > 0.85
    with pytest.raises(InvalidParameterError, match="give classes="):  # K is released: declared, not read off y
        ConsensusMultinomialClassifier(epsilon=2.0, random_state=0).fit(X, labels)
    mp = ConsensusMultinomialClassifier(epsilon=2.0, random_state=0, classes=["a", "b", "c"]).fit(X, labels)
    assert mp.privacy_.epsilon <= 2.0 and mp.coef_.shape == (3, 3)
    odd = labels.copy()
    odd[0] = "z"  # a label outside the declared classes: no class, the same K (a private fit refuses nothing about y)
    assert ConsensusMultinomialClassifier(epsilon=2.0, random_state=0, classes=["a", "b", "c"]).fit(
        X, odd).coef_.shape == (3, 3)
    with pytest.raises(InvalidDataError, match="outside classes="):  # non-private: said, with the fix
        ConsensusMultinomialClassifier(rounds=5, classes=["a", "b", "c"]).fit(X, odd)
    P = mp.predict_proba(X)
    assert P.shape == (1500, 3) and np.allclose(P.sum(axis=1), 1.0)


def test_refusals_name_their_reason():
    X, y = _regression(n=200)
    with pytest.raises(InvalidParameterError, match="loss"):
        ConsensusLinearRegression(loss="cubic").fit(X, y)
    with pytest.raises(InvalidParameterError, match="loss must be one of"):
        GossipParams(loss="poisson")
    ynan = y.copy()
    ynan[3] = np.nan
    with pytest.raises(InvalidDataError, match="NaN"):
        ConsensusLinearRegression().fit(X, ynan)
    with pytest.raises(InvalidDataError, match="1 class"):
        ConsensusMultinomialClassifier().fit(X, np.zeros(200))
    with pytest.raises(InvalidParameterError, match="target_bounds"):
        GossipParams(loss="squared", bounds=(-np.ones(3), np.ones(3)))
    with pytest.raises(InvalidParameterError, match="target_bounds"):
        GossipParams(loss="squared", target_bounds=(1.0, 0.0))
    with pytest.raises(InvalidParameterError, match="huber_delta"):
        GossipParams(loss="huber", huber_delta=0.0)
    with pytest.raises(InvalidParameterError, match="class indices"):
        tg.node_labels(np.array([0.0, 1.0, 3.0]), tg.Target("multinomial", 3))
