"""Worst-case audit games of functional quantile regression [Zhou]: the FDP-ADMM rounds and the pooled
statistics against a hostile central machine (the instances are described in :mod:`.audit_worst_case`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np

from .audit_games import CANARY, DELTA, EPSILON, Game, ZeroRNG, calibrated_nm as _nm
from .audit_plants import plant_half, plant_patch, plant_reuse_rounds, plant_setup_option
from ..algorithms.functional.messages import HubMessage
from .. import engine
from ..algorithms.functional import messages as functional_messages, party as functional_party
from ..backends import PartySpec
from ..kernels import fpca
from ..algorithms.functional import statistics as fs
from ..algorithms.functional.messages import Setup
from ..algorithms.functional.protocol import PROTOCOL as FUNCTIONAL
from ..algorithms.functional.protocol import STATISTICS_PROTOCOL as STATISTICS
from ..algorithms.functional.statistics import StatsSetup

# ----------------------------------------------------------------------------- functional FDP-ADMM
F_M, F_K, F_T, F_TAU, F_Y = 8, 2, 4, 0.9, 2.5
F_RHOS = (1.0, 8.0, 1.0, 8.0)  # hub-chosen, widely apart: a σ priced at a ρ other than the step's shows
F_PUSH = 5.0


class IdentityBasis:
    """A public 'basis' whose scores are the rows themselves (the audit hands the worker its scores)."""

    def scores(self, X):
        return np.asarray(X, float)


@dataclass(frozen=True)
class _FHub:
    w: np.ndarray  # (T, 1, 1, K) consensus sent at each position
    rhos: tuple


def fhub_msg(cfg: _FHub, t: int):
    pos = t % len(cfg.rhos)
    return {"worker1": HubMessage(0, cfg.w[pos], cfg.rhos[pos])}  # round 0 every time: no dual update, fixed eta


def fhub_init(cfg: _FHub):
    return 0, fhub_msg(cfg, 0)


def fhub_step(cfg: _FHub, state, outboxes, *, rng):
    return state + 1, fhub_msg(cfg, state + 1), []


def _functional_data():
    gen = np.random.default_rng(13)
    X = gen.normal(size=(F_M, F_K))
    X *= 0.5 / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = gen.normal(size=F_M)
    u = np.zeros(F_K)
    u[0] = 1.0
    X[CANARY], y[CANARY] = 10.0 * u, F_Y  # outside the score clip c_1 = 1
    Xb = X.copy()
    Xb[CANARY] = -10.0 * u
    return X, Xb, y, u


def _functional_options(c1: float = 1.0) -> functional_messages.FunctionalOptions:
    return functional_messages.FunctionalOptions(
        rho=F_RHOS[0], n_workers=1, penalty="l2", fit_intercept=False, local_step="linearized", step="constant",
        eta0=1.0, c1=c1, emit_events=True, worker_names=("worker1",))


def functional_game(*, plant=None, bug: str = "", tag: str = "", backend: str = "inprocess") -> Game:

    X, Xb, y, u = _functional_data()
    nm = _nm(F_T)
    settings = functional_messages.Settings.make(F_TAU, noise_multiplier=nm, lam=0.05)
    quiet = functional_messages.Settings.make(F_TAU, noise_multiplier=0.0, lam=0.05)
    w = np.zeros((F_T, 1, 1, F_K))
    # the push in the first round of four: its effect (the step reads the consensus it was sent the round before) is
    # in the second, inside the fit — every audited run is a fresh fit, nothing carries into the next
    w[0, 0, 0] = -F_PUSH * u
    hub_cfg = _FHub(w, F_RHOS)
    basis = IdentityBasis()

    def setup(side, total):
        record = Setup(name="worker1", X=Xb if side else X, y=y, basis=basis, score_scale=1.0, y_loc=0.0, y_scale=1.0,
                      clip=1.0, settings=settings, options=_functional_options())
        return ([PartySpec.of(FUNCTIONAL, "worker1", record, owner="worker1")],
                engine.Hub(hub_cfg, fhub_init, fhub_step))

    honest = [functional_party.setup_party_from_curves("worker1", D, y, basis, 1.0, 0.0, 1.0, 1.0, quiet, _functional_options())
              for D in (X, Xb)]

    def view(rec):
        return np.stack([np.ravel(m.w_tilde) for m in rec["streams"]["worker1"][:rec["total"]]])[:, None]

    def replay(side, rec):
        inboxes = rec["streams"]["hub->worker1"]
        sent = rec["streams"]["worker1"]
        outs = ([], [])
        for i in range(rec["total"]):
            for k, (cfg, st0) in enumerate(honest):
                if i == 0:
                    st = st0
                else:
                    st = functional_messages.PartyState(w=np.asarray(sent[i - 1].w_tilde), w_tilde=np.asarray(sent[i - 1].w_tilde),
                                       gamma=np.asarray(sent[i - 1].gamma), w_hub=np.asarray(inboxes[i - 1].w),
                                       rho=float(inboxes[i - 1].rho))
                outs[k].append(np.ravel(functional_party.party_step(cfg, st, inboxes[i], rng=ZeroRNG())[0].w))
        return np.stack(outs[0])[:, None], np.stack(outs[1])[:, None]

    return Game(
        name=f"worst-case zhou-fdp-admm{tag}", algorithm="FDP-ADMM [Zhou], linearised step",
        relation="record-replace", adversary="the central machine: chooses w and rho it sends; sees every w~",
        description=f"canary curve with scores +-10u (clipped to c_1 = 1), tau = {F_TAU:g}, m = {F_M}, hub-chosen "
                    f"consensus and rho 1/8, {F_T} rounds, epsilon = {EPSILON:g} at delta = {DELTA:g}",
        rounds=F_T, setup=setup, view=view, replay=replay, mechanism_party="worker1", delta=DELTA,
        plant=plant, broken=plant is not None, bug=bug, backend=backend,
        note="ratio limit tau = 0.9 in three rounds of four, 2 tau - 1 = 0.8 in the second")


def functional_plants() -> list[Game]:
    def noclip(specs, hub):
        return specs, hub, mock.patch.object(fpca, "clip_rows", lambda Z, c: Z)

    half = functional_game(plant=plant_half("worker1"), tag=" (planted: noise x1/2)",
                           bug="the worker's standard-normal draws halved; its ledger keeps sigma")
    half.runs_factor = 10  # 3,000 fresh fits per side: at 1,500 its bound sits at the claim (0.95-1.08 of it)
    return [
        half,
        functional_game(plant=plant_reuse_rounds("worker1"), tag=" (planted: draw reused across rounds)",
                        bug="the worker reuses its previous standard-normal draw every second round"),
        functional_game(plant=noclip, tag=" (planted: clipping skipped)",
                        bug="kernels.fpca.clip_rows is the identity: the canary's scores (norm 10) are not clipped to c_1"),
        functional_game(plant=plant_setup_option("worker1", c1=1e-3), tag=" (planted: coordinator-supplied sensitivity)",
                        bug="the worker prices its release with the c1 = 1e-3 the central machine sent, its scores "
                            "clipped at 1"),
    ]


# ----------------------------------------------------------------------------- functional pooled statistics
S_M, S_T, S_CLIP = 10, 6, 1.0


@dataclass(frozen=True)
class _SHub:
    request: Any  # the StatsRequest sent every round


def shub_init(cfg: _SHub):
    return 0, {"worker1": cfg.request}


def shub_step(cfg: _SHub, state, outboxes, *, rng):
    return state + 1, {"worker1": cfg.request}, []


def _stats_data(stage: str):
    gen = np.random.default_rng(17)
    X = 0.2 * gen.normal(size=(S_M, S_T))
    y = 0.5 * gen.uniform(-1, 1, S_M)
    u = np.zeros(S_T)
    u[0] = 1.0
    Xb, yb = X.copy(), y.copy()
    if stage == "mean":  # curve +-10u (clipped to c_X u), response +-10 (clipped to the range's ends)
        X[CANARY], y[CANARY], Xb[CANARY], yb[CANARY] = 10.0 * u, 10.0, -10.0 * u, -10.0
    else:  # centred curves of norm 10 (clipped to c_2) at -15 and 105 degrees in the first two coordinates: u u^T -
        # u' u'^T is diagonal and u^T u' = -c_2^2/2, the released upper triangle moves by (3/sqrt 2) c_2^2, its bound
        a, b = np.radians(-15.0), np.radians(105.0)
        X[CANARY], Xb[CANARY] = 0.0, 0.0
        X[CANARY, :2], Xb[CANARY, :2] = 10.0 * np.array([np.cos(a), np.sin(a)]), 10.0 * np.array([np.cos(b), np.sin(b)])
    return X, y, Xb, yb


def stats_game(stage: str, *, plant=None, bug: str = "", tag: str = "") -> Game:

    X, y, Xb, yb = _stats_data(stage)
    q = np.ones(S_T)  # quadrature weights 1: scaled curves are the curves
    nm = _nm(1)
    req = (fs.StatsRequest("mean", curve_clip=S_CLIP, y_range=(-1.0, 1.0)) if stage == "mean" else
           fs.StatsRequest("moments", curve_clip=S_CLIP, center=np.zeros(S_T)))

    def setup(side, total):
        record = StatsSetup(name="worker1", X=Xb if side else X, y=yb if side else y, q=q, noise_multiplier=nm)
        return ([PartySpec.of(STATISTICS, "worker1", record, owner="worker1")],
                engine.Hub(_SHub(req), shub_init, shub_step))

    def released(msg):
        v = msg.values["mean"] if stage == "mean" else msg.values["S"][np.triu_indices(S_T + 1)]
        return np.asarray(v, float)

    means = []
    for A, b in ((X, y), (Xb, yb)):
        cfg = fs.setup_stats("worker1", A, b, q, nm)[0]
        means.append(released(fs.stats_step(cfg, None, req, rng=ZeroRNG())[1]))

    def view(rec):
        return np.stack([released(m) for m in rec["streams"]["worker1"][:rec["total"]]])[:, None]

    def replay(side, rec):
        R = rec["total"]
        return np.tile(means[0], (R, 1, 1)), np.tile(means[1], (R, 1, 1))

    what = ("clipped curve sum and response sums (sensitivity sqrt(10))" if stage == "mean" else
            "centred clipped moment matrix, upper triangle (sensitivity (3/sqrt 2) c_2^2)")
    return Game(
        name=f"worst-case functional-statistics[{stage}]{tag}", algorithm="functional QR pooled statistics",
        relation="record-replace", adversary="the central machine: chooses the request (clip, range, centre); sees "
                                             "the noisy statistic",
        description=f"one worker's {what}, canary outside the clip, one release, epsilon = {EPSILON:g} at "
                    f"delta = {DELTA:g}",
        rounds=1, setup=setup, view=view, replay=replay, mechanism_party="worker1", delta=DELTA, plant=plant,
        broken=plant is not None, bug=bug, runs_factor=20,  # one release per run: cheap
        note="ratio limit sqrt(8/10) = 0.89" if stage == "mean" else
             "ratio limit 1: the canary pair attains the proved (3/sqrt 2) c_2^2 (was priced 4 c_2^2 until 2026-11: "
             "ratio limit 0.53)")


def stats_plants() -> list[Game]:
    return [stats_game("mean", plant=plant_half("worker1"), tag=" (planted: noise x1/2)",
                       bug="the worker's standard-normal draws halved; its ledger keeps sigma"),
            stats_game("moments", plant=plant_half("worker1"), tag=" (planted: noise x1/2)",
                       bug="the worker's standard-normal draws halved; its ledger keeps sigma"),
            stats_game("mean", plant=plant_patch("worker1", fpca, "clip_rows", lambda Z, c: Z),
                       tag=" (planted: clipping skipped)",
                       bug="kernels.fpca.clip_rows is the identity: the canary curve (norm 10) is not clipped to c_X")]


# ----------------------------------------------------------------------------- the private-FPCA statistics pipeline
P_STEPS = 8  # bisection counts of the DP quantile (functional_statistics.QUANTILE_STEPS)


@dataclass(frozen=True)
class _PHub:
    requests: tuple  # the StatsRequest of each position of a run


def phub_init(cfg: _PHub):
    return 0, {"worker1": cfg.requests[0]}


def phub_step(cfg: _PHub, state, outboxes, *, rng):
    t = state + 1
    return t, {"worker1": cfg.requests[t % len(cfg.requests)]}, []


def pipeline_game(*, plant=None, bug: str = "", tag: str = "") -> Game:
    """The statistics a private-FPCA fit releases before its rounds, composed in one run: the ``mean`` release, the
    ``moments`` release on the full grid (no projection: what the private-FPCA basis is computed from) and the
    DP quantile's bisection counts, at the estimator's budget split (the counts at z·√B, B rounds together
    costing one release at z). The hub is the adversary: its requests are clip 1, range (−1, 1), centre 0, and a
    threshold 0 in every bisection round (the canary's response +10 / −10 sits on either side of it)."""

    X, y, _, _ = _stats_data("mean")  # curve +-10u, response +-10: every release moves by (nearly) its sensitivity
    Xb, yb = X.copy(), y.copy()
    Xb[CANARY], yb[CANARY] = -X[CANARY], -y[CANARY]
    q = np.ones(S_T)
    nm = _nm(3)  # mean, moments, and the B counts (one release's worth)
    reqs = ((fs.StatsRequest("mean", curve_clip=S_CLIP, y_range=(-1.0, 1.0)),
             fs.StatsRequest("moments", curve_clip=S_CLIP, center=np.zeros(S_T)))
            + tuple(fs.StatsRequest("quantile", threshold=0.0) for _ in range(P_STEPS)))
    width = (S_T + 1) * (S_T + 2) // 2

    def released(msg):
        v = {"mean": lambda: msg.values["mean"], "quantile": lambda: msg.values["count"],
             "moments": lambda: msg.values["S"][np.triu_indices(S_T + 1)]}[msg.stage]()
        return np.pad(np.asarray(v, float), (0, width - np.size(v)))  # zero padding: the same on both sides

    def setup(side, total):
        record = StatsSetup(name="worker1", X=Xb if side else X, y=yb if side else y, q=q, noise_multiplier=nm,
                           quantile_multiplier=nm * math.sqrt(P_STEPS))
        return ([PartySpec.of(STATISTICS, "worker1", record, owner="worker1")],
                engine.Hub(_PHub(reqs), phub_init, phub_step))

    means = []
    for A, b in ((X, y), (Xb, yb)):
        cfg = fs.setup_stats("worker1", A, b, q, nm, nm * math.sqrt(P_STEPS))[0]
        means.append(np.stack([released(fs.stats_step(cfg, None, r, rng=ZeroRNG())[1]) for r in reqs])[:, None])

    def view(rec):
        return np.stack([released(m) for m in rec["streams"]["worker1"][:rec["total"]]])[:, None]

    def replay(side, rec):
        R = rec["total"] // len(reqs)
        return np.tile(means[0], (R, 1, 1)), np.tile(means[1], (R, 1, 1))

    return Game(
        name=f"worst-case functional-statistics[private-fpca pipeline]{tag}",
        algorithm="functional QR pooled statistics (private-FPCA basis)", relation="record-replace",
        adversary="the central machine: chooses every request (clips, range, centre, thresholds); sees every "
                  "noisy statistic",
        description=f"one worker's mean release, full-grid moment release and {P_STEPS} bisection counts in one run, "
                    f"canary curve +-10u and response +-10, epsilon = {EPSILON:g} at delta = {DELTA:g} over the "
                    f"{2 + P_STEPS} releases",
        rounds=len(reqs), setup=setup, view=view, replay=replay, mechanism_party="worker1", delta=DELTA, plant=plant,
        broken=plant is not None, bug=bug, runs_factor=2,
        note="ratio limit about 0.93: mean sqrt(8/10), moments 2/(3/sqrt 2) (antipodal canary), counts 1")
