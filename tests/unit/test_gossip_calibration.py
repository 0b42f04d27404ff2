"""Each node's recalibration of the consensus model on its own rows (``algorithms/gossip/calibration.py``), the
noise-limited schedule's momentum and the starting intercept's clip (``schedule.py``, ``node.py``).

Before: no recalibration (a node used the overconfident consensus model: on small tables worse than the base
rate, up to 1.16 against 0.68), β = 0.9 in every regime, and the DP base rate's logit started the intercept even
when the count's noise was larger than the count (b_0 = −6.9 on AER::HMDA)."""

from __future__ import annotations

import json
import math

import networkx as nx
import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.base import clone

from dpadmm import ConsensusLogisticRegression
from dpadmm.algorithms.gossip import calibration as cal
from dpadmm.algorithms.gossip import mechanism as mech
from dpadmm.algorithms.gossip.node import NodeState, RangeCounts, node_model, setup_node
from dpadmm.algorithms.gossip.router import RouterConfig, init_router, router_step
from dpadmm.algorithms.gossip.schedule import NOISY_MOMENTUM, default_schedule
from dpadmm.backends import InProcessBackend, PartyOperator
from dpadmm.exceptions import InvalidParameterError
from dpadmm.algorithms.gossip import driver as gossip_driver
from dpadmm.algorithms.gossip.params import GossipParams
from dpadmm.data.graphs import Nodes
from dpadmm.privacy.policy import PartyPolicy


def _platt_loss(theta, s, t):
    m = theta[0] * s + theta[1]
    return float(np.sum(np.logaddexp(0.0, m) - t * m))


# ----------------------------------------------------------------------------- Platt scaling
def test_platt_is_the_minimum_of_its_loss():
    rng = np.random.default_rng(0)
    s = 3.0 * rng.standard_normal(500)
    y = np.where(rng.random(500) < 1 / (1 + np.exp(-(0.4 * s - 1.0))), 1.0, -1.0)
    a, b = cal.platt(s, y)
    t = cal.platt_targets(y)
    ref = minimize(_platt_loss, x0=[0.0, 0.0], args=(s, t), method="BFGS", options={"gtol": 1e-10})
    assert (a, b) == pytest.approx(tuple(ref.x), abs=1e-5)
    assert _platt_loss([a, b], s, t) <= ref.fun + 1e-9


def test_platt_recovers_the_slope_within_its_standard_error():
    """n = 20,000 rows from σ(0.3 s − 1): (â, b̂) within 4 standard errors (the inverse Fisher information)."""
    rng = np.random.default_rng(1)
    n, a0, b0 = 20_000, 0.3, -1.0
    s = 3.0 * rng.standard_normal(n)
    p = 1 / (1 + np.exp(-(a0 * s + b0)))
    y = np.where(rng.random(n) < p, 1.0, -1.0)
    a, b = cal.platt(s, y)
    F = np.array([[np.sum(p * (1 - p) * s * s), np.sum(p * (1 - p) * s)], [np.sum(p * (1 - p) * s), np.sum(p * (1 - p))]])
    se = np.sqrt(np.diag(np.linalg.inv(F)))
    assert abs(a - a0) < 4 * se[0] and abs(b - b0) < 4 * se[1]


def test_platt_targets_are_platts():
    y = np.array([1, 1, 1, -1, -1])
    np.testing.assert_allclose(cal.platt_targets(y), [4 / 5, 4 / 5, 4 / 5, 1 / 4, 1 / 4])


def test_separable_scores_give_a_finite_slope():
    """Unsmoothed, a → ∞ on rows the scores separate; Platt's targets keep it finite."""
    s = np.linspace(-3, 3, 100)
    a, b = cal.platt(s, np.where(s > 0, 1, -1))
    assert 0 < a < 1e3 and math.isfinite(b)


def test_a_slope_never_turns_the_ranking_around():
    """Scores that rank backwards: a = 0 and b the logit of the mean target (the node's smoothed base rate)."""
    s = np.linspace(-3, 3, 200)
    y = np.where(s < 0.5, 1, -1)
    a, b = cal.platt(s, y)
    t = cal.platt_targets(y).mean()
    assert a == 0.0 and b == pytest.approx(math.log(t / (1 - t)), rel=1e-12)


def test_useless_scores_give_about_the_base_rate_and_never_a_worse_fit():
    """Pure-noise scores (overconfident: sd 5): the fitted slope is small and the in-sample loss at most the base
    rate's (a = 0 is feasible and the loss convex)."""
    rng = np.random.default_rng(2)
    for seed in range(5):
        r = np.random.default_rng(seed)
        s = 5.0 * r.standard_normal(400)
        y = np.where(r.random(400) < 0.3, 1.0, -1.0)
        a, b = cal.platt(s, y)
        t = cal.platt_targets(y)
        base = math.log(t.mean() / (1 - t.mean()))
        assert _platt_loss([a, b], s, t) <= _platt_loss([0.0, base], s, t) + 1e-9
        assert a < 0.2
    with pytest.raises(ValueError, match="one score per label"):
        cal.platt(rng.standard_normal(3), np.ones(4))


