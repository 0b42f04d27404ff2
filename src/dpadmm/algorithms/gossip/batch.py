"""The in-process simulation's gossip round for every node at once: :func:`.node.node_step`'s numbers, stacked.

A simulation holds all nodes in one process (``InProcessBackend``, parties without a policy); stepping them one by
one spends most of a round on per-node bookkeeping of (d + 1)-vectors — fifteen small numpy calls per node — not on
the gradient sums. :func:`nodes_step` (``Protocol.batch_step``) takes a gradient round s ≥ 1 of nodes that share
the run's public constants and does the vector arithmetic on the (N, d + 1) stack: the same elementwise operations,
in the same order, on the same numbers (an elementwise IEEE operation does not depend on the array around it), so
every broadcast, state and event is bit for bit :func:`.node.node_step`'s. Each node's release is its row of
:func:`.mechanism.gradient_releases` — bit for bit its own :func:`.mechanism.gradient_release`: its sum on its own
prepared rows (the same two products; the elementwise steps between them on the nodes' concatenated margins), its
noise from its own generator, its own event, in node order.

Anything else — a range round, the first gradient round (the bounds are checked and the rows prepared there), a
message the node would refuse, nodes with different constants — is not taken (None): the backend then steps the
nodes one by one, and a refusal names the node that refuses.
"""

from __future__ import annotations

import weakref

import numpy as np

from . import mechanism as mech
from .node import GossipInbox, ModelBroadcast, NodeState, gossip_mix, heavy_ball, tail_mean

#: the NodeConfig fields every node of a stacked round must share (the run's public constants)
SHARED = ("max_degree", "n_nodes", "n_total", "rounds", "range_rounds", "noise_multiplier", "step", "momentum",
          "ridge", "row_clip", "average_from")


_CONSTANTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _constants(cfg) -> tuple:
    """A node's public constants (``SHARED``, its column count, whether its bounds were declared), read once."""
    out = _CONSTANTS.get(cfg)
    if out is None:
        out = _CONSTANTS[cfg] = tuple(getattr(cfg, k) for k in SHARED) + (cfg.X.shape[1], cfg.bounds is None)
    return out


_STACKED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _stacked(cfgs) -> tuple:
    """Whether the nodes share the run's public constants (``SHARED``, column count, declared bounds or not), their
    names, labels concatenated in node order (:func:`.mechanism.gradient_releases`) and degrees as an (N, 1)
    column: made once per run, remembered with the first node's config for exactly these configs (a config is
    frozen)."""
    ids = tuple(map(id, cfgs))
    hit = _STACKED.get(cfgs[0])
    if hit is None or hit[0] != ids:
        shared = _constants(cfgs[0])
        hit = _STACKED[cfgs[0]] = (ids, all(_constants(cfg) == shared for cfg in cfgs), [cfg.name for cfg in cfgs],
                                   np.concatenate([cfg.y for cfg in cfgs]),
                                   np.array([float(cfg.degree) for cfg in cfgs])[:, None])
    return hit[1:]


def _gradient_round(cfgs, states, inboxes) -> int | None:
    """The gradient round s ≥ 1 every node is in, if they all are in the same one with valid messages and the run's
    shared constants; else None."""
    c0, r = cfgs[0], states[0].round
    s = r - (0 if c0.bounds is not None else c0.range_rounds)
    if c0.loss != "logistic":  # the other targets (targets.py) step node by node
        return None
    if not 1 <= s < c0.rounds or not _stacked(cfgs)[0]:
        return None
    no_avg = states[0].avg is None
    for st, ib in zip(states, inboxes):
        if not isinstance(ib, GossipInbox) or st.round != r or st.lo is None or (st.avg is None) != no_avg:
            return None
    return s


def nodes_step(cfgs, states, inboxes, rngs):
    """Gradient round s ≥ 1 of every node (module docstring): [(state, outbox, events)] in node order, or None."""
    s = _gradient_round(cfgs, states, inboxes)
    if s is None:
        return None
    c0, r = cfgs[0], states[0].round
    try:
        S = np.array([np.asarray(ib.neighbour_sum, dtype=np.float64) for ib in inboxes], dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if S.shape != (len(cfgs), c0.X.shape[1] + 1) or not np.isfinite(S).all():
        return None  # refused by the node it belongs to, one by one
    W0 = np.array([st.w for st in states])  # (N, d + 1) copies of the nodes' vectors
    V0 = np.array([st.v for st in states])
    _, names, y, degree = _stacked(cfgs)
    w_mix = gossip_mix(W0, S, degree, c0.max_degree)
    Xts = [mech.column_major(st.Xt) for st in states]
    G, events = mech.gradient_releases(names, r + 1, Xts, y, c0.row_clip, w_mix,
                                       c0.noise_multiplier, rngs)
    W, V = heavy_ball(c0, w_mix, V0, G)  # the shared constants (SHARED) are c0's
    avg = tail_mean(None if states[0].avg is None else np.array([st.avg for st in states]), W, s - c0.average_from)
    return [(NodeState(r + 1, W[i], V[i], st.lo, st.hi, Xts[i], None if avg is None else avg[i]), ModelBroadcast(W[i]),
             events[i]) for i, st in enumerate(states)]
