"""The gossip Setup's target fields (``loss``, ``classes``, ``huber_delta``, ``target_bounds``) are the
COORDINATOR's choices (:class:`dpadmm.algorithms.gossip.messages.GossipOptions`); the node's policy prices σ/Δ only.

Classes probe (fixed). A multinomial node refused at Setup when one of its labels was not a class index below the
coordinator's K (``targets.node_labels``): the refusal is a function of the data with no noise, so a coordinator
choosing K = 3 learned whether the node holds a record of class ≥ 3 — on neighbouring datasets (one record's label
2 ↦ 3) set up on D, refused on D′, 1/1 each: ε = ∞ for that bit, repeatable with every K at no budget (a refused
Setup prices nothing). Now a private node (σ/Δ > 0) refuses nothing about its labels: a label outside 0…K−1 (or NaN,
or not an integer) is "no class", its weight ``p`` (``‖p‖ ≤ ‖p‖₁ = 1 ≤ √2``: the Δ of :mod:`.targets` holds); a
non-private run still refuses with its one line.

Also checked here, holding: whatever K, δ or label bounds the coordinator sends and whatever neighbour sum it routes,
a node's gradient sum moves by at most the Δ it prices when one record changes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpadmm.algorithms.gossip import node as gn
from dpadmm.algorithms.gossip import targets as tg
from dpadmm.algorithms.gossip.messages import GossipOptions
from dpadmm.exceptions import InvalidParameterError


def _options(noise: float, **kw) -> GossipOptions:
    return GossipOptions(degree=1, max_degree=1, n_nodes=2, n_total=8, rounds=2, range_rounds=0,
                         noise_multiplier=noise, step=0.1, momentum=0.0, ridge=0.0, row_clip=1.0,
                         bounds=(np.zeros(2), np.ones(2)), **kw)


def _outcome(X, y, options):
    try:
        gn.setup_node("n1", X, y, options)
    except (InvalidParameterError, ValueError) as exc:
        return f"refused: {exc}"
    return "set up"


def test_a_coordinators_class_count_does_not_probe_a_private_nodes_labels():
    X = np.random.default_rng(0).uniform(size=(4, 2))
    D, D_prime = np.array([0, 1, 2, 2]), np.array([0, 1, 2, 3])  # one record's label changed
    opt = _options(1.0, loss="multinomial", classes=3)
    assert _outcome(X, D, opt) == _outcome(X, D_prime, opt) == "set up"  # before: set up / refused


def test_a_non_private_run_still_refuses_labels_outside_the_classes():
    X = np.random.default_rng(0).uniform(size=(4, 2))
    assert _outcome(X, np.array([0, 1, 2, 3]), _options(0.0, loss="multinomial", classes=3)).startswith("refused")


@pytest.mark.parametrize("target", [tg.Target("multinomial", 3), tg.Target("multinomial", 50),
                                    tg.Target("squared"), tg.Target("huber", 2, 1e-3), tg.Target("huber", 2, 1e3)])
def test_one_record_moves_the_sum_by_at_most_the_priced_delta_at_a_hostile_point(target):
    rng = np.random.default_rng(1)
    d, R = 3, 1.5
    X = rng.uniform(-1, 1, size=(20, d))
    Xt = gn.mech.prepare(X, -np.ones(d), np.ones(d), R)
    p = target.outputs * (d + 1)
    worst = 0.0
    for _ in range(200):
        S = rng.choice([-1.79e308, 1.79e308, 1e12, -1e12], size=p)  # a router's extreme neighbour sum
        w = gn.gossip_mix(np.zeros(p), S, 1, 1)
        if target.loss == "multinomial":
            y = rng.integers(0, target.classes, size=20)
            y2 = y.copy()
            y2[0] = target.classes  # an unknown class on the neighbour: "no class"
        else:
            y = tg.scale_labels(rng.normal(size=20) * 1e6, -1.0, 1.0)
            y2 = y.copy()
            y2[0] = -y[0]
        X2 = Xt.copy()
        X2[0] = np.r_[-Xt[0, :d], 1.0]
        G, G2 = tg.target_sum(Xt, y, w, target), tg.target_sum(X2, y2, w, target)
        assert np.all(np.isfinite(G)) and np.all(np.isfinite(G2))
        worst = max(worst, float(np.linalg.norm(G - G2)) / target.sensitivity(R))
    assert worst <= 1.0 + 1e-12, worst
    assert math.isfinite(worst)