def test_scores_that_are_not_finite_give_the_nodes_smoothed_base_rate():
    y = np.array([1, -1, -1, 1, -1])
    t = cal.platt_targets(y).mean()
    for bad in (np.nan, np.inf):
        assert cal.platt(np.array([bad, 1.0, 2.0, -1.0, 0.0]), y) == (0.0, pytest.approx(math.log(t / (1 - t))))
    Xt = np.column_stack([np.arange(5.0), np.ones(5)])
    w2, a, b = cal.recalibrate(Xt, y, np.array([np.nan, 0.0]))
    assert a == 0.0 and np.all(np.isfinite(w2)) and w2[0] == 0.0 and w2[1] == b
    assert cal.platt(np.arange(5.0), y.reshape(-1, 1)) == cal.platt(np.arange(5.0), y)  # a column of labels


def test_recalibrate_rescales_and_shifts_the_scores():
    rng = np.random.default_rng(3)
    Xt = np.column_stack([rng.uniform(-1, 1, (300, 4)), np.ones(300)])
    y = np.where(Xt[:, 0] + 0.5 * rng.standard_normal(300) > 0, 1.0, -1.0)
    w = np.array([8.0, 0.0, 1.0, -2.0, 0.5])  # overconfident
    w2, a, b = cal.recalibrate(Xt, y, w)
    np.testing.assert_allclose(Xt @ w2, a * (Xt @ w) + b, rtol=1e-12, atol=1e-12)
    assert (a, b) == cal.platt(Xt @ w, y) and 0 < a < 1


# ----------------------------------------------------------------------------- at the node and in the driver
def _nodes(n=900, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.normal(40, 12, n), rng.exponential(3e4, n), rng.integers(0, 2, n),
                         rng.normal(0, 1, (n, d - 3))])
    z = 0.04 * (X[:, 0] - 40) + 2e-5 * (X[:, 1] - 3e4) + 0.8 * X[:, 2] - 1.2
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-z)), 1.0, -1.0)
    parts = np.array_split(np.arange(n), 3)
    return [X[i] for i in parts], [y[i] for i in parts]


def test_the_driver_computes_what_a_deployed_node_computes():
    """The gossip driver with recalibrate=True gives node i's node_model(...)['recalibrated'] (the function a deployed node
    runs at the end) on node i's rows; the consensus model itself is unchanged."""
    Xs, ys = _nodes()
    bounds = (np.array([0.0, 0.0, 0.0, -3, -3]), np.array([100.0, 2e5, 1.0, 3, 3]))
    kw = dict(epsilon=1.0, rounds=8, bounds=bounds, monitor=False)
    res = gossip_driver.fit(GossipParams(recalibrate=True, **kw), Nodes(Xs, ys, nx.cycle_graph(3)), noise_seed=5)
    plain = gossip_driver.fit(GossipParams(recalibrate=False, **kw), Nodes(Xs, ys, nx.cycle_graph(3)), noise_seed=5)
    np.testing.assert_array_equal(res.F, plain.F)
    assert plain.node_models is None
    for i in range(3):
        opts = dict(degree=2, max_degree=2, n_nodes=3, n_total=900, rounds=8, range_rounds=0, noise_multiplier=res.noise_multiplier,
                    step=1.0, momentum=0.7, ridge=1e-4, row_clip=res.row_clip, bounds=bounds)
        cfg, _ = setup_node(f"node{i}", Xs[i], ys[i], opts)
        Xt = mech.single_rows(mech.prepare(Xs[i], bounds[0], bounds[1], res.row_clip, order="F"))  # as a noisy node keeps them
        state = NodeState(8, res.F[i], np.zeros(6), bounds[0], bounds[1], Xt, res.F[i])
        out = node_model(cfg, state)
        np.testing.assert_array_equal(out["coef"], res.F[i])
        np.testing.assert_allclose(out["recalibrated"], res.node_models[i], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out["calibration"], res.calibration[i], rtol=1e-12)
    cfg0, _ = setup_node("node0", Xs[0], ys[0], dict(opts, noise_multiplier=0.0))
    assert isinstance(node_model(cfg0, NodeState(8, res.F[0], np.zeros(6), None, None, None, res.F[0])), np.ndarray)


