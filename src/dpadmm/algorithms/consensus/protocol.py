"""The consensus folder's declarations, registered by name: ``graph-consensus`` (a block of nodes of M-ADMM
with penalty perturbation [Zhang]; one node per party peer to peer) and ``consensus-baseline`` (a node of the
non-iterative baseline: a noisy count and one noisy comparison).

Nothing in this folder imports this module: it sits on top, and :mod:`dpadmm.algorithms` imports it so
that the registry (:mod:`dpadmm.protocol.registry`) knows both names.
"""

from __future__ import annotations

from ...protocol.registry import register
from ...protocol.spec import Protocol
from . import baseline
from .messages import BaselineSetup, BlockState, ConsensusOptions, ModelMessage, NeighbourMessage, Setup
from .node import (
    block_coefs, block_diagnostics, block_step, describe_node_data, is_private, load_node_data, peer_broadcast,
    peer_inbox, setup_block,
)
from .policy import BASELINE, CONSENSUS

PROTOCOL = register(Protocol(
    "graph-consensus", setup_block, block_step, block_diagnostics, handlers={},
    types=(NeighbourMessage, ModelMessage, BlockState, ConsensusOptions), load=load_node_data,
    describe=describe_node_data, model=block_coefs, private=is_private, data_fields=("X_list", "y_list"),
    policy=CONSENSUS, peer_to_peer=(peer_inbox, peer_broadcast), setup_type=Setup))

BASELINE_PROTOCOL = register(Protocol(
    "consensus-baseline", baseline.setup_node, baseline.node_step, None, handlers={},
    types=(baseline.Request, baseline.Release), load=load_node_data, describe=describe_node_data,
    private=baseline.is_private, data_fields=("X", "y"), policy=BASELINE,
    setup_type=BaselineSetup))
