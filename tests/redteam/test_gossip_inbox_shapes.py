"""The shape attack of F3–F5 (a hub array with extra leading axes that multiplies a party's release) tried on the
gossip node, whose coordinator relays the neighbours' sum, the column bounds and the range thresholds.

Held (regular tests): the node checks every array it receives for its exact shape before anything is computed — a
neighbour sum of shape (B, d + 1) or (d + 1, 1), range thresholds of shape (B, 2, d), and column bounds of shape
(B, d) are refused, and the honest shapes release one vector with one event. Plant (the neighbour sum's shape check
removed, `S.shape != (p,)` → `S.ndim == 0`): the (B, d + 1) sum is taken and B noised gradients come back — caught
by ``test_a_broadcasting_neighbour_sum_is_refused``.
"""

from __future__ import annotations

import numpy as np
import pytest

gn = pytest.importorskip("dpadmm.algorithms.gossip.node")

from dpadmm.exceptions import ProtocolError  # noqa: E402

D, B = 3, 50


def _node(range_rounds=0, bounds=True):
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(60, D)), np.where(rng.random(60) < 0.4, 1.0, -1.0)
    opts = {"degree": 1, "max_degree": 1, "n_nodes": 2, "n_total": 120, "rounds": 2, "range_rounds": range_rounds,
            "noise_multiplier": 2.0, "step": 0.1, "momentum": 0.0, "ridge": 1e-3, "row_clip": 1.0}
    if bounds:
        opts["bounds"] = (np.full(D, -3.0), np.full(D, 3.0))
    return gn.setup_node("node0", X, y, opts)


def _gradient_round(S, lo=None, hi=None, bounds=True, rounds=2):
    cfg, st = _node(bounds=bounds)
    lo = np.full(D, -3.0) if lo is None else lo
    hi = np.full(D, 3.0) if hi is None else hi
    out = None
    for r in range(rounds):  # round 0 starts at the public point; round 1 reads the neighbour sum
        st, out, ev = gn.node_step(cfg, st, gn.GossipInbox(r, S, lo, hi), rng=np.random.default_rng(r))
    return np.asarray(out.w), ev


def test_the_honest_shapes_release_one_vector_and_one_event():
    w, ev = _gradient_round(np.zeros(D + 1))
    assert w.shape == (D + 1,) and len(ev) == 1


@pytest.mark.parametrize("shape", [(B, D + 1), (D + 1, 1), (1, D + 1)])
def test_a_broadcasting_neighbour_sum_is_refused(shape):
    with pytest.raises(ProtocolError, match="neighbour sum"):
        _gradient_round(np.zeros(shape))


def test_broadcasting_range_thresholds_are_refused():
    cfg, st = _node(range_rounds=2, bounds=False)
    with pytest.raises(ProtocolError, match="thresholds"):
        gn.node_step(cfg, st, gn.RangeRequest(0, np.zeros((B, 2, D))), rng=np.random.default_rng(0))


def test_broadcasting_column_bounds_are_refused_or_fixed_to_one_vector():
    try:
        w, ev = _gradient_round(np.zeros(D + 1), lo=np.full((B, D), -3.0), hi=np.full((B, D), 3.0), bounds=False)
    except (ProtocolError, ValueError):
        return
    assert w.shape == (D + 1,) and len(ev) == 1
