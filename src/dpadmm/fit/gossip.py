"""One gossip run: typed node setups → backend → engine → the averaged model and its privacy report.

The driver of :mod:`dpadmm.algorithms.gossip` (it runs the protocol on a backend, so it sits above the algorithm
folders, beside the estimator that calls it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .. import engine
from ..algorithms.gossip import choice as node_choice
from ..algorithms.gossip import mechanism as mech
from ..algorithms.gossip.node import RouterConfig, init_router, router_metrics, router_step, step_size
from ..algorithms.gossip.protocol import PROTOCOL as GOSSIP_PROTOCOL
from ..algorithms.gossip.report import gossip_report, noise_multiplier_for
from ..algorithms.gossip.schedule import (DEFAULT_DELTA, DEFAULT_RANGE_ROUNDS, DEFAULT_RIDGE,
                                          average_from, default_schedule)
from .._history import History
from .._validation import check_int, check_positive, check_random_state, noise_seed
from ..backends import InProcessBackend, PartySpec, get_backend
from ..data.graphs import adjacency, make_graph
from ..exceptions import InvalidParameterError
from ..privacy.ledger import PrivacyReport
from ..privacy.threats import finish
from . import runner


RECALIBRATION_NOTE = ("each node's recalibrated model (node_coefs_; the CLI's node_models.npz, or recalibrated in a "
                      "deployed node's model.npz) is a function of its own rows that this report does not cover: the node's to "
                      "use, not to publish; the consensus model (coef_, coefs_) is what the report covers")


@dataclass
class GossipResult:
    F: np.ndarray  # (N, d + 1) the nodes' models: each node's mean of its tail broadcasts
    lo: np.ndarray
    hi: np.ndarray
    row_clip: float
    noise_multiplier: float
    report: PrivacyReport | None
    history: dict = field(default_factory=dict)
    rounds: int = 0
    noise_source: str = "party-local"
    quantile: float | None = None
    path: np.ndarray | None = None  # (T, d + 1) the mean broadcast model after every gradient round
    ledger: object = None
    regime: str = ""  # the schedule's regime (schedule.default_schedule)
    momentum: float = 0.0  # β of the heavy-ball steps (the schedule's, or the caller's)
    node_models: np.ndarray | None = None  # (N, d + 1) each node's model recalibrated on its own rows (or None)
    calibration: np.ndarray | None = None  # (N, 2) each node's Platt (a_i, b_i) (.calibration)
    # the DP base rate: the pooled noisy positive share of the first range round, clipped as for the starting
    # intercept (a post-processing of released counts; None without range rounds or in a non-private run)
    base_rate: float | None = None
    # each node's choice among its recalibrated consensus, its own model and its own base rate (choice.py: local
    # cross-validation on its own rows), the held-out losses (N, 3) it judged by, and why
    choices: tuple = ()
    choice_cv: np.ndarray | None = None
    reasons: tuple = ()
    spaces: tuple = ()  # each node model's rows: "prepared" or "raw" (its own model, choice.py)


def fit_gossip(Xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], G, *, epsilon: float | None,
               delta: float = DEFAULT_DELTA, rounds: int | None = None, range_rounds: int = DEFAULT_RANGE_ROUNDS,
               bounds=None, row_clip: float | None = None, momentum: float | None = None,
               ridge: float = DEFAULT_RIDGE, tail: float | None = None, backend=None, noise_seed: int | None = None,
               monitor: bool = False, callbacks: Sequence = (), checkpoint_dir=None, checkpoint_every: int | None = None,
               resume_from=None, recalibrate: bool = False) -> GossipResult:
    """Run the protocol on node datasets ``Xs``/``ys`` (±1) over the connected graph ``G``.

    ``epsilon=None``: no noise (a non-private run; without ``bounds`` the column bounds then come from the
    exact counts of the same bisection). ``bounds``: declared (lo, hi), each (d,) — no range rounds.
    ``row_clip``: R (default √d: the column clip alone bounds ‖z‖). The schedule — T (``rounds=None``), the step
    η, the heavy-ball ``momentum`` β (``None``: the schedule's) and ``tail`` (``None``: each node's model is the
    mean of its broadcasts over the last ``tail`` share of the rounds, :func:`average_from`; post-processing) — is
    :func:`default_schedule` of the public n, d, N and ε.
    A peer-to-peer backend needs declared ``bounds`` (the DP column range pools every node's counts through the
    coordinator). ``checkpoint_dir``/``checkpoint_every``/``resume_from``: the engine's checkpoints (every
    release is a round, so a resumed run releases nothing twice). ``recalibrate``: each node then chooses, by
    cross-validation on its own rows, between its consensus model recalibrated on them, its own model and its own
    base rate (:mod:`dpadmm.algorithms.gossip.choice`: nothing released, no ε), computed here on ``Xs[i]``/``ys[i]``
    as node i computes it."""
    N = len(Xs)
    d = int(Xs[0].shape[1])
    n = int(sum(x.shape[0] for x in Xs))
    A, V = adjacency(G)
    R = float(np.sqrt(d)) if row_clip is None else float(row_clip)
    K = 0 if bounds is not None else int(range_rounds)
    sched = default_schedule(n, d, epsilon, n_nodes=N, delta=delta, range_rounds=K, row_clip=R, ridge=ridge)
    rounds = sched.rounds if rounds is None else int(rounds)
    tail = sched.tail if tail is None else float(tail)
    momentum = sched.momentum if momentum is None else float(momentum)
    sens = [mech.range_sensitivity(d, labels=True)] * min(K, 1) + [mech.range_sensitivity(d)] * (K - 1) \
        + [mech.gradient_sensitivity(R)] * int(rounds)
    nm = 0.0 if epsilon is None else noise_multiplier_for(epsilon, delta, sens)
    q = mech.quantile_level(nm, d, n, N)
    eta = sched.step_scale * step_size(R, ridge)
    names = tuple(f"node{i}" for i in range(N))
    backend = backend if backend is not None else InProcessBackend()
    p2p = {}
    if getattr(backend, "peer_to_peer", False):  # nodes exchange with their neighbours; each checks the graph
        if bounds is None:
            raise InvalidParameterError("a peer-to-peer gossip run needs declared column bounds (bounds=, --bounds "
                                        "FILE): the DP column range pools every node's counts through the coordinator.")
        p2p["neighbours"] = {names[i]: [names[j] for j in G.neighbors(i)] for i in range(N)}
    s0 = average_from(rounds, tail)
    opts = dict(max_degree=int(V.max()), n_nodes=N, n_total=n, rounds=int(rounds), range_rounds=K,
                noise_multiplier=nm, step=eta, momentum=float(momentum), ridge=float(ridge), row_clip=R, average_from=s0,
                bounds=None if bounds is None else (np.asarray(bounds[0], float), np.asarray(bounds[1], float)))
    specs = [PartySpec.of(GOSSIP_PROTOCOL, nm_, GOSSIP_PROTOCOL.setup_type(name=nm_, X=Xs[i], y=ys[i],
                                                        options=dict(opts, degree=int(V[i]))), owner=nm_)
             for i, nm_ in enumerate(names)]
    pos_sd = math.sqrt(N) * nm * mech.range_sensitivity(d, labels=True)
    hub = engine.Hub(RouterConfig(A, names, d, n, K, q, opts["bounds"], s0, pos_sd), init_router, router_step,
                     router_metrics, random=False)  # the router draws nothing

    def prepared_rows(b, _):
        """In-process simulation parties: each node's own prepared rows (its state), for its recalibration."""
        if not (recalibrate and getattr(b, "collects_models", False) and hasattr(b, "hosts")):
            return None
        rows = [getattr(getattr(b.hosts.get(nm), "state", None), "Xt", None) for nm in names]
        return rows if all(r is not None for r in rows) else None

    fitted = runner.run(backend, specs, hub, rounds=K + int(rounds), noise_seed=noise_seed, callbacks=callbacks,
                        monitor=monitor, stop_on_convergence=False, checkpoint_dir=checkpoint_dir,
                        checkpoint_every=checkpoint_every, resume_from=resume_from, after=prepared_rows, **p2p)
    res = fitted.result
    st = res.hub_state
    report = None
    if epsilon is not None:
        src = ("declared by the operator" if bounds is not None else
               f"DP estimate: pooled noisy counts, {K} bisection rounds, quantiles {q:.3g} and {1 - q:.3g} "
               f"(search range ±{mech.SEARCH_LIMIT:g}), paid from the same budget")
        notes = (RECALIBRATION_NOTE,) if recalibrate and all(isinstance(x, np.ndarray) for x in Xs) else ()
        report = finish(gossip_report(res.ledger, delta=delta, rounds=int(rounds), range_rounds=K, noise_multiplier=nm,
                                      bounds_source=src, notes=notes), threat_model="consensus",
                        noise_source=res.noise_source)
    F = (st.F if st.avg is None else st.avg).copy()
    lo, hi = np.asarray(st.lo, float), np.asarray(st.hi, float)
    node_models = calib = None
    if recalibrate and all(isinstance(x, np.ndarray) for x in Xs):  # node i's own step on its own rows, after
        # the last round (nothing leaves it: node.node_model computes the same at a deployed node)
        Xts = fitted.after or [mech.prepare(Xs[i], lo, hi, R) for i in range(N)]  # the nodes' rows, prepared
        own = [node_choice.choose(Xts[i], ys[i], F[i], X_raw=Xs[i]) for i in range(N)]
        node_models = np.array([c.model for c in own])
        calib = np.array([(c.a, c.b) for c in own])
    return GossipResult(F, lo, hi, R, nm, report, dict(res.history), res.rounds, res.noise_source,
                        None if bounds is not None else q, np.asarray(st.path) if st.path else None, res.ledger,
                        sched.regime, float(momentum), node_models, calib,
                        1.0 / (1.0 + math.exp(-st.intercept0)) if epsilon is not None and K > 0 else None,
                        *((tuple(c.choice for c in own), np.array([c.cv for c in own]), tuple(c.reason for c in own),
                           tuple(c.space for c in own)) if node_models is not None else ((), None, (), ())))


