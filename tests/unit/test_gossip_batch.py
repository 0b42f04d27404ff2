"""The in-process simulation's stacked gossip round (:mod:`dpadmm.algorithms.gossip.batch`) is the nodes' own
round, bit for bit: states, broadcasts and privacy events; and it declines every round it does not take."""

import networkx as nx
import numpy as np

from dpadmm.algorithms.gossip import batch
from dpadmm.algorithms.gossip.node import GossipInbox, RangeRequest, node_step, setup_node
from dpadmm.algorithms.gossip.router import RouterConfig, neighbour_sums
from dpadmm.backends import InProcessBackend, inprocess
from dpadmm.backends.base import party_rng
from dpadmm.algorithms.gossip import driver as gossip_driver
from dpadmm.algorithms.gossip.params import GossipParams
from dpadmm.data.graphs import Nodes, adjacency
from dpadmm.privacy.ranges import range_counts, sorted_columns

D = 5


def _nodes(n=4, over=None):
    rng = np.random.default_rng(3)
    opts = dict(max_degree=2, n_nodes=n, n_total=400 * n, rounds=12, range_rounds=0, noise_multiplier=2.5, step=1.3,
                momentum=0.9, ridge=1e-4, row_clip=2.0, average_from=3, bounds=(np.full(D, -2.0), np.full(D, 2.0)))
    out = []
    for i in range(n):
        X = rng.standard_normal((400, D)) * 1.5
        y = np.where(X[:, 0] + rng.standard_normal(400) > 0, 1.0, -1.0)
        out.append(setup_node(f"node{i}", X, y, dict(opts, degree=1 + i % 2, **(over or {}).get(i, {}))))
    return [c for c, _ in out], [s for _, s in out]


def _inbox(cfg, t, S):
    return GossipInbox(t, S, cfg.bounds[0], cfg.bounds[1], 0.0)


def _first_round(cfgs, states):
    done = [node_step(c, s, _inbox(c, 0, np.zeros(D + 1)), rng=party_rng(7, i, 0))
            for i, (c, s) in enumerate(zip(cfgs, states))]
    return [st for st, _, _ in done], np.stack([o.w for _, o, _ in done])


def test_a_stacked_round_is_every_nodes_own_round_bit_for_bit():
    cfgs, states = _nodes()
    states, F = _first_round(cfgs, states)
    one = together = states
    for t in range(1, 12):
        S = np.roll(F, 1, axis=0) + np.where(np.arange(len(cfgs))[:, None] % 2, np.roll(F, -1, axis=0), 0.0)
        inboxes = [_inbox(c, t, S[i]) for i, c in enumerate(cfgs)]
        alone = [node_step(c, s, ib, rng=party_rng(7, i, t)) for i, (c, s, ib) in enumerate(zip(cfgs, one, inboxes))]
        stacked = batch.nodes_step(cfgs, together, inboxes, [party_rng(7, i, t) for i in range(len(cfgs))])
        assert stacked is not None
        for (s1, o1, e1), (s2, o2, e2) in zip(alone, stacked):
            assert s1.round == s2.round and e1 == e2 and len(e1) == 1
            for a, b in ((s1.w, s2.w), (s1.v, s2.v), (o1.w, o2.w)):
                assert np.array_equal(a, b) and a.tobytes() == b.tobytes()
            assert (s1.avg is None and s2.avg is None) or s1.avg.tobytes() == s2.avg.tobytes()
        one, together = [s for s, _, _ in alone], [s for s, _, _ in stacked]
        F = np.stack([o.w for _, o, _ in alone])


def test_declines_what_the_nodes_decide_alone():
    cfgs, states = _nodes()
    rngs = [party_rng(7, i, 0) for i in range(len(cfgs))]
    zero = [_inbox(c, 0, np.zeros(D + 1)) for c in cfgs]
    assert batch.nodes_step(cfgs, states, zero, rngs) is None  # the first gradient round: bounds checked, rows prepared
    states, F = _first_round(cfgs, states)
    good = [_inbox(c, 1, F[i]) for i, c in enumerate(cfgs)]
    assert batch.nodes_step(cfgs, states, good, rngs) is not None
    bad = list(good)
    bad[2] = _inbox(cfgs[2], 1, np.full(D + 1, np.nan))  # node2 refuses it, naming itself, one by one
    assert batch.nodes_step(cfgs, states, bad, rngs) is None
    bad[2] = _inbox(cfgs[2], 1, np.zeros(D + 2))
    assert batch.nodes_step(cfgs, states, bad, rngs) is None
    bad[2] = RangeRequest(1, np.zeros((2, D)))
    assert batch.nodes_step(cfgs, states, bad, rngs) is None
    other, _ = _nodes(over={1: {"step": 0.5}})  # a node with other constants
    assert batch.nodes_step(other, states, good, rngs) is None


