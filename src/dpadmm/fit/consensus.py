"""The runs of a consensus fit by M-ADMM [Zhang]: the node blocks → the fit runner → the router's final state; and
the DP base-rate fallback's two rounds (:mod:`dpadmm.algorithms.consensus.baseline`).

The driver of :mod:`dpadmm.algorithms.consensus` (it runs the protocols on a backend, so it sits above the
algorithm folders, below :class:`dpadmm.estimators.ConsensusLogisticRegression`; the accounting is
:mod:`dpadmm.algorithms.consensus.report`'s).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import engine
from ..algorithms.consensus import baseline as cb
from ..algorithms.consensus import messages as consensus_messages, router as consensus_router
from ..algorithms.consensus.messages import Setup
from ..algorithms.consensus.protocol import BASELINE_PROTOCOL as BASELINE
from ..algorithms.consensus.protocol import PROTOCOL as CONSENSUS
from ..backends import InProcessBackend, PartySpec
from ..exceptions import InvalidParameterError
from . import runner


def run_madmm(Xs, ys, G, A, V, *, eta, theta, alpha, C: float, reg: float, perturbation: str, newton_tol: float,
              batch: bool, tol: float, record_path: bool, backend, noise_seed, monitor: bool, callbacks: Sequence = (),
              fallback_epsilon: float | None = None) -> engine.RunResult:
    """T rounds of M-ADMM over the graph ``G`` (adjacency ``A``, degrees ``V``): all nodes as one stacked block
    (``batch``) or one party per node. ``fallback_epsilon``: the run will be followed by the DP base-rate fallback
    (a deployment checks now that every node serves it)."""
    N = len(Xs)
    T = eta.shape[1]
    opts = {"C": C, "reg": reg, "perturbation": perturbation, "newton_tol": float(newton_tol)}
    groups = [("nodes", np.arange(N))] if batch else [(f"node{i}", np.array([i])) for i in range(N)]
    specs = []
    for name, idx in groups:
        o = dict(opts, degree=V[idx], eta=eta[idx], theta=theta[idx], alpha=alpha[idx])
        setup = Setup(names=[f"node{i}" for i in idx], X_list=[Xs[i] for i in idx], y_list=[ys[i] for i in idx],
                      options=o)
        specs.append(PartySpec.of(CONSENSUS, name, setup, owner=name,
                                  streams=tuple(int(i) for i in idx) if len(groups) == 1 and N > 1 else ()))
    hub_cfg = consensus_messages.RouterConfig(A=A, blocks=tuple(groups), n_nodes=N, dim=Xs[0].shape[1], tol=tol,
                              record_path=bool(record_path))
    hub = engine.Hub(hub_cfg, consensus_router.init_router, consensus_router.router_step, consensus_router.router_metrics)
    if perturbation in ("pp", "dvp") and fallback_epsilon:  # a simulation's require_protocol: no-op
        backend.require_protocol(BASELINE.name, [name for name, _ in groups],
                                 f" (the DP base-rate fallback, fallback_epsilon={fallback_epsilon:g}; "
                                 "fallback_epsilon=0 turns it off)")
    p2p = {}
    if backend.peer_to_peer:  # nodes exchange with their neighbours; each checks the graph
        if len(groups) != N:
            raise InvalidParameterError("a peer-to-peer run needs one node per party (batch=False).")
        p2p["neighbours"] = {f"node{i}": [f"node{j}" for j in G.neighbors(i)] for i in range(N)}
    # node setup (curvature factorisations) runs under the engine's BLAS cap
    return runner.run(backend, specs, hub, rounds=T, noise_seed=noise_seed, callbacks=callbacks, monitor=monitor,
                      stop_on_convergence=perturbation == "none", **p2p).result


def run_fallback(Xs, ys, coef, *, fallback_epsilon: float, noise_seed, backend) -> engine.RunResult:
    """The DP base rate and the accounted comparison of ``coef`` with it (``algorithms.consensus_baseline``).

    Over gRPC the nodes release their two numbers as that protocol's declared round messages (each node
    serving ``--protocol consensus-baseline`` prices them with its own policy and ledger); elsewhere the
    nodes' two steps run in-process (each node's noise from its own generator)."""
    eps_b = eps_c = 0.5 * float(fallback_epsilon)
    names = [f"node{i}" for i in range(len(Xs))]
    node = BASELINE.setup_type  # setup_node's arguments by name
    specs = [PartySpec.of(BASELINE, nm, node(name=nm, X=x, y=yv, eps_count=eps_b, eps_compare=eps_c), owner=nm)
             for nm, x, yv in zip(names, Xs, ys)]
    n = int(sum(len(v) for v in ys))
    hub = engine.Hub(cb.AssemblerConfig(tuple(names), n, coef.copy()), cb.init_assembler, cb.assembler_step)
    fseed = None if noise_seed is None else int(np.random.SeedSequence([int(noise_seed), 13]).generate_state(1)[0])
    # each node computes two numbers on its own records (noise from the node's generator)
    return runner.run(backend.routed() or InProcessBackend(), specs, hub, rounds=2, noise_seed=fseed, monitor=False,
                      stop_on_convergence=False).result


__all__ = ["run_fallback", "run_madmm"]
