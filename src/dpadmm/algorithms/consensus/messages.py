"""Graph consensus's typed records: the messages between a block of nodes and the router, the block's and the
router's configurations and states, and the ``Setup`` view of ``setup_block``'s arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .schedules import LOGISTIC_C1
from .solver import Curvature

# ----------------------------------------------------------------------------- messages
class NeighbourMessage(NamedTuple):
    """Router → block: for every node k of the block, ``S_k(t) = Σ_{j∈V_k} f_j(t)`` (what its neighbours broadcast)."""

    round: int
    neighbour_sum: np.ndarray  # (K, d)


class ModelMessage(NamedTuple):
    """Block → router: every node's broadcast f_k(t+1) (noisy under PVP). Nothing else leaves a node."""

    f: np.ndarray  # (K, d)


@dataclass(frozen=True, eq=False)
class BlockConfig:
    """Everything a block of K nodes holds. X, y and the penalty schedule η never leave the nodes."""

    names: tuple[str, ...]
    X: np.ndarray  # (K, B_max, d) zero-padded
    y: np.ndarray  # (K, B_max), 0 on padding
    w: np.ndarray  # (K, B_max): C/B_k on real rows, 0 on padding
    B: np.ndarray  # (K,)
    degree: np.ndarray  # (K,)
    C: float
    reg: float  # ρ/N
    eta: np.ndarray  # (K, T)
    theta: np.ndarray  # (K, T)
    alpha: np.ndarray  # (K, T); inf = no noise
    perturbation: str = "none"
    c1: float = LOGISTIC_C1
    newton_tol: float = 1e-10
    newton_max_iter: int = 500
    bound: Curvature | None = None  # eigendecomposed curvature bound c1 Σ w x xᵀ, computed once at setup
    Z: np.ndarray | None = None  # (K, B_max, d) rotated_data(X, y, bound): the solver's copy of the data


class BlockState(NamedTuple):
    round: int
    f: np.ndarray  # (K, d): f_k(t) as broadcast
    lam: np.ndarray  # (K, d): λ_k(t−1)
    newton_iterations: int = 0  # Σ over rounds of the most local iterations any node of the block needed


@dataclass(frozen=True, eq=False)
class RouterConfig:
    """The network: adjacency A (CSR, N × N) and which block holds which nodes (global indices)."""

    A: Any
    blocks: tuple[tuple[str, np.ndarray], ...]
    n_nodes: int
    dim: int
    tol: float = 0.0
    record_path: bool = False


class RouterState(NamedTuple):
    round: int
    F: np.ndarray  # (N, d) latest broadcasts
    change: float
    path: tuple = ()  # F(1), F(2), … when record_path (an eavesdropper's view)


class ConsensusOptions(NamedTuple):
    """The run's public constants a block of K nodes is set up with (the coordinator's choices, sent field by field and
    checked at the party, :func:`dpadmm.protocol.check_setup`; its policy checks the configuration made from them,
    :mod:`.policy`). A mapping of these fields is built into the record by name. Per-node arrays have one row per
    node of the block, in the order of ``Setup.names``; schedules one column per round."""

    #: V_i: each node's degree, shape (K,)
    degree: np.ndarray | list
    #: C: the loss weight of the objective C/B_i Σ ℒ [Zhang, eq. 6]
    C: float
    #: ρ/N: the regulariser weight (``reg_weight`` / N in the estimator)
    reg: float
    #: η_i(t): the step sizes, shape (K, T)
    eta: np.ndarray | list
    #: θ_i(t): the penalty schedule, shape (K, T)
    theta: np.ndarray | list
    #: α_i(t): the noise rates of the Gamma-norm perturbation, shape (K, T) (inf: no noise)
    alpha: np.ndarray | list
    #: ``"none"`` (non-private), ``"pp"`` (penalty perturbation), ``"dvp"`` (dual variable) or ``"pvp"`` (primal)
    perturbation: str = "none"
    #: the local Newton solve's tolerance and iteration cap (the bound is about the exact minimiser)
    newton_tol: float = 1e-10
    newton_max_iter: int = 500


class Setup(NamedTuple):
    """``setup_block``'s arguments by name (the Setup message carries them by name)."""

    names: Any  # the block's node names
    X_list: Any  # one feature block per node (PartyData references to the nodes' own files, or arrays)
    y_list: Any  # one ±1 label vector per node
    options: ConsensusOptions


class BaselineSetup(NamedTuple):
    """``baseline.setup_node``'s arguments by name: the node's rows and labels and its two ε's."""

    name: str
    X: Any  # a PartyData reference to the node's own file, or an array in a simulation
    y: Any
    eps_count: float
    eps_compare: float
