"""One M-ADMM fit [Zhang]: parameters and node data → the schedules and Alg. 1's conditions → the node blocks
through the fit runner → the DP base-rate fallback's two rounds (:mod:`.baseline`) → :class:`FitResult` (the node
models, the handed-over model, history, privacy report).

The folder's driver: it runs the protocols on a backend, so it may import the engine, the backends and the fit
runner (``tests/unit/test_architecture.py`` allows that to ``driver`` modules only); the accounting is
:mod:`.report`'s."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ... import engine
from ..._history import History
from ...backends import InProcessBackend, PartySpec, get_backend
from ...data.graphs import Nodes, adjacency
from ...exceptions import InvalidParameterError, PrivacyPreconditionError
from ...fit import runner
from ...privacy.ledger import PrivacyReport
from ...privacy.threats import finish
from . import baseline as cb
from . import messages as consensus_messages, router as consensus_router, schedules as gc
from .messages import ConsensusOptions, Setup
from .params import MADMMParams
from .protocol import BASELINE_PROTOCOL as BASELINE
from .protocol import PROTOCOL as CONSENSUS
from .report import pp_assumptions, with_fallback, zhang_privacy_curve, zhang_report


@dataclass
class FitResult:
    """An M-ADMM fit: the node models ``coefs`` (N, d), the handed-over ``coef``/``intercept`` (their mean and 0, or
    0 and the DP base rate's logit), the fallback's outcome (``handed_over``, ``dp_base_rate``, ``comparison``,
    ``comparison_threshold``, ``margin_clip``), the run's record and the privacy report (None without noise)."""

    coefs: np.ndarray
    coef: np.ndarray
    intercept: float
    history: History
    report: PrivacyReport | None
    rounds: int
    converged: bool
    noise_source: str
    node_sizes: np.ndarray
    degrees: np.ndarray
    path: np.ndarray | None
    schedules: dict
    handed_over: str | None = None
    dp_base_rate: float | None = None
    comparison: float | None = None
    comparison_threshold: float | None = None
    margin_clip: float | None = None
    ledgers: dict = field(default_factory=dict)


def run_madmm(Xs, ys, G, A, V, *, eta, theta, alpha, C: float, reg: float, perturbation: str, newton_tol: float,
              batch: bool, tol: float, record_path: bool, backend, noise_seed, monitor: bool, callbacks: Sequence = (),
              fallback_epsilon: float | None = None) -> engine.RunResult:
    """T rounds of M-ADMM over the graph ``G`` (adjacency ``A``, degrees ``V``): all nodes as one stacked block
    (``batch``) or one party per node. ``fallback_epsilon``: the run will be followed by the DP base-rate fallback
    (a deployment checks now that every node serves it)."""
    N = len(Xs)
    T = eta.shape[1]
    groups = [("nodes", np.arange(N))] if batch else [(f"node{i}", np.array([i])) for i in range(N)]
    specs = []
    for name, idx in groups:
        o = ConsensusOptions(degree=V[idx], C=float(C), reg=float(reg), eta=eta[idx], theta=theta[idx], alpha=alpha[idx],
                             perturbation=perturbation, newton_tol=float(newton_tol))
        setup = Setup(names=[f"node{i}" for i in idx], X_list=[Xs[i] for i in idx], y_list=[ys[i] for i in idx],
                      options=o)
        specs.append(PartySpec.of(CONSENSUS, name, setup, owner=name,
                                  streams=tuple(int(i) for i in idx) if len(groups) == 1 and N > 1 else ()))
    hub_cfg = consensus_messages.RouterConfig(A=A, blocks=tuple(groups), n_nodes=N, dim=Xs[0].shape[1], tol=tol,
                                              record_path=bool(record_path))
    hub = engine.Hub(hub_cfg, consensus_router.init_router, consensus_router.router_step,
                     consensus_router.router_metrics)
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
    """The DP base rate and the accounted comparison of ``coef`` with it (:mod:`.baseline`).

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


def fit(params: MADMMParams, data: Nodes, backend=None, *, callbacks: Sequence = (),
        noise_seed: int | None = None) -> FitResult:
    """M-ADMM over ``data`` (node datasets, labels ±1, its connected graph) under ``params``; with ``pp``/``dvp``
    and a ``fallback_epsilon``, the DP base-rate fallback decides what is handed over. Rows of norm above 1 are
    refused in a private fit unless ``normalize`` (Thm 4.1's precondition)."""
    Xs, ys, G = list(data.Xs), list(data.ys), data.graph
    N, private, p = len(Xs), params.private, params.perturbation
    monitor = (not private) if params.monitor is None else bool(params.monitor)
    norms = np.array([float(np.max(np.linalg.norm(x, axis=1))) for x in Xs])
    if private and norms.max() > 1.0 + 1e-9 and not params.normalize:
        raise PrivacyPreconditionError(
            f"[Zhang, Thm 4.1] needs ||x||_2 <= 1 for every row, got max ||x||_2 = {norms.max():.4g}; "
            "normalise the rows (normalize=True).")
    if params.normalize:
        Xs = [x / np.maximum(np.linalg.norm(x, axis=1), 1.0)[:, None] for x in Xs]
    A, V = adjacency(G)
    eta, theta, alpha = params.tables(N)
    gc.check_convergence_condition(eta, theta)
    B = np.array([x.shape[0] for x in Xs])
    C, reg = float(params.C), float(params.reg_weight) / N
    assumptions, notes = [], []
    if p in ("pp", "dvp"):
        gc.check_privacy_condition(B=B, degree=V, C=C, reg=reg, theta=theta, eta=eta)
        assumptions = pp_assumptions(normalized=bool(params.normalize), max_row_norm=float(norms.max()))
        if monitor:
            notes.append("monitor=True: monitoring values (train_loss, objective) were computed from the nodes' "
                         "data and left them un-noised; they are NOT covered by the guarantee")
    elif p == "pvp":
        notes.append("primal variable perturbation is not covered by [Zhang, Thm 4.1]: no bound (epsilon = inf)")
    backend = get_backend(backend if backend is not None else "inprocess")
    res = run_madmm(Xs, ys, G, A, V, eta=eta, theta=theta, alpha=alpha, C=C, reg=reg, perturbation=p,
                    newton_tol=params.newton_tol, batch=params.batch, tol=0.0 if private else float(params.tol),
                    record_path=params.record_path, backend=backend, noise_seed=noise_seed, monitor=monitor,
                    callbacks=callbacks, fallback_epsilon=params.fallback_epsilon)
    F = res.hub_state.F
    out = FitResult(F.copy(), F.mean(axis=0), 0.0, History(res.history, monitored=monitor, private=private), None,
                    res.rounds, res.converged, res.noise_source, B, V,
                    np.stack(res.hub_state.path) if params.record_path and res.hub_state.path else None,
                    {"eta": eta, "theta": theta, "alpha": alpha})
    if p in ("pp", "dvp"):
        rep = zhang_report(res.ledger, rounds=res.rounds, assumptions=assumptions, notes=notes)
        if params.fallback_epsilon:  # basic composition: P_i(T) + ε_b + ε_c per node
            _hand_over(out, Xs, ys, float(params.fallback_epsilon), noise_seed, backend)
            rep = with_fallback(rep, out.ledgers["fallback"], fallback_epsilon=float(params.fallback_epsilon),
                                handed_over=out.handed_over)
        out.report = finish(rep, threat_model="consensus", noise_source=res.noise_source)
        out.history["privacy_bound"] = zhang_privacy_curve(res.ledger, res.rounds)[1].tolist()
    elif p == "pvp":
        out.report = finish(zhang_report(res.ledger, rounds=res.rounds, notes=notes,
                                         mechanism="primal variable perturbation (noise on f_i before broadcast)"),
                            threat_model="consensus", noise_source=res.noise_source)
        out.history["privacy_bound"] = [math.inf] * res.rounds
    else:
        out.history["privacy_bound"] = [math.inf] * res.rounds
        if params.tol > 0 and not res.converged:
            warnings.warn(f"M-ADMM did not reach tol={params.tol} in max_iter={params.max_iter} iterations; "
                          "increase max_iter.", UserWarning, stacklevel=3)
    out.ledgers["madmm"] = res.ledger
    return out


def _hand_over(out: FitResult, Xs, ys, fallback_epsilon: float, noise_seed, backend) -> None:
    """The DP base rate and the accounted comparison (:func:`run_fallback`); sets the hand-over on ``out``."""
    res = run_fallback(Xs, ys, out.coef, fallback_epsilon=fallback_epsilon, noise_seed=noise_seed, backend=backend)
    st = res.hub_state
    out.dp_base_rate, out.comparison = float(st.p), float(st.difference)
    out.comparison_threshold = cb.threshold(len(Xs), 0.5 * fallback_epsilon)
    if out.comparison < out.comparison_threshold:
        out.handed_over, out.margin_clip = "model", cb.MARGIN_CLIP
    else:
        out.handed_over = "dp-base-rate"
        out.coef = np.zeros_like(out.coef)
        out.intercept = float(math.log(out.dp_base_rate / (1.0 - out.dp_base_rate)))
    out.ledgers["fallback"] = res.ledger


__all__ = ["FitResult", "fit", "run_fallback", "run_madmm"]