def test_a_fit_is_the_same_stepped_together_or_one_by_one(monkeypatch):
    rng = np.random.default_rng(0)
    Xs = [rng.standard_normal((300, 4)) * 3 + 1 for _ in range(5)]
    ys = [np.where(x[:, 1] + rng.standard_normal(300) > 1, 1.0, -1.0) for x in Xs]
    G = nx.cycle_graph(5)
    stepped = []
    real = inprocess.step_together

    def counted(*args):
        out = real(*args)
        stepped.append(out is not None)
        return out

    monkeypatch.setattr(inprocess, "step_together", counted)
    params = GossipParams(epsilon=1.0, recalibrate=False)
    a = gossip_driver.fit(params, Nodes(Xs, ys, G), InProcessBackend(), noise_seed=11)
    b = gossip_driver.fit(params, Nodes(Xs, ys, G), InProcessBackend(batch=False), noise_seed=11)
    assert sum(stepped) == a.path.shape[0] - 1  # every gradient round after the first went together
    assert a.F.tobytes() == b.F.tobytes() and a.path.tobytes() == b.path.tobytes()
    assert a.ledger.events == b.ledger.events and a.report.epsilon == b.report.epsilon


def test_range_counts_by_sorted_columns_are_the_counts():
    rng = np.random.default_rng(5)
    X = np.round(rng.standard_normal((500, 6)) * 4)  # ties, and values on the thresholds
    X[3, 1], X[7, 2], X[9, 4], X[11, 0] = np.nan, np.inf, -np.inf, -0.0
    for _ in range(20):
        t = np.round(rng.standard_normal((2, 6)) * 5)
        t[0, 0] = 0.0
        a = range_counts("n", 1, X, t, 0.0, None)[0]
        b = range_counts("n", 1, X, t, 0.0, None, columns=sorted_columns(X))[0]
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_neighbour_sums_are_scipys_product():
    rng = np.random.default_rng(2)
    for G in (nx.cycle_graph(5), nx.complete_graph(6), nx.star_graph(5), nx.erdos_renyi_graph(15, 0.3, seed=1)):
        A, _ = adjacency(G)
        cfg = RouterConfig(A, tuple(f"node{i}" for i in G.nodes), 3, 100, 0)
        assert cfg.neighbour_index is not None
        for _ in range(20):
            F = rng.standard_normal((G.number_of_nodes(), 4)) * 10.0 ** rng.integers(-8, 8, (G.number_of_nodes(), 1))
            assert neighbour_sums(cfg, F).tobytes() == (A @ F).tobytes()
    G = nx.Graph()
    G.add_weighted_edges_from([(0, 1, 0.5), (1, 2, 3.0)])
    A, _ = adjacency(G)
    cfg = RouterConfig(A, ("node0", "node1", "node2"), 1, 10, 0)
    assert cfg.neighbour_index is None  # weights: scipy's own product
    F = rng.standard_normal((3, 2))
    assert np.array_equal(neighbour_sums(cfg, F), A @ F)


def test_the_stacked_sums_are_each_nodes_own_sum_bit_for_bit():
    from dpadmm.algorithms.gossip import mechanism as mech

    rng = np.random.default_rng(8)
    for d, sizes in ((4, (300, 1, 57, 300)), (18, (3563, 3564, 3562)), (8, (4505, 4504, 4504, 4505, 4504))):
        Xts = [mech.prepare(rng.standard_normal((b, d)) * 3, np.full(d, -2.0), np.full(d, 2.0), 1.5) for b in sizes]
        ys = [np.where(rng.standard_normal(b) > 0.3, 1.0, -1.0) for b in sizes]
        W = rng.standard_normal((len(sizes), d + 1)) * 10.0 ** rng.integers(-3, 3, (len(sizes), 1))
        W[0, 0] = 1e4  # margins beyond the ±500 clip
        for single in (False, True):
            for Xs in (Xts, [mech.column_major(Xt) for Xt in Xts]):
                G = mech.gradient_sums(Xs, np.concatenate(ys), W, single=single)
                for i, (Xt, y) in enumerate(zip(Xs, ys)):
                    own = mech.gradient_sum(Xt, y, W[i].copy(), single=single)
                    assert G[i].tobytes() == own.tobytes()
        noisy, events = mech.gradient_releases(["a", "b", "c", "d", "e"][:len(sizes)], 3, Xts, np.concatenate(ys), 1.5,
                                               W, 2.0, [party_rng(5, i, 3) for i in range(len(sizes))])
        for i, (Xt, y) in enumerate(zip(Xts, ys)):
            own, ev = mech.gradient_release("abcde"[i], 3, Xt, y, 1.5, W[i].copy(), 2.0, party_rng(5, i, 3))
            assert noisy[i].tobytes() == own.tobytes() and events[i] == ev


