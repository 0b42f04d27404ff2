"""The gossip protocol as data: what a node started for ``noisy-gradient-gossip`` will do, and nothing else.

Peer to peer (``party serve --neighbour``) with declared column bounds: a node then sums its neighbours'
broadcasts itself (:func:`.node.peer_inbox`); the DP column range needs the coordinator's pooled counts."""

from __future__ import annotations

from ...protocol import Protocol
from ...protocol.registry import register
from ..consensus.node import describe_node_data, load_node_data
from .batch import nodes_step
from .node import (GossipInbox, ModelBroadcast, NodeState, RangeCounts, RangeRequest, node_diagnostics, node_model,
                   node_step, peer_broadcast, peer_inbox, setup_node)
from .messages import GossipOptions, Setup
from .policy import GOSSIP
from .validation import ValidationRelease, ValidationRequest


def _is_private(cfg) -> bool:
    return cfg.noise_multiplier > 0


PROTOCOL = register(Protocol("noisy-gradient-gossip", setup_node, node_step, node_diagnostics, handlers={},
                    types=(RangeRequest, RangeCounts, GossipInbox, ModelBroadcast, NodeState, GossipOptions,
                           ValidationRequest, ValidationRelease), load=load_node_data,
                    describe=describe_node_data, model=node_model, private=_is_private, data_fields=("X", "y"), setup_type=Setup,
                    policy=GOSSIP, peer_to_peer=(peer_inbox, peer_broadcast), batch_step=nodes_step))
