"""The gossip node's first range release — its 2d threshold counts AND its count of positive labels, one Gaussian
release of Δ_r = √(2d + 1) — adds the noise its event states to every coordinate, the label count included.

A hand plant that halved the label count's noise only (``privacy.ranges.range_counts``: ``pos + 0.5·σ·N(0, 1)``,
events unchanged) passed every default test of the plant, audit, gossip and range suites (148 tests): the audit
games' canaries move a feature column, never a label, so the label count's noise was never looked at. Here the node's
own step (a ``RangeRequest`` of round 0) is run on independent generators and each coordinate's noise, over the σ its
event states, must be N(0, 1) (two-sided χ², false failure ≤ 10⁻⁶ per check, the test seeded) and the label count's
noise uncorrelated with every threshold count's (a reused draw)."""

from __future__ import annotations

import numpy as np
from scipy.stats import chi2, norm

from dpadmm.algorithms.gossip import node as gn

RELEASES, FALSE_FAILURE = 2000, 1e-6


def _node(z: float):
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(60, 3)), np.where(rng.random(60) < 0.4, 1.0, -1.0)
    return gn.setup_node("node0", X, y, {"degree": 1, "max_degree": 1, "n_nodes": 2, "n_total": 120, "rounds": 2,
                                         "range_rounds": 2, "noise_multiplier": z, "step": 0.1, "momentum": 0.0,
                                         "ridge": 1e-3, "row_clip": 1.0})


def _release(z: float, seed: int):
    cfg, st = _node(z)
    req = gn.RangeRequest(0, np.array([[-0.5, 0.0, 0.5], [0.5, 1.0, 1.5]]))
    _, out, events = gn.node_step(cfg, st, req, rng=np.random.default_rng([7, seed]))
    return np.r_[np.ravel(out.counts), out.positives], events


def test_every_coordinate_of_the_first_range_release_has_its_stated_noise():
    exact, none = _release(0.0, 0)
    assert none == [] and exact[-1] == float(np.sum(_node(0.0)[0].y > 0))  # the true label count, un-noised
    U = []
    for s in range(RELEASES):
        noisy, (event,) = _release(2.0, s)
        assert event.sensitivity == np.sqrt(2 * 3 + 1)
        U.append((noisy - exact) / event.sigma)
    U = np.array(U)  # (releases, 2d + 1): standard normal if the noise is as stated
    lo, hi = chi2.ppf(FALSE_FAILURE / 2, RELEASES), chi2.ppf(1 - FALSE_FAILURE / 2, RELEASES)
    for j, col in enumerate(U.T):
        assert lo <= float(col @ col) <= hi, (j, float(col @ col) / RELEASES)
    r_max = norm.isf(FALSE_FAILURE / 2) / np.sqrt(RELEASES)  # |corr| of independent N(0, 1) pairs, ~N(0, 1/k)
    for j in range(U.shape[1] - 1):
        assert abs(float(np.corrcoef(U[:, j], U[:, -1])[0, 1])) < r_max, j