def test_the_gradient_sum_is_the_logistic_gradient_with_scipys_expit():
    """σ(−t) = 1/(1 + eᵗ) is scipy's expit(−t) (bit for bit where numpy's float64 exp is the C library's, as on a CPU
    without AVX-512; within an ulp of exp elsewhere)."""
    from scipy.special import expit

    from dpadmm.algorithms.gossip import mechanism as mech

    rng = np.random.default_rng(9)
    for _ in range(20):
        Xt = mech.prepare(rng.standard_normal((700, 6)) * 2, np.full(6, -1.0), np.full(6, 1.0), 2.0)
        y = np.where(rng.standard_normal(700) > 0, 1.0, -1.0)
        w = rng.standard_normal(7) * 10.0 ** rng.integers(-2, 3)
        ref = (-(y * expit(-np.clip(y * (Xt @ w), -500.0, 500.0)))) @ Xt
        np.testing.assert_allclose(mech.gradient_sum(Xt, y, w), ref, rtol=1e-12, atol=1e-12 * len(y))


def test_the_single_precision_weights_stay_within_their_documented_error():
    """A noisy release's weights y σ(−y m) with float32 exp (mechanism._logistic_weights): |weight| ≤ 1 exactly
    (the premise of Δ) and within 3·10⁻⁷ of float64 expit on a fine grid of margins, overflow and underflow
    included; the double-precision path is untouched."""
    from scipy.special import expit

    from dpadmm.algorithms.gossip import mechanism as mech

    t = np.concatenate([np.linspace(-120.0, 120.0, 480_001), [-1e300, -1e5, -89.0, -88.7, 88.7, 89.0, 1e5, 1e300,
                                                                 -np.inf, np.inf, 0.0, -0.0]])
    for sign in (1.0, -1.0):
        y = np.full(t.shape, sign)
        single, double = (sign * t).copy(), (sign * t).copy()  # margins m with y·m = t
        mech._logistic_weights(single, y, True)
        mech._logistic_weights(double, y, False)
        ref = sign * expit(-np.clip(t, -500.0, 500.0))
        assert np.all(np.isfinite(single)) and np.all(np.abs(single) <= 1.0)
        assert np.max(np.abs(single - ref)) <= 3e-7
        np.testing.assert_allclose(double, ref, rtol=5e-16, atol=0)  # bit for bit where exp is the C library's
    tt = np.linspace(0.0, 50.0, 100_001)  # the docstring's σ(1 − σ)|t| ≤ 0.23
    assert np.max(expit(-tt) * expit(tt) * tt) <= 0.23


def test_a_node_keeps_its_prepared_rows_column_major():
    from dpadmm.algorithms.gossip import mechanism as mech

    X = np.arange(12.0).reshape(4, 3)
    F = mech.column_major(X)
    assert F.flags.f_contiguous and np.array_equal(F, X)
    assert mech.column_major(F) is F


def test_a_node_drops_its_sorted_columns_after_the_last_range_round():
    """The sorted columns serve the range rounds only: held through them, gone after the last (so never held
    beside the prepared rows of the gradient rounds), the counts those rounds released as before."""
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((300, D)), np.where(rng.standard_normal(300) > 0, 1.0, -1.0)
    opts = dict(degree=1, max_degree=1, n_nodes=2, n_total=600, rounds=3, range_rounds=3, noise_multiplier=0.0,
                step=1.0, momentum=0.9, ridge=1e-4, row_clip=2.0, average_from=2)
    cfg, st = setup_node("node0", X, y, opts)
    for r in range(3):
        t = np.stack([np.full(D, -0.5 + 0.1 * r), np.full(D, 0.5)])
        st, out, _ = node_step(cfg, st, RangeRequest(r, t), rng=party_rng(1, 0, r))
        assert (st.columns is None) == (r == 2)
        assert np.array_equal(out.counts, np.stack([(X <= t[q]).sum(axis=0) for q in range(2)]))
