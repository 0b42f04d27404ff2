"""The shape attack of F3–F5 tried on an M-ADMM block ([Zhang], PVP and DVP): the router's neighbour sum with extra
axes, at round 0 and after it. Held if the block's broadcast stays one (K, d) model with its K events (or the round
fails before the release). Measured: (5, 1, d), (1, 5, d) and (1, 1, d) stop with an IndexError inside the local
solve (a crash before the release, on D and D′ alike); (5, d) for a one-node block returns one (1, d) model — but
leaves the block's dual λ at shape (5, d). No check of the message's shape: held by accident, as the vertical party.
"""

from __future__ import annotations

import numpy as np
import pytest

cn = pytest.importorskip("dpadmm.algorithms.consensus.node")

from dpadmm.algorithms.consensus.messages import NeighbourMessage  # noqa: E402

D = 3


def _block(pert):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, D))
    y = np.where(rng.random(40) < .5, 1.0, -1.0)
    cfg, st = cn.make_block(["a"], [X], [y], degree=[1], C=1.0, reg=0.1, eta=np.full((1, 3), 0.5),
                            theta=np.full((1, 3), 0.5), alpha=np.full((1, 3), 2.0), perturbation=pert)
    st, _, _ = cn.block_step(cfg, st, NeighbourMessage(0, np.zeros((1, D))), rng=np.random.default_rng(1))
    return cfg, st


@pytest.mark.parametrize("pert", ["pvp", "dvp"])
@pytest.mark.parametrize("shape", [(1, D), (5, 1, D), (1, 5, D), (1, 1, D), (5, D)])
def test_a_block_broadcasts_one_model_whatever_the_sum_shape(pert, shape):
    cfg, st = _block(pert)
    S = np.arange(np.prod(shape), dtype=float).reshape(shape) / 10.0
    try:
        _, msg, ev = cn.block_step(cfg, st, NeighbourMessage(1, S), rng=np.random.default_rng(2))
    except (IndexError, ValueError):
        assert shape != (1, D)
        return
    assert np.asarray(msg.f).shape == (1, D) and len(ev) == (1 if pert == "dvp" else 0)