def test_a_hosted_node_writes_its_consensus_and_its_recalibrated_model(tmp_path):
    """A party under its operator's policy writes model.npz: ``coef`` (the consensus model, shareable under the run's
    ε) and ``recalibrated`` (its own use), both named in model.json."""
    Xs, ys = _nodes(seed=1)
    X, y = np.concatenate(Xs), np.concatenate(ys)
    ops = {f"node{i}": PartyOperator(policy=PartyPolicy(max_epsilon=2.0, delta=1e-5), allow_seeded_noise=True)
           for i in range(3)}
    m = ConsensusLogisticRegression(n_nodes=3, epsilon=1.0, random_state=0,
                                    backend=InProcessBackend(policies=ops, party_dir=tmp_path)).fit(X, y)
    for i in range(3):
        z = np.load(tmp_path / f"node{i}" / "model.npz")
        np.testing.assert_allclose(z["coef"], np.append(m.coefs_[i], m.intercepts_[i]), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(z["recalibrated"], np.append(m.node_coefs_[i], m.node_intercepts_[i]),
                                   rtol=1e-10, atol=1e-12)
        meta = json.loads((tmp_path / f"node{i}" / "model.json").read_text())
        assert meta["arrays"] == ["calibration", "choice", "coef", "recalibrated", "space"] and meta["private"] is True
        assert str(z["choice"]) == m.node_choice_[i]


def test_node_models_of_the_estimator():
    Xs, ys = _nodes(seed=2)
    X, y = np.concatenate(Xs), np.concatenate(ys)
    m = ConsensusLogisticRegression(n_nodes=3, epsilon=1.0, random_state=0).fit(X, y)
    assert m.node_coefs_.shape == (3, 5) and m.calibration_.shape == (3, 2) and np.all(m.calibration_[:, 0] >= 0)
    lo, hi, R = m._gossip
    for i in range(3):
        w = np.append(m.node_coefs_[i], m.node_intercepts_[i])
        rows = X if m.node_spaces_[i] == "raw" else mech.prepare(X, lo, hi, R)  # its own model: raw units
        assert (m.node_spaces_[i] == "raw") == (m.node_choice_[i] == "own")
        np.testing.assert_allclose(m.decision_function(X, node=i), rows[:, :len(w) - 1] @ w[:-1] + w[-1] * (
            1.0 if m.node_spaces_[i] == "raw" else rows[:, -1]), rtol=1e-12)
        assert m.predict_proba(X, node=i).shape == (len(y), 2) and set(m.predict(X, node=i)) <= {-1.0, 1.0}
    np.testing.assert_allclose(m.decision_function(X), mech.prepare(X, lo, hi, R) @ np.append(m.coef_, m.intercept_))
    for bad in (3, -1, 1.0, True, "0"):
        with pytest.raises(InvalidParameterError, match="node must be a node index in 0..2"):
            m.decision_function(X, node=bad)
    off = ConsensusLogisticRegression(n_nodes=3, epsilon=1.0, random_state=0, recalibrate=False).fit(X, y)
    assert off.node_coefs_ is None and off.calibration_ is None
    np.testing.assert_array_equal(off.decision_function(X, node=1),
                                  mech.prepare(X, lo, hi, R) @ np.append(off.coefs_[1], off.intercepts_[1]))
    assert ConsensusLogisticRegression(n_nodes=3, protocol="gossip", random_state=0).fit(X, y).node_coefs_ is None
    assert ConsensusLogisticRegression(n_nodes=3, protocol="gossip", random_state=0,
                                       recalibrate=True).fit(X, y).node_coefs_.shape == (3, 5)
    with pytest.raises(InvalidParameterError, match="recalibrate must be True, False or None"):
        ConsensusLogisticRegression(n_nodes=3, epsilon=1.0, recalibrate="yes").fit(X, y)
    with pytest.raises(InvalidParameterError, match="recalibrate is for the gossip protocol"):
        ConsensusLogisticRegression(n_nodes=3, max_iter=3, recalibrate=True).fit(X / np.abs(X).max(0), y)
    old = ConsensusLogisticRegression(n_nodes=3, epsilon=1.0)
    del old.__dict__["recalibrate"]  # an estimator pickled before the parameter existed
    assert old.get_params()["recalibrate"] is None and clone(old).recalibrate is None
    admm = ConsensusLogisticRegression(n_nodes=3, max_iter=3).fit(X / np.abs(X).max(0), y)
    assert admm.node_coefs_ is None
    with pytest.raises(InvalidParameterError, match="node= picks one node's model of a gossip fit"):
        admm.decision_function(X, node=0)


# ----------------------------------------------------------------------------- schedule and starting intercept
def test_a_noise_limited_run_takes_the_smaller_momentum():
    assert default_schedule(1904, 13, 1.0, n_nodes=5).momentum == NOISY_MOMENTUM == 0.7  # AER::HMDA
    assert default_schedule(22_524, 8, 1.0, n_nodes=5).momentum == 0.9  # AER::CPS1988: signal-rich
    Xs, ys = _nodes()
    nodes = Nodes(Xs, ys, nx.cycle_graph(3))
    res = gossip_driver.fit(GossipParams(epsilon=1.0, rounds=4, recalibrate=False), nodes, noise_seed=0)
    assert res.regime == "noise-limited" and res.momentum == 0.7
    assert gossip_driver.fit(GossipParams(epsilon=1.0, rounds=4, momentum=0.5, recalibrate=False), nodes,
                             noise_seed=0).momentum == 0.5


@pytest.mark.parametrize("positives, sd, expected", [
    (0.0, 0.0, math.log(1e-3 / (1 - 1e-3))),  # no noise: the old clip
    (0.0, 250.0, math.log(0.125 / 0.875)),  # a count the noise cannot tell from 0: p_min = 250/2000
    (300.0, 250.0, math.log(0.15 / 0.85)),  # inside the clip: the DP rate itself
    (2000.0, 250.0, math.log(0.875 / 0.125)),
    (300.0, 1500.0, 0.0),  # noise ≥ n/2: the count says nothing, p = 1/2 (before the cap: 1 − p_min < p_min)
    (0.0, 2500.0, 0.0),  # noise > n: before the cap, log of a negative number
])
def test_the_starting_intercept_is_clipped_where_the_count_is_noise(positives, sd, expected):
    d = 2
    cfg = RouterConfig(nx.to_scipy_sparse_array(nx.cycle_graph(3), format="csr"), ("a", "b", "c"), d, 2000, 2,
                       positives_sd=sd)
    st, _ = init_router(cfg)
    counts = np.zeros((2, d))
    out = {"a": RangeCounts(counts, positives), "b": RangeCounts(counts, 0.0), "c": RangeCounts(counts, 0.0)}
    st, _, _ = router_step(cfg, st, out, rng=None)
    assert st.intercept0 == pytest.approx(expected, rel=1e-12)


def test_on_a_small_noisy_table_each_node_gets_about_its_base_rate_or_better():
    """700 raw-unit rows, 5 nodes (140 each), a weak signal, ε = 1, 3 seeds: the consensus model is overconfident
    (worse than the base rate on the held-out rows by more than 0.05 in some seed); the nodes' recalibrated models
    are, on average over the nodes, within 0.02 of the base rate or better in every seed. The 0.02: Platt's two
    parameters fitted on m = 140 rows overfit by about k/(2m) = 0.007 nats when the scores carry nothing
    (Akaike), and a node's own base rate misses the pooled one by about p(1 − p)/m / (2 p (1 − p)) = 0.004."""
    rng = np.random.default_rng(11)
    n = 1400
    X = np.column_stack([rng.normal(45, 10, n), rng.lognormal(10, 0.6, n), rng.integers(0, 4, n),
                         rng.integers(0, 2, n), rng.normal(12, 3, n), rng.integers(0, 3, n)])
    z = -0.03 * (X[:, 0] - 45) + 0.3 * (X[:, 3] - 0.5) - 0.15 * X[:, 2] + 0.1
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-z)), 1.0, -1.0)
    Xtr, ytr, Xte, yte = X[:700], y[:700], X[700:], y[700:]
    p = np.mean(ytr > 0)
    base = float(-np.mean(np.where(yte > 0, np.log(p), np.log1p(-p))))

    def loss(zz):
        return float(np.mean(np.logaddexp(0.0, -yte * zz)))

    consensus, nodes, shared = [], [], []
    for seed in range(3):
        m = ConsensusLogisticRegression(n_nodes=5, epsilon=1.0, random_state=seed).fit(Xtr, ytr)
        lo, hi, R = m.row_map_  # the rounds' consensus model (what the shared model was before its DP validation)
        consensus.append(loss(mech.prepare(Xte, lo, hi, R) @ np.append(m.coefs_.mean(0), m.intercepts_.mean())))
        shared.append(loss(m.decision_function(Xte)))  # the validated hand-over (algorithms/gossip/validation.py)
        nodes.append(np.mean([loss(m.decision_function(Xte, node=i)) for i in range(5)]))
    assert max(consensus) > base + 0.05
    assert max(shared) < max(consensus)
    assert max(nodes) <= base + 0.02


def test_a_tiny_table_whose_count_is_all_noise_still_fits():
    """150 rows, d = 10, 5 nodes, ε = 0.5: σ₊ > n. Before the cap at 1/2 the hub took the log of a negative number."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 10))
    y = np.where(X[:, 0] + rng.normal(size=150) > 0, 1, -1)
    m = ConsensusLogisticRegression(n_nodes=5, epsilon=0.5, random_state=0).fit(X, y)
    assert np.all(np.isfinite(m.coefs_)) and np.all(np.isfinite(m.node_coefs_))
