"""A gossip node's release is within its claim whatever its neighbours send (issue 35, item 1).

The attack: a hostile neighbour (or router) sends neighbour sums of ∓1.79e308 in two rounds. Without a bound on
what enters the step the node's mixed point overflows to (−∞, …, +∞) and the next gradient sum is NaN exactly when
the node holds a row at or above the midpoint of the bounds: finite on D, NaN on D′ in every run (ε = ∞). Finite but
huge sums give NaN the same way through BLAS's overflowing margins. With the public box
(:func:`dpadmm.algorithms.gossip.mechanism.bounded`, the mechanism's *Bounded point*) every release is finite on both
sides and the un-noised sums at the point the node evaluated at differ by at most Δ — on the node's own step
(every routed backend), the in-process stacked round (:mod:`.batch`) and the peer-to-peer inbox.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm.algorithms.gossip import mechanism as mech
from dpadmm.algorithms.gossip.batch import nodes_step
from dpadmm.algorithms.gossip.node import GossipInbox, node_step, peer_inbox, setup_node

D_COLS, B, RUNS = 2, 6, 20
LO, HI = -np.ones(D_COLS), np.ones(D_COLS)
M = 1.79e308


def _options(degree: int = 1, n_nodes: int = 1) -> dict:
    return dict(degree=degree, max_degree=degree, n_nodes=n_nodes, n_total=B * n_nodes, rounds=4, range_rounds=0,
                noise_multiplier=1.0, step=0.2, momentum=0.9, ridge=1e-4, row_clip=4.0, bounds=(LO, HI),
                average_from=3)


def _rows(prime: bool):
    """D: every row below the midpoint of the bounds (raw −0.5); D′: row 0 replaced by one at the midpoint."""
    X = np.full((B, D_COLS), -0.5)
    if prime:
        X[0] = 0.0
    return X, np.where(np.arange(B) % 2 == 0, 1.0, -1.0)


def _overflow(t: int, gen) -> np.ndarray:
    """∓1.79e308: features +, intercept − in round 1; the signs flipped in round 2 (the mix overflows there)."""
    s = np.r_[np.full(D_COLS, M), -M]
    return s if t % 2 == 1 else -s


def _huge(t: int, gen) -> np.ndarray:
    """Finite but huge sums of random signs (BLAS's margins overflow to ±inf and NaN without the box)."""
    return gen.choice([-1.0, 1.0], size=D_COLS + 1) * gen.uniform(1e306, M, size=D_COLS + 1)


ATTACKS = {"overflow": _overflow, "huge": _huge}


@pytest.fixture
def spy(monkeypatch):
    """Every (point, release) the node's mechanism is called with, single-node and stacked."""
    seen = []
    one, many = mech.gradient_release, mech.gradient_releases

    def release(name, round_, Xt, y, row_clip, w, nm, rng):
        G, ev = one(name, round_, Xt, y, row_clip, w, nm, rng)
        seen.append((np.array(w), np.array(G)))
        return G, ev

    def releases(names, round_, Xts, y, row_clip, W, nm, rngs):
        G, ev = many(names, round_, Xts, y, row_clip, W, nm, rngs)
        seen.extend(zip(np.array(W), np.array(G)))
        return G, ev

    monkeypatch.setattr(mech, "gradient_release", release)
    monkeypatch.setattr(mech, "gradient_releases", releases)
    return seen


def _check(seen, Xt_pairs, y):
    """Every release finite; its point in the box; Δ between the neighbours' un-noised sums at that point."""
    delta = mech.gradient_sensitivity(4.0)
    for w, G in seen:
        assert np.all(np.isfinite(G)), f"a non-finite release at w_mix = {w}"
        assert np.all(np.abs(w) <= mech.MODEL_BOUND)
        for Xt, Xtb in Xt_pairs:
            diff = mech.gradient_sum(Xt, y, w, single=True) - mech.gradient_sum(Xtb, y, w, single=True)
            assert np.linalg.norm(diff) <= delta * (1 + 1e-12)


def _prepared(prime: bool):
    return mech.prepare(_rows(prime)[0], LO, HI, 4.0)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_hostile_neighbour_sums_leave_every_release_finite_on_both_neighbours(attack, spy):
    finite, points = {False: 0, True: 0}, []
    for prime in (False, True):
        X, y = _rows(prime)
        for seed in range(RUNS):
            gen, rng = np.random.default_rng(1000 + seed), np.random.default_rng(seed)
            cfg, st = setup_node("n", X, y, _options())
            st, _, _ = node_step(cfg, st, GossipInbox(0, np.zeros(D_COLS + 1), LO, HI, 0.0), rng=rng)
            spy.clear()
            with np.errstate(all="ignore"):  # the count below, not a warning, is what tells the sides apart
                for t in (1, 2):  # the release after the second round's mix is the distinguisher
                    inbox = GossipInbox(t, ATTACKS[attack](t, gen), LO, HI, 0.0)
                    st, out, events = node_step(cfg, st, inbox, rng=rng)
                    assert len(events) == 1
            finite[prime] += all(np.all(np.isfinite(G)) for _, G in spy)
            points.extend(spy)
    # without the box (c765ad4): {False: 20, True: 0} under "overflow" (the distinguisher), {False: 20, True: 18} "huge"
    assert finite == {False: RUNS, True: RUNS}
    _check(points, [(_prepared(False), _prepared(True))], y)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_the_stacked_in_process_round_bounds_the_same_way(attack, spy):
    """Two nodes stepped at once (``Protocol.batch_step``), node 1 holding D or D′, under the hostile sums."""
    for prime in (False, True):
        for seed in range(RUNS):
            gen = np.random.default_rng(1000 + seed)
            rngs = [np.random.default_rng([seed, k]) for k in range(2)]
            cfgs, states = [], []
            for k in range(2):
                X, y = _rows(prime and k == 1)
                cfg, st = setup_node(f"n{k}", X, y, _options(degree=1, n_nodes=2))
                st, _, _ = node_step(cfg, st, GossipInbox(0, np.zeros(D_COLS + 1), LO, HI, 0.0), rng=rngs[k])
                cfgs.append(cfg)
                states.append(st)
            spy.clear()
            for t in (1, 2, 3):
                inboxes = [GossipInbox(t, ATTACKS[attack](t, gen), LO, HI, 0.0) for _ in cfgs]
                stepped = nodes_step(cfgs, states, inboxes, rngs)
                assert stepped is not None  # the stacked path took the round
                states = [s for s, _, _ in stepped]
            assert len(spy) == 6
            _check(spy, [(_prepared(False), _prepared(True))], y)


def test_peer_to_peer_sum_that_overflowed_is_put_in_the_box_before_the_step(spy):
    """The backend sums the neighbours' broadcasts unchecked (two of 1.79e308 overflow to inf): the node's peer inbox
    bounds the sum, the step accepts it and releases a finite sum on D and on D′."""
    for prime in (False, True):
        X, y = _rows(prime)
        cfg, st = setup_node("n", X, y, _options(degree=2))
        rng = np.random.default_rng(0)
        st, _, _ = node_step(cfg, st, peer_inbox(cfg, st, 0, None), rng=rng)
        for t in (1, 2):
            with np.errstate(over="ignore", invalid="ignore"):
                summed = sum(np.array(_overflow(t, None)) for _ in range(2))  # as the p2p backend sums: ±inf
            if t == 2:
                summed[0] = np.nan
            inbox = peer_inbox(cfg, st, t, summed)
            assert np.all(np.isfinite(inbox.neighbour_sum))
            st, _, _ = node_step(cfg, st, inbox, rng=rng)
    _check(spy[-2:], [(_prepared(False), _prepared(True))], y)
    assert len(spy) == 6 and all(np.all(np.isfinite(G)) for _, G in spy)


def test_the_box_is_the_identity_inside_it_and_finite_outside():
    x = np.array([0.5, -3.0, 1e6, -1e6, np.nextafter(1e6, 0)])
    assert mech.bounded(x).tobytes() == x.tobytes()
    y = mech.bounded(np.array([np.inf, -np.inf, np.nan, 2e6, -M]))
    assert y.tolist() == [1e6, -1e6, 0.0, 1e6, -1e6]
    col = mech.bounded(np.full((2, 1), M), np.array([[1e6], [2e6]]))
    assert col.ravel().tolist() == [1e6, 2e6]