def fit_estimator(self, X, y, callbacks, **checkpoints):
    """Fit ``ConsensusLogisticRegression`` ``self`` by noisy-gradient gossip; sets its fitted attributes.
    ``checkpoints``: ``checkpoint_dir``, ``checkpoint_every``, ``resume_from`` (:func:`fit_gossip`)."""
    if not self._use_gossip():  # M-ADMM's DP base-rate fallback releases after the rounds, outside a checkpoint
        raise InvalidParameterError("checkpoints and resume are for the gossip protocol (epsilon= alone).")
    if self.epsilon is not None:
        check_positive("epsilon", self.epsilon)
    check_positive("delta", self.delta)
    if not self.delta < 1:
        raise InvalidParameterError(f"delta must be in (0, 1), got delta={self.delta!r}.")
    T = None if self.rounds is None else check_int("rounds", self.rounds)
    if self.row_clip is not None:
        check_positive("row_clip", self.row_clip)
    if self.normalize:
        raise InvalidParameterError("normalize=True rescales whole rows and erases each column's scale; the gossip "
                                    "protocol bounds every column itself (bounds=, or a DP range): drop normalize.")
    seed = check_random_state(self.random_state)
    nseed = noise_seed(self.random_state)
    Xs, ys, self.classes_ = self._node_data(X, y, seed)
    N, d = len(Xs), Xs[0].shape[1]
    bounds = None
    if self.bounds is not None:
        try:
            lo, hi = (np.asarray(b, dtype=np.float64).reshape(-1) for b in self.bounds)
        except (TypeError, ValueError):
            raise InvalidParameterError("bounds must be a pair (lo, hi) of length-d sequences.") from None
        if lo.shape != (d,) or hi.shape != (d,) or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))
                                                          and np.all(hi > lo)):
            raise InvalidParameterError(f"bounds must be {d} finite pairs with lo < hi, one per column.")
        bounds = (lo, hi)
    graph_rng = np.random.default_rng(np.random.SeedSequence(seed.entropy, spawn_key=(2**21,)))
    G = make_graph(self.topology, N, random_state=graph_rng)
    if G.number_of_nodes() != N:
        raise InvalidParameterError(f"the graph has {G.number_of_nodes()} nodes but there are {N} node datasets.")
    private = self.epsilon is not None
    monitor = (not private) if self.monitor is None else bool(self.monitor)
    recal = getattr(self, "recalibrate", None)  # estimators pickled before the parameter existed: None
    if recal is not None and not isinstance(recal, (bool, np.bool_)):
        raise InvalidParameterError(f"recalibrate must be True, False or None (in private fits), got "
                                    f"recalibrate={recal!r}.")
    recal = private if recal is None else bool(recal)
    res = fit_gossip(Xs, ys, G, epsilon=self.epsilon, delta=float(self.delta), rounds=T, bounds=bounds,
                     row_clip=self.row_clip, backend=get_backend(self.backend), noise_seed=nseed,
                     monitor=monitor, callbacks=callbacks, recalibrate=recal, **checkpoints)
    self._gossip = (res.lo, res.hi, res.row_clip)
    self.coefs_ = res.F[:, :d].copy()
    self.intercepts_ = res.F[:, d].copy()
    w = res.F.mean(axis=0)
    self.coef_, self.intercept_ = w[:d].copy(), float(w[d])
    if res.node_models is None:
        self.node_coefs_ = self.node_intercepts_ = self.calibration_ = None
    else:  # each node's own model, recalibrated on its own rows (algorithms.gossip.calibration)
        self.node_coefs_, self.node_intercepts_ = res.node_models[:, :d].copy(), res.node_models[:, d].copy()
        self.calibration_ = res.calibration
    # which model each node uses (algorithms.gossip.choice: local cross-validation on its own rows, nothing released)
    self.node_choice_ = list(res.choices) if res.node_models is not None else None
    self.node_choice_cv_ = res.choice_cv  # (N, 3): consensus, own, base-rate held-out log loss — local evaluation
    self.node_choice_reasons_ = list(res.reasons) if res.node_models is not None else None
    self.node_spaces_ = list(res.spaces) if res.node_models is not None else None
    self.column_bounds_ = np.column_stack([res.lo, res.hi])
    self.bounds_source_ = "declared" if bounds is not None else ("dp-estimate" if private else "exact (non-private)")
    self.range_quantile_ = res.quantile
    self.noise_multiplier_ = res.noise_multiplier
    self._margin_clip = None
    self.handed_over_ = self.dp_base_rate_ = self.comparison_ = None
    _, V = adjacency(G)
    self.graph_, self.node_sizes_, self.degrees_ = G, np.array([x.shape[0] for x in Xs]), V
    self.n_iter_ = res.rounds  # every round: range rounds + gradient rounds
    self.rounds_ = 0 if res.path is None else int(len(res.path))  # gradient rounds T
    self.range_rounds_ = int(res.rounds - self.rounds_)  # K (0 with declared bounds)
    self.noise_source_ = res.noise_source
    self.n_features_in_ = d
    self.converged_ = False
    self.history_ = History(res.history, monitored=monitor, private=private)
    self.path_ = res.path  # (T, d + 1): the mean broadcast model (intercept last) after every gradient round
    self.schedules_ = {}
    self.regime_ = res.regime  # the public schedule's regime: signal-rich or noise-limited (schedule.py)
    self.momentum_ = res.momentum  # its heavy-ball β
    self.privacy_ = res.report
    self._gossip_ledger = res.ledger
    self._gossip_base_rate = res.base_rate  # the DP base rate (GossipResult.base_rate), for the CLI's baseline
    return self
