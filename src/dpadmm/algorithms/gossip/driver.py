"""One gossip fit: parameters and node data → the plan (ε → schedule and noise, :func:`.params.plan`) → typed
node setups → a backend through the fit runner → :class:`FitResult` (the nodes' models, history, privacy report).

The folder's driver: it runs the protocol on a backend, so it may import the engine, the backends and the fit
runner (``tests/unit/test_architecture.py`` allows that to ``driver`` modules only; nothing else in the folder
imports it)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ... import engine
from ..._history import History
from ...backends import InProcessBackend, PartySpec
from ...data.graphs import Nodes, adjacency
from ...exceptions import InvalidParameterError, ProtocolError
from ...fit import runner
from ...privacy.ledger import PrivacyReport
from ...privacy.threats import finish
from . import choice as node_choice
from . import mechanism as mech
from . import validation as val
from .messages import GossipOptions
from .router import RouterConfig, init_router, router_converged, router_metrics, router_step
from .params import GossipParams, plan
from .protocol import PROTOCOL as GOSSIP_PROTOCOL
from .report import gossip_report

RECALIBRATION_NOTE = ("each node's recalibrated model (node_coefs_; the CLI's node_models.npz, or recalibrated in a "
                      "deployed node's model.npz) is a function of its own rows that this report does not cover: the node's to "
                      "use, not to publish; the consensus model (coef_, coefs_) is what the report covers")

NO_VALIDATION = ("no DP validation of the consensus model against the DP base rate: the nodes did not run its stage; "
                 "its slice of epsilon (validation_share) was not spent, the epsilon above is the rounds', and the "
                 "consensus model is handed over as is")


@dataclass
class FitResult:
    """A gossip fit: each node's model ``F`` (N, d + 1: the mean of its tail broadcasts, intercept last), the column
    map (``lo``, ``hi``, ``row_clip``), the plan's noise multiplier and schedule, the privacy report (None without
    ε), the history, and each node's own choice when the fit recalibrated (``node_models``, ``calibration``,
    ``choices``, ``choice_cv``, ``reasons``, ``spaces``; ``None``/``()`` otherwise)."""

    F: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    row_clip: float
    noise_multiplier: float
    report: PrivacyReport | None
    history: History
    rounds: int  # every round: range rounds + gradient rounds
    noise_source: str
    quantile: float | None  # the DP range's quantile level (None with declared bounds)
    path: np.ndarray | None  # (T, d + 1) the mean broadcast model after every gradient round
    ledger: object
    regime: str  # the schedule's regime (schedule.default_schedule)
    momentum: float  # β of the heavy-ball steps
    bounds_source: str  # "declared", "dp-estimate" or "exact (non-private)"
    degrees: np.ndarray
    node_sizes: np.ndarray
    node_models: np.ndarray | None = None  # (N, d + 1) each node's model recalibrated on its own rows
    calibration: np.ndarray | None = None  # (N, 2) each node's Platt (a_i, b_i)
    # the DP base rate: the pooled noisy positive share of the first range round, clipped as for the starting
    # intercept (a post-processing of released counts; None without range rounds or in a non-private run)
    base_rate: float | None = None
    choices: tuple = ()  # each node's choice (choice.py: local cross-validation on its own rows)
    choice_cv: np.ndarray | None = None  # (N, 3) the held-out losses it judged by
    reasons: tuple = ()
    spaces: tuple = ()  # each node model's rows: "prepared" or "raw"
    target_bounds: tuple | None = None  # regression: the label range (declared, or the DP range's last column)
    validation: val.Validation | None = None  # the shared model's DP comparison with the DP base rate (validation.py)


def fit(params: GossipParams, data: Nodes, backend=None, *, callbacks: Sequence = (), noise_seed: int | None = None,
        checkpoint_dir=None, checkpoint_every: int | None = None, resume_from=None,
        validation_at_nodes: bool | None = None) -> FitResult:
    """Run the protocol on ``data`` (node datasets, labels ±1, over its connected graph) under ``params``.

    ``params.epsilon=None``: no noise (without ``bounds`` the column bounds then come from the exact counts of the
    same bisection). A peer-to-peer backend needs declared ``bounds`` (the DP column range pools every node's
    counts through the coordinator). ``checkpoint_dir``/``checkpoint_every``/``resume_from``: the engine's
    checkpoints (every release is a round, so a resumed run releases nothing twice). With ``recalibrate`` each
    node then chooses, by cross-validation on its own rows, between its consensus model recalibrated on them, its
    own model and its own base rate (:mod:`.choice`: nothing released, no ε), computed here as node i computes it.

    The DP validation (:mod:`.validation`, ``params.validates``): with the rows here, each node's step on its rows
    (:func:`.validation.validate`, its own generator); ``validation_at_nodes`` (None: whenever the rows are not here —
    a deployed run, routed or peer to peer) makes it the nodes' declared stage instead: two more rounds (count, then
    compare) declared at Setup and priced by each node's policy, stepped by the backend after the last gradient round,
    each node answering on its own rows under its own ledger (:func:`.validation.answer`)."""
    Xs, ys, G = list(data.Xs), list(data.ys), data.graph
    N, d = len(Xs), int(Xs[0].shape[1])
    n = int(sum(x.shape[0] for x in Xs))
    bounds = params.column_bounds(d)
    private = params.private
    monitor = (not private) if params.monitor is None else bool(params.monitor)
    recalibrate = private if params.recalibrate is None else bool(params.recalibrate)
    A, V = adjacency(G)
    here = all(isinstance(x, np.ndarray) for x in Xs)  # the rows are here (a simulation)
    at_nodes = params.validates and (not here if validation_at_nodes is None else bool(validation_at_nodes))
    validate = params.validates and here and not at_nodes
    p = plan(params, n, d, N)  # the same plan wherever the rows live: a deployment's rounds equal the simulation's
    K, R = p.range_rounds, p.row_clip
    names = tuple(f"node{i}" for i in range(N))
    backend = backend if backend is not None else InProcessBackend()
    p2p = {}
    if getattr(backend, "peer_to_peer", False):  # nodes exchange with their neighbours; each checks the graph
        if bounds is None:
            raise InvalidParameterError("a peer-to-peer gossip run needs declared column bounds (bounds=, --bounds "
                                        "FILE): the DP column range pools every node's counts through the coordinator.")
        p2p["neighbours"] = {names[i]: [names[j] for j in G.neighbors(i)] for i in range(N)}
    opts = dict(max_degree=int(V.max()), n_nodes=N, n_total=n, rounds=p.rounds, range_rounds=K,
                noise_multiplier=p.noise_multiplier, step=p.step, momentum=p.momentum, ridge=float(params.ridge),
                row_clip=R, average_from=p.average_from, bounds=bounds)
    eps_v = val.slice_epsilon(params.epsilon, params.validation_share, n, N, d) if params.validates else 0.0
    if at_nodes:  # the nodes' declared validation stage: (ε_b, ε_c), two rounds after the last gradient round
        opts["validation"] = val.split(eps_v, n, N)
    tg = params.target
    if tg.loss != "logistic":  # the other targets' options (a binary run's Setup is unchanged)
        opts.update(loss=tg.loss, classes=int(tg.classes), huber_delta=float(tg.huber_delta),
                    target_bounds=None if params.target_bounds is None else tuple(map(float, params.target_bounds)))
    label_range = tg.regression and params.target_bounds is None
    specs = [PartySpec.of(GOSSIP_PROTOCOL, nm_, GOSSIP_PROTOCOL.setup_type(name=nm_, X=Xs[i], y=ys[i],
                                                        options=GossipOptions(degree=int(V[i]), **opts)), owner=nm_)
             for i, nm_ in enumerate(names)]
    pos_sd = math.sqrt(N) * p.noise_multiplier * mech.range_sensitivity(d, labels=True)
    hub = engine.Hub(RouterConfig(A, names, d, n, K, p.quantile, bounds, p.average_from, pos_sd,
                                  label_range and K > 0, tg.outputs, 0.0 if private else float(params.tol)),
                     init_router, router_step, router_metrics, random=False,  # the router draws nothing
                     converged=router_converged)

    def prepared_rows(b, _):
        """In-process simulation parties: each node's own prepared rows (its state), for its recalibration."""
        if not (recalibrate and b.collects_models):
            return None
        try:
            rows = [getattr(b.local_state(nm), "Xt", None) for nm in names]
        except ProtocolError:  # a party under its operator's policy keeps its rows
            return None
        return rows if all(r is not None for r in rows) else None

    def after(b, result):
        """The nodes' prepared rows (simulation) and, with the validation at the nodes, its stage on the open backend."""
        st = result.hub_state
        if not at_nodes:
            return prepared_rows(b, result), None
        w = (st.F if st.avg is None else st.avg).mean(axis=0)
        prior = None if st.positives is None else (st.positives, pos_sd)
        rounds_ = itertools.count(result.rounds)  # the next rounds (the nodes refuse any beyond the two declared)

        def ask(requests):  # one declared round at every node: {name: (release, events)}
            return b.step(requests, next(rounds_))

        checked = val.released_once(names, None, None, w, epsilon=eps_v, rngs=None, ledger=result.ledger, prior=prior,
                                    checkpoint_dir=checkpoint_dir, resume_from=resume_from,
                                    compute=lambda led: val.combine(ask, names, n, w, epsilon=eps_v, ledger=led,
                                                                    prior=prior))
        return prepared_rows(b, result), checked

    fitted = runner.run(backend, specs, hub, rounds=K + p.rounds, noise_seed=noise_seed, callbacks=callbacks,
                        monitor=monitor, stop_on_convergence=not private and params.tol > 0, checkpoint_dir=checkpoint_dir,
                        checkpoint_every=checkpoint_every, resume_from=resume_from, after=after,
                        declared_rounds=K + p.rounds + (2 if at_nodes else 0), **p2p)
    res = fitted.result
    rows, checked = fitted.after
    st = res.hub_state
    local = recalibrate and tg.loss == "logistic" and all(isinstance(x, np.ndarray) for x in Xs)  # the rows are here (not the nodes' files)
    F = (st.F if st.avg is None else st.avg).copy()
    lo, hi = np.asarray(st.lo, float), np.asarray(st.hi, float)
    Xts = None
    if local or validate:  # the nodes' rows, prepared (node i's own step on its own rows, after the last round)
        Xts = rows or [mech.prepare(Xs[i], lo, hi, R) for i in range(N)]
    if validate:  # each node's noisy loss difference on its own rows (validation.py), recorded before the report
        checked = val.released_once(names, Xts, ys, F.mean(axis=0),
                                    epsilon=eps_v,
                                    prior=None if st.positives is None else (st.positives, pos_sd),
                                    rngs=val.node_generators(noise_seed, N), ledger=res.ledger,
                                    checkpoint_dir=checkpoint_dir, resume_from=resume_from)
    report = None
    if private:
        src = ("declared by the operator" if bounds is not None else
               f"DP estimate: pooled noisy counts, {K} bisection rounds, quantiles {p.quantile:.3g} and "
               f"{1 - p.quantile:.3g} (search range ±{mech.SEARCH_LIMIT:g}), paid from the same budget")
        report = finish(gossip_report(res.ledger, delta=params.delta, rounds=p.rounds, range_rounds=K,
                                      noise_multiplier=p.noise_multiplier, bounds_source=src,
                                      notes=((RECALIBRATION_NOTE,) if local else ()) + (() if checked is not None or not
                                                                                         params.validates else (NO_VALIDATION,)),
                                      target=None if tg.loss == "logistic" else tg, validation=checked),
                        threat_model="consensus", noise_source=res.noise_source)
    own = []
    if local:  # nothing leaves the node (node.node_model computes the same at a deployed node)
        own = [node_choice.choose(Xts[i], ys[i], F[i], X_raw=Xs[i]) for i in range(N)]
    return FitResult(
        F, lo, hi, R, p.noise_multiplier, report, History(res.history, monitored=monitor, private=private),
        res.rounds, res.noise_source, None if bounds is not None else p.quantile,
        np.asarray(st.path) if st.path else None, res.ledger, p.regime, float(p.momentum),
        "declared" if bounds is not None else ("dp-estimate" if private else "exact (non-private)"), V,
        np.array([x.shape[0] for x in Xs]),
        np.array([c.model for c in own]) if own else None, np.array([(c.a, c.b) for c in own]) if own else None,
        1.0 / (1.0 + math.exp(-st.intercept0)) if private and K > 0 else None,
        tuple(c.choice for c in own), np.array([c.cv for c in own]) if own else None, tuple(c.reason for c in own),
        tuple(c.space for c in own),
        st.target if label_range else (None if params.target_bounds is None else tuple(map(float, params.target_bounds))),
        checked)


__all__ = ["FitResult", "NO_VALIDATION", "RECALIBRATION_NOTE", "fit"]
