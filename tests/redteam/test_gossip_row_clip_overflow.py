"""Red team 2026-11-29, fourth pass (G2): the gossip row clip R is the COORDINATOR's (``GossipOptions.row_clip``) and
a private node's policy accepted any finite R > 0. R ≥ 1.35e154 makes ``R²`` overflow: the node's first gradient
round (after its range rounds have been released and booked) died with a bare ``OverflowError`` traceback; near
1.7e308 Δ = 2√(R² + 1) itself is ∞. Data-independent (no leak), but a Setup the node should refuse in one line from
the public value. Now R must lie in the experts' public range [1e-100, 1e100] at Setup."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm.algorithms.gossip import mechanism as mech, node as gn
from dpadmm.algorithms.gossip.messages import GossipOptions
from dpadmm.algorithms.gossip.policy import check
from dpadmm.privacy.policy import PartyPolicy, PolicyRefusal


def _cfg(R):
    opt = GossipOptions(degree=1, max_degree=1, n_nodes=2, n_total=8, rounds=2, range_rounds=0, noise_multiplier=1.0,
                        step=0.1, momentum=0.0, ridge=0.0, row_clip=R, bounds=(np.zeros(2), np.ones(2)))
    return gn.setup_node("n1", np.random.default_rng(0).uniform(size=(4, 2)), np.array([1.0, -1, 1, -1]), opt)[0]


def test_a_row_clip_whose_square_overflows_is_refused_at_setup():
    with pytest.raises(OverflowError):  # what the node's first gradient release did with it
        mech.gradient_sensitivity(1e200)
    policy = PartyPolicy(max_epsilon=8.0, delta=1e-5)
    for R in (1e200, 1.7e308):
        with pytest.raises(PolicyRefusal, match="row clip"):
            check(_cfg(R), [], policy, "n1")
    check(_cfg(4.0), [], policy, "n1")  # an ordinary R still runs
